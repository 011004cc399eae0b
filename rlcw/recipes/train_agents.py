"""Synthetic Agents' Room data from prompt + story pairs, and one LoRA adapter per agent.

A teacher (local model or OpenAI-compatible server, like `generate`'s backends) back-translates
each story (`rlcw.agents.synthetic`): it writes the four planning outputs with the gold story in
view, and splits the story into exposition / rising action / climax / falling action / resolution
by quoting each section's first sentence. Quotes are checked verbatim; the match rate is
reported and stories whose quotes are not found fall back to a fuzzy match or a proportional
split, labelled per story in `<run>/sft/splits.jsonl`. Each agent then gets SFT examples in TRL's
conversational prompt-completion form (`<run>/sft/<agent>.jsonl`: the prompt the agent would see
at generation time, built from a scratchpad of the earlier agents' synthetic outputs; the
completion is its synthetic output or gold section) and a LoRA adapter trained with TRL's
SFTTrainer (`<run>/checkpoints/adapters/<agent>`), ready for `rlcw generate
generator=agents_room agents.adapters.<agent>=...` (`<run>/adapters.yaml` lists them).
`train.save_steps` checkpoints each agent's trainer; `train.resume=true|auto` continues each agent
from its last one (`true`: an error when one is missing; the teacher's data is made again).
Not here: the paper's checkpoint selection on validation loss; the teacher is as good as the model you give it.
Trackers: `train.report_to` (tensorboard | wandb | trackio | none; default [tensorboard] into `<run>/tensorboard/`)
gets the rows of metrics.jsonl (split statistics at step 0, each agent's final loss at `train.max_steps`) through
rlcw.tracking (checked for secrets); TRL's own `report_to` is "none".

    rlcw train-agents --config configs/train_agents/cpu.yaml
    rlcw train-agents data.format=tmas data.source=../shared/data/tell-me-a-story teacher.backend=server teacher.server.model=...
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlcw.agents.agents import agent_prompt
from rlcw.agents.scratchpad import PLANNING, WRITING, Scratchpad, fit
from rlcw.agents.synthetic import locate_sections, parse_split, split_prompt, teacher_planning_prompt
from rlcw.config import at_least, check_at_least, check_choice
from rlcw.data.bundled import resolve_data_path
from rlcw.data.records import read_stories
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, chat_messages
from rlcw.io import atomic_write_jsonl, atomic_write_text
from rlcw.logs import quiet_progress
from rlcw.models import EMBEDDED_ALIAS, load_causal_lm, load_tokenizer, save_lora_checkpoint
from rlcw.recipes.common.checks import validate_train_keys
from rlcw.recipes.common.models import lora_config
from rlcw.recipes.common.run import stage_run, stage_tracker
from rlcw.recipes.common.sections import LoraSection, ModelConfig, RunKeys
from rlcw.runs import resume_checkpoint, resume_mode


@dataclass
class AgentDataConfig:
    format: str = "records"  # records: story-record jsonl ("bundled" = rlcw's own stories) | tmas
    source: str = "bundled"  # story records (format=records; bundled = rlcw's stories) or TMAS folder/file/hub id
    split: str | None = "train"  # tmas split
    max_examples: int | None = 8  # first N stories (None = all)


@dataclass
class TeacherSection:
    backend: str = "local"  # local | server
    model: str = EMBEDDED_ALIAS  # local teacher (a bigger model than the student, in practice)
    server: dict[str, Any] = field(default_factory=dict)  # judge ClientConfig fields (server teacher)
    planning_tokens: int = 256  # new-token cap of each planning output
    split_tokens: int = 256  # new-token cap of the story-split answer
    temperature: float = 0.7  # sampling temperature of the teacher
    batch_size: int = 4  # stories per generation batch (local teacher)


@dataclass
class SplitSection:
    fallback: str = "fuzzy"  # fuzzy (then proportional) | proportional
    fuzzy_cutoff: float = 0.8  # fuzzy: least similarity ratio (0-1) of a quote to a sentence


@dataclass
class AgentTrainSection:
    agents: str = "all"  # "all" or comma-separated agent names
    max_steps: int = 20  # optimizer steps per agent
    learning_rate: float = at_least(0, 1e-4)  # peak AdamW learning rate
    batch_size: int = 2  # SFT examples per step per device
    max_length: int = 1024  # tokens of prompt + completion (longer examples are truncated by TRL)
    context_tokens: int = 2048  # scratchpads in SFT prompts are fitted to this, as at generation time
    save_steps: int = 0  # checkpoints in <run>/checkpoints/adapters/<agent>/trainer every N steps; 0 = none
    resume: str = "false"  # false | true (error if an agent has no checkpoint) | auto (rlcw.runs.resume_checkpoint)
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | trackio | none


@dataclass
class TrainAgentsConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)  # the student base all adapters share
    data: AgentDataConfig = field(default_factory=AgentDataConfig)
    teacher: TeacherSection = field(default_factory=TeacherSection)
    split: SplitSection = field(default_factory=SplitSection)
    lora: LoraSection = field(default_factory=lambda: LoraSection(r=4, alpha=8))  # the paper: rank 4
    train: AgentTrainSection = field(default_factory=AgentTrainSection)
    run_name: str = "train_agents"  # name of the run folder under output_dir


def load_pairs(data: AgentDataConfig) -> list[dict]:
    if data.format == "tmas":
        from rlcw.data.tmas import load_tmas

        recs = load_tmas(data.source, [data.split] if data.split else None)
    elif data.format == "records":
        recs = read_stories(resolve_data_path(data.source, "stories.jsonl"))
    else:
        raise RlcwError(f"unknown data.format '{data.format}'", hint="use records or tmas")
    return recs[: data.max_examples or None]


def build_teacher(cfg: TrainAgentsConfig):
    from rlcw.agents.backends import LocalBackend, server_backend

    t = cfg.teacher
    if t.backend == "server":
        return server_backend(dict(t.server), cfg.model.system_prompt, t.temperature)
    if t.backend != "local":
        raise RlcwError(f"unknown teacher.backend '{t.backend}'", hint="use local or server")
    tok = load_tokenizer(t.model, padding_side="left")
    return LocalBackend(
        load_causal_lm(t.model), tok, cfg.model.system_prompt, temperature=t.temperature, batch_size=t.batch_size
    )


def agent_list(spec: str) -> list[str]:
    agents = list(PLANNING + WRITING) if spec == "all" else [a.strip() for a in spec.split(",") if a.strip()]
    bad = [a for a in agents if a not in PLANNING + WRITING]
    if bad:
        raise RlcwError(
            f"unknown agent '{bad[0]}' in train.agents", hint=f"use all or some of {', '.join(PLANNING + WRITING)}"
        )
    return agents


def back_translate(pairs: list[dict], teacher, cfg: TrainAgentsConfig) -> tuple[list[dict], list[dict]]:
    """Per story: the teacher's plans and the located sections; plus one split report row per story."""
    t, prompts, stories = cfg.teacher, [p["prompt"] for p in pairs], [p["story"] for p in pairs]
    plans = {
        a: teacher.generate(
            a,
            [teacher_planning_prompt(a, p, s) for p, s in zip(prompts, stories, strict=False)],
            t.planning_tokens,
            cfg.seed,
        )
        for a in PLANNING
    }
    answers = teacher.generate("splitter", [split_prompt(s) for s in stories], t.split_tokens, cfg.seed)
    out, report = [], []
    for i, (pair, answer) in enumerate(zip(pairs, answers, strict=False)):
        firsts = parse_split(answer)
        sections, method, found = locate_sections(pair["story"], firsts, cfg.split.fallback, cfg.split.fuzzy_cutoff)
        out.append({"pair": pair, "plans": {a: plans[a][i] for a in PLANNING}, "sections": sections})
        report.append(
            {
                "id": pair["id"],
                "method": method,
                "verbatim": found,
                "quoted": firsts,
                "section_words": {a: len(x.split()) for a, x in sections.items()},
            }
        )
    return out, report


def sft_examples(
    items: list[dict], system_prompt: str, count_tokens, context_tokens: int, report: list[dict]
) -> dict[str, list[dict]]:
    """agent -> conversational prompt-completion rows, each prompt built as the agent sees it at generation."""
    out: dict[str, list[dict]] = {a: [] for a in PLANNING + WRITING}
    for item, rep in zip(items, report, strict=False):
        pad = Scratchpad.start(item["pair"]["prompt"])
        targets = {**item["plans"], **item["sections"]}
        for agent in PLANNING + WRITING:
            target = targets.get(agent, "").strip()
            if not target:
                continue
            budget = (
                context_tokens - count_tokens(target) - count_tokens(agent_prompt(agent, pad, "")) - 64
            )  # 64: chat layout
            text, _ = fit(pad, max(budget, 64), count_tokens)
            out[agent].append(
                {
                    "prompt": chat_messages(system_prompt, agent_prompt(agent, pad, text)),
                    "completion": [{"role": "assistant", "content": target}],
                    "id": item["pair"]["id"],
                    "split_method": rep["method"],
                }
            )
            pad.add(agent, target)
    return out


def trainer_dir(checkpoints: Path, agent: str) -> Path:
    """Where one agent's trainer checkpoints live (its adapter is saved one level up)."""
    return checkpoints / "adapters" / agent / "trainer"


def resume_points(resume: str, checkpoints: Path, agents: list[str]) -> dict[str, str | None]:
    """Per agent, the checkpoint `train.resume` continues from (false | true | auto, rlcw.runs)."""
    out = {}
    for agent in agents:
        last = resume_checkpoint(resume, trainer_dir(checkpoints, agent))
        out[agent] = str(last) if last else None
    return out


def train_adapter(
    cfg: TrainAgentsConfig, agent: str, rows: list[dict], tokenizer, out_dir: Path, resume_from: str | None = None
) -> float:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    t = cfg.train
    model = load_causal_lm(cfg.model.name, cfg.model.dtype)
    args = SFTConfig(
        output_dir=str(out_dir / "trainer"),
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        per_device_train_batch_size=t.batch_size,
        max_length=t.max_length,
        logging_steps=max(1, t.max_steps // 4),
        save_strategy="steps" if t.save_steps else "no",
        save_steps=t.save_steps or 500,
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=not torch.cuda.is_available(),
        seed=cfg.seed,
        disable_tqdm=True,
    )
    data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        peft_config=lora_config(cfg.lora, "CAUSAL_LM", model.config.num_hidden_layers),
    )
    quiet_progress(trainer, "train-agents")  # headline numbers per step; every key goes to metrics.jsonl
    result = trainer.train(resume_from_checkpoint=resume_from)
    save_lora_checkpoint(trainer.model, tokenizer, out_dir, cfg.model.name)
    return float(result.training_loss)


def validate(cfg: TrainAgentsConfig) -> list[str]:
    """Every config check, before the run folder is written and before any model loads; returns the agents."""
    agents = agent_list(cfg.train.agents)
    check_choice("split.fallback", cfg.split.fallback, ("fuzzy", "proportional"))
    check_choice("data.format", cfg.data.format, ("records", "tmas"))
    check_choice("teacher.backend", cfg.teacher.backend, ("local", "server"))
    t = cfg.train
    for key in ("max_steps", "batch_size", "max_length", "context_tokens"):
        check_at_least(f"train.{key}", getattr(t, key), 1)
    check_at_least("train.save_steps", t.save_steps, 0)
    check_at_least("data.max_examples", cfg.data.max_examples, 1)
    resume_mode(t.resume)
    validate_train_keys(t.report_to, False)
    return agents


def main(cfg: TrainAgentsConfig, teacher=None) -> dict:
    """`teacher`: any backend object (tests pass a scripted one); default from `teacher.*`."""
    agents = validate(cfg)
    with stage_run(cfg, "train-agents") as run, closing(stage_tracker(cfg, run, cfg.train.report_to)) as tracker:
        starts = resume_points(
            cfg.train.resume, run.checkpoints, agents
        )  # `true` without one fails before the teacher
        pairs = load_pairs(cfg.data)
        items, report = back_translate(pairs, teacher or build_teacher(cfg), cfg)
        tokenizer = load_tokenizer(cfg.model.name, padding_side="right")
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        count = lambda s: len(tokenizer(s, add_special_tokens=False)["input_ids"])  # noqa: E731
        # prompt + completion must fit max_length, or TRL cuts the completion off: fit the scratchpad to it
        data = sft_examples(
            items, cfg.model.system_prompt, count, min(cfg.train.context_tokens, cfg.train.max_length), report
        )
        sft_dir = run.path / "sft"
        atomic_write_jsonl(sft_dir / "splits.jsonl", report)
        for agent, rows in data.items():
            atomic_write_jsonl(sft_dir / f"{agent}.jsonl", rows)
        metrics = split_metrics(report)
        run.log(0, metrics)
        tracker.log(metrics, 0)
        adapters = {}
        for agent in agents:
            if not data[agent]:
                raise RlcwError(
                    f"no training examples for agent '{agent}'", hint="the teacher gave no usable output for it"
                )
            path = trainer_dir(run.checkpoints, agent).parent
            metrics[f"train/{agent}/loss"] = train_adapter(cfg, agent, data[agent], tokenizer, path, starts[agent])
            adapters[agent] = str(path)
        atomic_write_text(
            run.path / "adapters.yaml",
            "# rlcw generate generator=agents_room --config this-file's agents section\nagents:\n  adapters:\n"
            + "".join(f"    {a}: {p}\n" for a, p in adapters.items()),
        )
        run.log(cfg.train.max_steps, metrics)
        tracker.log(metrics, cfg.train.max_steps)
        summary = run.write_summary(
            "completed",
            metrics,
            {"sft": sft_dir, "adapters": run.checkpoints / "adapters", "adapters_yaml": run.path / "adapters.yaml"},
        )
        run.write_report(_report(cfg, metrics))
        return summary


def split_metrics(report: list[dict]) -> dict[str, float]:
    """Verbatim match rate of the quoted first sentences (5 per story) and how each story was split."""
    n = len(report)
    out = {"examples": float(n), "split/verbatim_match_rate": sum(r["verbatim"] for r in report) / (5 * n)}
    for method in ("exact", "fuzzy", "proportional"):
        out[f"split/{method}"] = float(sum(r["method"] == method for r in report))
    return out


def _report(cfg: TrainAgentsConfig, metrics: dict) -> str:
    lines = [
        f"# Agents' Room agent training `{cfg.run_name}`",
        "",
        f"- student base: `{cfg.model.name}`; teacher: {cfg.teacher.backend} `{cfg.teacher.model}`",
        "",
    ]
    lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.4g} |" for k, v in metrics.items()]
    return "\n".join(lines) + "\n"
