"""Model helpers of the recipes: the peft LoRA config of the `lora.*` section."""

from __future__ import annotations

from rlcw.recipes.common.sections import LoraSection

# Linear layers of Llama/Qwen/Mistral-style decoder blocks (what "all-linear" means there).
DECODER_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_config(lora: LoraSection, task_type, num_layers: int):
    """A peft LoraConfig from the `lora.*` section (`top_layers` -> layers_to_transform)."""
    from peft import LoraConfig

    layers = None
    modules: str | list[str] = lora.target_modules
    if "," in modules:
        modules = [m.strip() for m in modules.split(",") if m.strip()]
    if lora.top_layers:
        layers = list(range(max(0, num_layers - lora.top_layers), num_layers))
        if modules == "all-linear":  # peft needs names with layers_to_transform
            modules = list(DECODER_LINEAR_MODULES)
    return LoraConfig(
        task_type=task_type,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=modules,
        layers_to_transform=layers,
    )
