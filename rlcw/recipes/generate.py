"""Sample one story per prompt into story records (`<run>/samples/stories.jsonl`).

    rlcw generate model.name=runs/grpo/checkpoints/final data.split=eval
    rlcw generate model.name=runs/export/model system=tuned

The system prompt and chat template are `model.system_prompt` / `model.chat_template`;
sampling is seeded, so two models given the same seed and prompts are comparable side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcw.data.prompts import load_prompts
from rlcw.data.records import write_stories
from rlcw.generation import apply_chat_template_file, generate_stories
from rlcw.metrics.text import count_words
from rlcw.models import load_causal_lm, load_tokenizer
from rlcw.recipes.common import ModelConfig, stage_run


@dataclass
class GenDataConfig:
    prompts: str = "bundled"
    split: str | None = "eval"
    max_prompts: int | None = 8


@dataclass
class SamplingSection:
    max_new_tokens: int = 96
    temperature: float = 0.8
    top_p: float = 0.95
    batch_size: int = 8


@dataclass
class GenerateConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: GenDataConfig = field(default_factory=GenDataConfig)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    system: str = "model"  # the story records' `system` field (who wrote them)
    output_dir: str = "runs"
    run_name: str = "generate"
    seed: int = 0


def main(cfg: GenerateConfig) -> dict:
    with stage_run(cfg, "generate") as run:
        rows = load_prompts(cfg.data.prompts, cfg.data.split)[: cfg.data.max_prompts or None]
        tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        s = cfg.sampling
        stories = generate_stories(
            model, tokenizer, rows, system_prompt=cfg.model.system_prompt, system_name=cfg.system,
            max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, batch_size=s.batch_size, seed=cfg.seed,
        )
        path = write_stories(run.samples / "stories.jsonl", stories)
        metrics = {"stories": float(len(stories)), "mean_words": sum(count_words(x["story"]) for x in stories) / len(stories)}
        run.log(0, metrics)
        return run.write_summary("completed", metrics, {"stories": path})
