"""Export a tuned model for serving: LoRA merged, safetensors, tokenizer + chat template,
generation config with sampling defaults, and a model card; then reload the export and check
its logits equal the merged model's in memory. Optionally push the folder to the Hugging Face Hub.

The model card names the base model, the training data and licences (with attribution), the
reward, the steps and the evaluation results, read from the source run when `model.name` is
`<run>/checkpoints/final` (its config.yaml and summary.json) and from the reward model's own
run. Not here: quantisation (GGUF/AWQ), serving itself (see "Serve" in the card).

    rlcw export model.name=runs/grpo/checkpoints/final
    rlcw export --config configs/export/default.yaml model.name=runs/grpo/checkpoints/final hub.push=true hub.repo_id=me/story-model
    transformers serve runs/export/model --host 127.0.0.1 --port 8000 --device cpu     # OpenAI-compatible
    vllm serve runs/export/model --host 127.0.0.1 --port 8000 --generation-config auto  # GPU hosts
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlcw.config import check_at_least
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, chat_messages
from rlcw.io import atomic_write_text
from rlcw.models import EMBEDDED_ALIAS, is_lora_checkpoint, load_causal_lm, load_tokenizer, lora_base_spec, resolve
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import ModelConfig, RunKeys

# What rlcw knows about the data a run may name, for the card's attribution lines.
KNOWN_DATA = {
    "bundled": "rlcw bundled prompts and stories, written by the rlcw authors (Apache-2.0)",
    "tell-me-a-story": "TELL ME A STORY (Huot et al., 2024, Agents' Room; Google DeepMind): see the dataset's licence",
    "writingprompts": "WritingPrompts (Fan et al., 2018; r/WritingPrompts): see the dataset's licence and Reddit's terms",
    "litbench": "LitBench (Fein et al., 2025; r/WritingPrompts stories and upvotes): see the dataset's licence",
}
BASE_MODELS = {EMBEDDED_ALIAS: "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0, Hugging Face)"}


@dataclass
class GenerationDefaults:
    max_new_tokens: int = 256  # generation_config.json: new-token cap
    temperature: float = 0.8  # generation_config.json: sampling temperature
    top_p: float = 0.95  # generation_config.json: nucleus-sampling p


@dataclass
class HubSection:
    push: bool = False  # upload the exported folder with huggingface_hub
    repo_id: str | None = None  # e.g. "me/story-model"
    private: bool = True  # create the hub repo as private
    token_env: str = "HF_TOKEN"  # environment variable holding a write token
    commit_message: str = "rlcw export"  # commit message of the upload


@dataclass
class ExportConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationDefaults = field(default_factory=GenerationDefaults)
    hub: HubSection = field(default_factory=HubSection)
    atol: float = 1e-4  # max |logit difference| allowed between export and in-memory merged model
    card_notes: str = ""  # extra text for the model card
    run_name: str = "export"  # name of the run folder under output_dir


@torch.no_grad()
def max_logit_diff(a, b, input_ids: torch.Tensor) -> float:
    """Largest absolute difference of two models' logits on the same ids (B, T)."""
    return (a(input_ids=input_ids).logits.float() - b(input_ids=input_ids).logits.float()).abs().max().item()


def _read_run(run_dir: Path | None) -> dict:
    """config (dict) and summary (dict) of an rlcw run folder; empty dicts when absent."""
    import json

    from omegaconf import OmegaConf

    out = {"path": run_dir, "config": {}, "summary": {}}
    if run_dir is None:
        return out
    try:
        if (run_dir / "config.yaml").is_file():
            out["config"] = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml")) or {}
        if (run_dir / "summary.json").is_file():
            out["summary"] = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - the card is best effort; the export itself must not fail on it
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def source_run(model_name: str) -> Path | None:
    """`<run>` when the model is `<run>/checkpoints/<name>` of an rlcw run, else None."""
    path = Path(model_name)
    if path.is_dir() and path.parent.name == "checkpoints" and (path.parent.parent / "config.yaml").is_file():
        return path.parent.parent
    return None


def describe_data(name: str) -> str:
    key = str(name).lower()
    for marker, text in KNOWN_DATA.items():
        if marker in key.replace("_", "-").replace(" ", ""):
            return text if marker != "bundled" or key == "bundled" else f"`{name}` ({text})"
    return f"`{name}` (user-supplied: check its licence before publishing)"


def card_facts(model_name: str) -> dict:
    """What the card says about training: data, reward, steps, evaluation (from the source run)."""
    run = _read_run(source_run(model_name))
    cfg, summary = run["config"], run["summary"]
    data = cfg.get("data", {}) if isinstance(cfg.get("data"), dict) else {}
    names = [data.get("prompts", "bundled")] if data else []
    names += [
        s.get("prompts", data.get("prompts", "bundled"))
        for s in (data.get("sources") or {}).values()
        if isinstance(s, dict)
    ]
    reward = cfg.get("reward", {}) if isinstance(cfg.get("reward"), dict) else {}
    rm_path = reward.get("rm_path")
    rm_run = (
        _read_run(Path(rm_path).parent)
        if rm_path and (Path(rm_path).parent / "config.yaml").is_file()
        else {"config": {}, "summary": {}}
    )
    rm_data = (
        (rm_run["config"].get("data") or {}).get("train_file")
        if isinstance(rm_run["config"].get("data"), dict)
        else None
    )
    if (
        rm_data and (Path(rm_data).parents[1] / "config.yaml").is_file()
    ):  # pairs made by `rlcw build-pairs`: name their stories
        pairs_cfg = _read_run(Path(rm_data).parents[1])["config"]
        stories = (pairs_cfg.get("data") or {}).get("stories") if isinstance(pairs_cfg.get("data"), dict) else None
        rm_data = stories or rm_data
    metrics = summary.get("metrics", {}) if isinstance(summary.get("metrics"), dict) else {}
    return {
        "run": str(run["path"]) if run["path"] else None,
        "command": summary.get("command") or (run["path"] and "unknown"),
        "data": sorted(set(names)),
        "rm_path": rm_path,
        "reward_specs": reward.get("specs"),
        "rm_data": rm_data,
        "rm_metrics": rm_run["summary"].get("metrics", {}) if isinstance(rm_run.get("summary"), dict) else {},
        "steps": metrics.get("train/steps"),
        "eval": {k: v for k, v in metrics.items() if k.startswith("eval/")},
        "status": summary.get("status"),
    }


def _table(metrics: dict) -> list[str]:
    if not metrics:
        return ["(none recorded)"]
    rows = ["| metric | value |", "|---|---|"]
    return rows + [
        f"| {k} | {v:.4g} |" if isinstance(v, (int, float)) else f"| {k} | {v} |" for k, v in sorted(metrics.items())
    ]


def model_card(cfg: ExportConfig, base: str, diff: float, facts: dict) -> str:
    base_text = BASE_MODELS.get(base, f"`{base}`")
    data_lines = [f"- RL prompts: {describe_data(n)}" for n in facts["data"]] or [
        "- RL prompts: not recorded (no source run found)"
    ]
    if facts["rm_data"]:
        data_lines.append(f"- reward-model training pairs: {describe_data(facts['rm_data'])}")
    reward = f"`{facts['rm_path']}`" if facts["rm_path"] else "not recorded"
    if facts["reward_specs"]:
        reward += " with terms " + ", ".join(
            f"{k} ({v.get('type')}, weight {v.get('weight', 1.0)})"
            for k, v in facts["reward_specs"].items()
            if isinstance(v, dict)
        )
    open_licence = base in BASE_MODELS and all(
        describe_data(n) == KNOWN_DATA["bundled"] for n in facts["data"] + [facts["rm_data"] or "bundled"]
    )
    hub_base = base if "/" in base and not Path(base).exists() else BASE_MODELS.get(base, "").split(" ")[0] or base
    g = cfg.generation
    return "\n".join(
        [
            "---",
            "library_name: transformers",
            f"base_model: {hub_base}",
            *(["license: apache-2.0"] if open_licence else []),
            "tags: [rlcw, creative-writing, grpo]",
            "---",
            "# Story model exported by rlcw",
            "",
            f"- base model: {base_text}",
            f"- tuned checkpoint: `{cfg.model.name}`"
            + (f" (run `{facts['run']}`, {facts['status']})" if facts["run"] else ""),
            f"- training steps: {int(facts['steps']) if facts['steps'] is not None else 'not recorded'}",
            f"- reward: {reward}",
            f'- system prompt used in training: "{cfg.model.system_prompt}"',
            f"- generation defaults (generation_config.json, shared with rollouts and evaluation): do_sample=true, temperature {g.temperature}, top_p {g.top_p}, max_new_tokens {g.max_new_tokens}",
            f"- export check: max |logit difference| vs the merged model in memory = {diff:.2e}",
            "",
            "## Data and licences",
            "",
            *data_lines,
            f"- base model weights: {base_text}",
            "",
            "## Evaluation (held-out prompts, last periodic evaluation of the run)",
            "",
            *_table(facts["eval"]),
            "",
            "## Reward model (its own run's final metrics)",
            "",
            *_table(facts["rm_metrics"]),
            "",
            cfg.card_notes,
            "",
            "## Serve",
            "",
            "- CPU or small GPU: `transformers serve <this folder> --host 127.0.0.1 --port 8000` (OpenAI-compatible `/v1/chat/completions`).",
            "- GPU hosts: `vllm serve <this folder> --generation-config auto` (uses this folder's sampling defaults).",
            "",
        ]
    )


def push_to_hub(folder: Path, hub: HubSection) -> str:
    """Upload the export folder; returns the repo URL. Needs a write token in `hub.token_env`."""
    if not hub.repo_id:
        raise RlcwError("hub.push=true needs hub.repo_id", hint="e.g. hub.repo_id=your-name/story-model")
    token = os.environ.get(hub.token_env)
    if not token:
        raise RlcwError(
            f"hub.push=true but {hub.token_env} is not set",
            hint=f"export {hub.token_env}=<a write token from huggingface.co/settings/tokens>",
        )
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(token=token)
    try:
        url = api.create_repo(hub.repo_id, private=hub.private, repo_type="model", exist_ok=True)
        api.upload_folder(
            folder_path=str(folder), repo_id=hub.repo_id, repo_type="model", commit_message=hub.commit_message
        )
    except HfHubHTTPError as exc:
        raise RlcwError(
            f"push to the Hub failed: {exc}", where=hub.repo_id, hint="check the token's write access and the repo id"
        ) from None
    return str(url)


def validate(cfg: ExportConfig) -> None:
    """Every config check, before the run folder is written and before the model loads."""
    check_at_least("atol", cfg.atol, 0.0)
    if cfg.model.chat_template and not Path(cfg.model.chat_template).is_file():
        raise RlcwError(
            "chat template file not found", where="model.chat_template", hint=f"no file {cfg.model.chat_template}"
        )
    h = cfg.hub
    if h.push and not h.repo_id:
        raise RlcwError(
            "hub.push=true needs hub.repo_id", where="hub.repo_id", hint="e.g. hub.repo_id=your-name/story-model"
        )
    if h.push and not os.environ.get(h.token_env):
        raise RlcwError(
            f"hub.push=true but {h.token_env} is not set",
            where="hub.token_env",
            hint=f"export {h.token_env}=<a write token from huggingface.co/settings/tokens>",
        )


def main(cfg: ExportConfig) -> dict:
    validate(cfg)
    with stage_run(cfg, "export") as run:
        src = resolve(cfg.model.name)
        base = lora_base_spec(Path(src)) if is_lora_checkpoint(Path(src)) else cfg.model.name
        merged = load_causal_lm(cfg.model.name, cfg.model.dtype, merge_lora=True).eval()
        tokenizer = load_tokenizer(cfg.model.name)
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        if not tokenizer.chat_template:
            raise RlcwError(
                "the tokenizer has no chat template: a chat server could not format requests",
                where=cfg.model.name,
                hint="set model.chat_template=path/to/template.jinja",
            )
        g = merged.generation_config
        g.do_sample, g.temperature, g.top_p, g.max_new_tokens = (
            True,
            cfg.generation.temperature,
            cfg.generation.top_p,
            cfg.generation.max_new_tokens,
        )
        out = run.path / "model"
        merged.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        if not (out / "chat_template.jinja").is_file():  # older tokenizers keep it in tokenizer_config.json only
            atomic_write_text(out / "chat_template.jinja", tokenizer.chat_template)
        from transformers import AutoModelForCausalLM

        reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=merged.dtype).eval()
        text = tokenizer.apply_chat_template(
            chat_messages(cfg.model.system_prompt, "Write a story about a lighthouse."),
            tokenize=False,
            add_generation_prompt=True,
        )
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        diff = max_logit_diff(merged, reloaded, ids)
        if diff > cfg.atol:
            raise RlcwError(f"export check failed: logits differ by {diff:.3g} (> atol {cfg.atol})", where=str(out))
        atomic_write_text(out / "README.md", model_card(cfg, base, diff, card_facts(cfg.model.name)))
        metrics = {"max_logit_diff": diff, "params": float(sum(p.numel() for p in merged.parameters()))}
        artifacts = {"model": out}
        if cfg.hub.push:
            artifacts["hub"] = push_to_hub(out, cfg.hub)
        run.log(0, metrics)
        return run.write_summary("completed", metrics, artifacts)
