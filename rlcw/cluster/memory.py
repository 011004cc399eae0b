"""Per-GPU memory of model states (weights, gradients, optimizer) by ZeRO stage, from a config.json.

No weights are loaded: parameter counts come from the shapes in a Llama/Qwen2/Mistral-style
`config.json` (hidden size, layers, heads, KV heads, intermediate size, vocabulary, tied
embeddings, Qwen2's q/k/v biases). Bytes per parameter follow DeepSpeed's own estimators
(`deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs`,
`...stage3.estimate_zero3_model_states_mem_needs`, offload off), so for a full fine-tune in mixed
precision the totals equal theirs:

    ZeRO-2: 2 P + 18 P / N          ZeRO-3: 18 P / N + 4 L        (P params, N GPUs, L largest layer)

split as 16-bit weights 2, gradients 6 (16-bit + fp32) and optimizer 12 (fp32 master + Adam m, v)
bytes per parameter; under ZeRO-3 DeepSpeed counts 18 in all (gradients 4) plus the gathered
largest layer. With LoRA only the adapter trains: frozen weights cost their bytes, gradients and
optimizer state only the adapter's. Activations, the CUDA context and fragmentation are not
estimated. fp32 training (no mixed precision) costs 4 + 4 + 8 bytes per trainable parameter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlcw.errors import RlcwError

GIB = 2**30
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class ModelShape:
    """The shapes that decide a decoder's parameter count."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = False

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear module of one decoder layer."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def layer_params(self) -> int:
        lin = sum(a * b for a, b in self.linear_shapes().values())
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return lin + bias + 2 * self.hidden  # + the two RMSNorm weights

    def params(self, head: str = "lm") -> int:
        """Total parameters; head="lm" (causal LM) or "score" (a 1-output sequence-classification head)."""
        embed = self.vocab * self.hidden
        if head == "score":
            out = self.hidden
        elif head == "lm":
            out = 0 if self.tied else embed
        else:
            raise ValueError(f"unknown head {head!r}")
        return embed + self.layers * self.layer_params() + self.hidden + out

    def largest_layer(self) -> int:
        """Parameters of the largest single module (DeepSpeed's `largest_layer_params`)."""
        return max(self.vocab * self.hidden, *(a * b for a, b in self.linear_shapes().values()))

    def lora_params(self, r: int, modules: tuple[str, ...] = LINEAR_MODULES, layers: int | None = None) -> int:
        """LoRA adapter parameters: r * (in + out) per adapted module, on the top `layers` layers (None = all)."""
        shapes = self.linear_shapes()
        unknown = [m for m in modules if m not in shapes]
        if unknown:
            raise RlcwError(f"LoRA target module {unknown[0]!r} is not a decoder linear", hint=", ".join(shapes))
        per_layer = sum(r * (shapes[m][0] + shapes[m][1]) for m in modules)
        return per_layer * min(layers or self.layers, self.layers)


def shape_from_config(config: dict, where: str = "config.json") -> ModelShape:
    """A ModelShape from a transformers config dict (text_config of multimodal configs is used)."""
    config = config.get("text_config", config)
    missing = [k for k in REQUIRED if k not in config]
    if missing:
        raise RlcwError(
            f"config has no {', '.join(missing)}",
            where=where,
            hint="a decoder config.json (Llama, Qwen2, Mistral) with hidden_size, num_hidden_layers, ...",
        )
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return ModelShape(
        hidden=hidden,
        layers=int(config["num_hidden_layers"]),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate=int(config["intermediate_size"]),
        vocab=int(config["vocab_size"]),
        tied=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
    )


def load_shape(path: str | Path) -> ModelShape:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise RlcwError("model config.json not found", where=str(path), hint="point at a model folder or config.json")
    return shape_from_config(json.loads(path.read_text()), str(path))


# Hand-written config.json shapes of the models the shipped cluster configs name (folder = hub id, `/` -> `--`).
SHAPES_DIR = Path(__file__).resolve().parents[2] / "tests" / "assets" / "model_shapes"


def committed_shape(name: str) -> Path | None:
    """The committed config.json of hub id `name` under SHAPES_DIR (offline planning), or None."""
    path = SHAPES_DIR / name.replace("/", "--") / "config.json"
    return path if "/" in name and path.is_file() else None


def find_config(name: str) -> Path | None:
    """config.json of a model: a local folder (or rlcw LoRA checkpoint's base), else the hub cache, else the
    committed shapes of the shipped configs' models (`committed_shape`); None if absent."""
    local = Path(name)
    if (local / "config.json").is_file():
        return local / "config.json"
    base = local / "rlcw_base.json"
    if base.is_file():
        return find_config(json.loads(base.read_text()).get("base", ""))
    if "/" not in name or local.exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(name, "config.json")
    except Exception:  # a malformed id: not in the cache
        hit = None
    return Path(hit) if isinstance(hit, str) else committed_shape(name)


@dataclass(frozen=True)
class StateMemory:
    """Bytes per GPU of one model's training state."""

    weights: int
    gradients: int
    optimizer: int
    gathered: int = 0  # ZeRO-3: the largest layer gathered to compute

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.gathered


def bytes_per_param(precision: str, stage: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes per parameter, as DeepSpeed's estimators count them."""
    if precision == "fp32":
        return 4, 4, 8
    if precision != "mixed":
        raise RlcwError(f"unknown precision {precision!r}", hint="mixed (bf16/fp16 weights) or fp32")
    return 2, (4 if stage == 3 else 6), 12


def model_states(
    total: int, trainable: int, world: int, stage: int, precision: str = "mixed", largest_layer: int = 0
) -> StateMemory:
    """Per-GPU bytes of weights, gradients and optimizer state at ZeRO `stage` (0 = plain DDP) on `world` GPUs."""
    if stage not in (0, 1, 2, 3):
        raise RlcwError(f"ZeRO stage {stage} does not exist", hint="0 (DDP), 1, 2 or 3")
    if world < 1:
        raise RlcwError(f"world_size={world} must be at least 1")
    w, g, o = bytes_per_param(precision, stage)
    weights = w * total // world if stage == 3 else w * total
    grads = g * trainable // world if stage >= 2 else g * trainable
    optim = o * trainable // world if stage >= 1 else o * trainable
    gathered = 4 * largest_layer if stage == 3 else 0
    return StateMemory(weights, grads, optim, gathered)


def deepspeed_estimate(total: int, largest_layer: int, gpus_per_node: int, nodes: int, stage: int) -> int | None:
    """DeepSpeed's own per-GPU figure (offload off) for a full fine-tune at ZeRO-2/3; None if unavailable."""
    try:
        if stage == 2:
            from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

            return estimate_zero2_model_states_mem_needs(total, gpus_per_node, nodes, cpu_offload=False)[1]
        if stage == 3:
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

            return estimate_zero3_model_states_mem_needs(
                total, largest_layer, gpus_per_node, nodes, cpu_offload=False, cpu_offload_params=False
            )[1]
    except ImportError:
        return None
    return None


@dataclass(frozen=True)
class VllmShare:
    """What colocated vLLM takes on each training GPU."""

    reserved: int  # gpu_memory_utilization * GPU memory: vLLM allocates this up front
    weights: int  # the policy's 16-bit weights, split over tensor_parallel GPUs
    kv_cache: int  # what is left for the KV cache (negative: the weights do not fit)


def vllm_share(gpu_bytes: int, utilization: float, params: int, tensor_parallel: int = 1) -> VllmShare:
    if not 0 < utilization < 1:
        raise RlcwError(
            f"rollout.vllm.gpu_memory_utilization={utilization} must be between 0 and 1",
            hint="colocated with training, e.g. 0.3",
        )
    reserved = int(utilization * gpu_bytes)
    weights = 2 * params // tensor_parallel
    return VllmShare(reserved, weights, reserved - weights)


def gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"
