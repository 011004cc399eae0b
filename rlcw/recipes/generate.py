"""Sample one story per prompt into story records (`<run>/samples/stories.jsonl`).

    rlcw generate model.name=runs/grpo/checkpoints/final data.split=eval
    rlcw generate model.name=runs/export/model system=tuned
    rlcw generate --config configs/generate/agents_room_cpu.yaml variant=plan_write data.source=../shared/data/tell-me-a-story

`generator=default` samples the story in one call (`sampling.*`). `generator=agents_room` runs an
Agents' Room variant (`variant=e2e|plan|write|plan_write`, `rlcw.agents`) with per-agent token
caps and a context budget (`agents.*`; a scratchpad that would not fit is shortened, longest
section first, and each cut is listed in the record's `meta.warnings`). Its backend is the local
model (`agents.adapters`: agent -> LoRA folder from `rlcw train-agents`) or an OpenAI-compatible
server (`agents.backend=server`, `agents.server.*` = the judge client's settings).
`data.format=tmas` reads TELL ME A STORY (`data.source`: folder, file or hub id; `data.split`) and
keeps the human story as each record's `reference`. The system prompt and chat template are
`model.system_prompt` / `model.chat_template`; sampling is seeded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rlcw.data.prompts import load_prompts
from rlcw.data.records import write_stories
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, generate_stories
from rlcw.metrics.text import count_words
from rlcw.models import load_causal_lm, load_tokenizer
from rlcw.recipes.common import ModelConfig, stage_run


@dataclass
class GenDataConfig:
    prompts: str = "bundled"  # data.format=prompts: "bundled" or a prompt file
    format: str = "prompts"  # prompts | tmas
    source: str | None = None  # data.format=tmas: folder, jsonl file or hub id
    split: str | None = "eval"  # prompts: train|eval; tmas: train|validation|test
    max_prompts: int | None = 8


@dataclass
class SamplingSection:
    max_new_tokens: int = 96
    temperature: float = 0.8
    top_p: float = 0.95
    batch_size: int = 8


@dataclass
class AgentsSection:
    backend: str = "local"  # local | server
    planning_tokens: int = 256  # new-token cap of each planning agent
    writing_tokens: int = 512  # of each writing agent
    finalizer_tokens: int = 1024
    e2e_tokens: int = 1024
    context_tokens: int = 2048  # prompt + scratchpad + new tokens must fit this
    adapters: dict[str, str] = field(default_factory=dict)  # agent -> LoRA adapter folder (local backend)
    server: dict[str, Any] = field(default_factory=dict)  # judge ClientConfig fields (server backend)


@dataclass
class GenerateConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: GenDataConfig = field(default_factory=GenDataConfig)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    generator: str = "default"  # default | agents_room
    variant: str = "plan_write"  # agents_room: e2e | plan | write | plan_write
    agents: AgentsSection = field(default_factory=AgentsSection)
    system: str = "model"  # the story records' `system` field (who wrote them); agents_room default: ar_<variant>
    output_dir: str = "runs"
    run_name: str = "generate"
    seed: int = 0


def load_rows(data: GenDataConfig) -> list[dict]:
    if data.format == "tmas":
        from rlcw.data.tmas import load_tmas, prompt_rows

        if not data.source:
            raise RlcwError("data.format=tmas needs data.source", hint="a TELL ME A STORY folder, jsonl file or hub id")
        rows = prompt_rows(load_tmas(data.source, [data.split] if data.split else None))
    elif data.format == "prompts":
        rows = load_prompts(data.prompts, data.split)
    else:
        raise RlcwError(f"unknown data.format '{data.format}'", hint="use prompts or tmas")
    return rows[: data.max_prompts or None]


def build_backend(cfg: GenerateConfig, model, tokenizer):
    from rlcw.agents.backends import LocalBackend, attach_adapters, server_backend

    a, s = cfg.agents, cfg.sampling
    if a.backend == "server":
        return server_backend(dict(a.server), cfg.model.system_prompt, s.temperature)
    if a.backend != "local":
        raise RlcwError(f"unknown agents.backend '{a.backend}'", hint="use local or server")
    if a.adapters:
        model = attach_adapters(model, dict(a.adapters))
    return LocalBackend(model, tokenizer, cfg.model.system_prompt, temperature=s.temperature, top_p=s.top_p,
                        batch_size=s.batch_size, adapters=tuple(a.adapters))


def agents_room_stories(cfg: GenerateConfig, rows: list[dict], model, tokenizer) -> list[dict]:
    from rlcw.agents.variants import AgentCaps, check_variant, run_variant

    check_variant(cfg.variant)
    a = cfg.agents
    caps = AgentCaps(planning=a.planning_tokens, writing=a.writing_tokens, finalizer=a.finalizer_tokens, e2e=a.e2e_tokens)
    name = f"ar_{cfg.variant}" if cfg.system == "model" else cfg.system
    return run_variant(rows, build_backend(cfg, model, tokenizer), cfg.variant, caps, context_tokens=a.context_tokens,
                       seed=cfg.seed, system_name=name)


def main(cfg: GenerateConfig) -> dict:
    if cfg.generator not in ("default", "agents_room"):
        raise RlcwError(f"unknown generator '{cfg.generator}'", hint="use default or agents_room")
    with stage_run(cfg, "generate") as run:
        rows = load_rows(cfg.data)
        server = cfg.generator == "agents_room" and cfg.agents.backend == "server"
        model = tokenizer = None
        if not server:
            tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
            apply_chat_template_file(tokenizer, cfg.model.chat_template)
            model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        start = time.perf_counter()
        if cfg.generator == "agents_room":
            stories = agents_room_stories(cfg, rows, model, tokenizer)
        else:
            s = cfg.sampling
            stories = generate_stories(
                model, tokenizer, rows, system_prompt=cfg.model.system_prompt, system_name=cfg.system,
                max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, batch_size=s.batch_size, seed=cfg.seed,
            )
            refs = {r["id"]: r["reference"] for r in rows if r.get("reference")}
            stories = [{**x, "reference": refs[x["id"]]} if x["id"] in refs else x for x in stories]
        seconds = time.perf_counter() - start
        path = write_stories(run.samples / "stories.jsonl", stories)
        metrics = {
            "stories": float(len(stories)), "mean_words": sum(count_words(x["story"]) for x in stories) / len(stories),
            "seconds_per_story": seconds / len(stories),
        }
        run.log(0, metrics)
        return run.write_summary("completed", metrics, {"stories": path})
