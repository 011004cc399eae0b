"""Export a tuned model for serving: LoRA merged, safetensors, tokenizer + chat template,
generation config with sampling defaults, and a model card; then reload the export and check
its logits equal the merged model's in memory.

    rlcw export model.name=runs/grpo/checkpoints/final
    transformers serve runs/export/model --host 127.0.0.1 --port 8000 --device cpu

Not here yet (RL issue): push_to_hub, serving test, vLLM notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, chat_messages
from rlcw.io import atomic_write_text
from rlcw.models import is_lora_checkpoint, lora_base_spec, load_causal_lm, load_tokenizer, resolve
from rlcw.recipes.common import ModelConfig, stage_run


@dataclass
class GenerationDefaults:
    max_new_tokens: int = 256
    temperature: float = 0.8
    top_p: float = 0.95


@dataclass
class ExportConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationDefaults = field(default_factory=GenerationDefaults)
    atol: float = 1e-4  # max |logit difference| allowed between export and in-memory merged model
    card_notes: str = ""  # extra text for the model card (data, reward, evaluation)
    output_dir: str = "runs"
    run_name: str = "export"
    seed: int = 0


@torch.no_grad()
def max_logit_diff(a, b, input_ids: torch.Tensor) -> float:
    """Largest absolute difference of two models' logits on the same ids (B, T)."""
    return (a(input_ids=input_ids).logits.float() - b(input_ids=input_ids).logits.float()).abs().max().item()


def model_card(cfg: ExportConfig, base: str, diff: float) -> str:
    return f"""---
library_name: transformers
base_model: {base}
tags: [rlcw, creative-writing, grpo]
---
# Story model exported by rlcw

- base model: `{base}` (the embedded default is SmolLM2-135M-Instruct, Apache-2.0, HuggingFaceTB)
- tuned checkpoint: `{cfg.model.name}`
- system prompt used in training: "{cfg.model.system_prompt}"
- generation defaults: temperature {cfg.generation.temperature}, top_p {cfg.generation.top_p}, max_new_tokens {cfg.generation.max_new_tokens}
- export check: max |logit difference| vs the merged model in memory = {diff:.2e}
- training data: prompts and stories written by the rlcw authors (Apache-2.0) unless the run's config says otherwise

{cfg.card_notes}

Serve: `transformers serve <this folder> --host 127.0.0.1 --port 8000` (OpenAI-compatible).
"""


def main(cfg: ExportConfig) -> dict:
    with stage_run(cfg, "export") as run:
        src = resolve(cfg.model.name)
        base = lora_base_spec(Path(src)) if is_lora_checkpoint(Path(src)) else cfg.model.name
        merged = load_causal_lm(cfg.model.name, cfg.model.dtype, merge_lora=True).eval()
        tokenizer = load_tokenizer(cfg.model.name)
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        g = merged.generation_config
        g.do_sample, g.temperature, g.top_p, g.max_new_tokens = True, cfg.generation.temperature, cfg.generation.top_p, cfg.generation.max_new_tokens
        out = run.path / "model"
        merged.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        from transformers import AutoModelForCausalLM

        reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=merged.dtype).eval()
        text = tokenizer.apply_chat_template(chat_messages(cfg.model.system_prompt, "Write a story about a lighthouse."), tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        diff = max_logit_diff(merged, reloaded, ids)
        if diff > cfg.atol:
            raise RlcwError(f"export check failed: logits differ by {diff:.3g} (> atol {cfg.atol})", where=str(out))
        atomic_write_text(out / "README.md", model_card(cfg, base, diff))
        metrics = {"max_logit_diff": diff, "params": float(sum(p.numel() for p in merged.parameters()))}
        run.log(0, metrics)
        return run.write_summary("completed", metrics, {"model": out})
