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

Best-of-n (`best_of.n > 1`, default generator only): samples n candidates per prompt, scores them
with a BT RM (`best_of.scorer=bt`: `best_of.rm_path`, its length-control fit applied unless
`best_of.length_control=false`) or a rubric (`best_of.scorer=rubric`: `best_of.rubric.*` = the options of a
`type: rubric` reward spec, `rlcw.rewards.rubric`; every candidate of every prompt goes to the judge in one
batched call, `best_of.rubric.client.cache_dir` reuses the judge cache), and writes
`samples/candidates.jsonl` (every candidate, `meta.candidate` and `meta.score`),
`samples/stories.jsonl` (the best of all n; system `bon<n>` unless `system` is set) and, for each k
in `best_of.sizes` (default powers of two up to n), `samples/best_of_<k>.jsonl` = the best among the
FIRST k candidates, so every k uses one pool (`rlcw.rewards.best_of_n`). Metrics per k: `bon/<k>/score`,
`bon/<k>/words`, `bon/<k>/kl_analytic` (log k - (k-1)/k); with a rubric also `bon/<k>/rubric/<criterion>` (the
chosen stories' mean P(yes), or yes-share with text verdicts), `bon/invalid` (share of invalid verdicts) and
`bon/no_verdict` (candidates with no valid verdict: they score NaN and are never picked over a scored one),
and each record's `meta.rubric` holds its verdict per criterion.

    rlcw generate data.format=tmas data.source=../shared/data/tell-me-a-story best_of.n=8 best_of.rm_path=runs/rm/model
    rlcw generate best_of.n=8 best_of.scorer=rubric best_of.rubric.criteria=ttcw:1,9,13 \
        best_of.rubric.client='{kind: openai, base_url: "http://127.0.0.1:8000/v1", model: judge, cache_dir: judge_cache}'
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlcw.config import check_at_least, check_choice
from rlcw.data.prompts import load_prompts
from rlcw.data.records import read_stories, write_stories
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, generate_stories
from rlcw.metrics.text import count_words
from rlcw.models import context_length, load_causal_lm, load_tokenizer
from rlcw.recipes.common.prompts import fit_to_context
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import ModelConfig, RubricSection, RunKeys
from rlcw.rewards.best_of_n import best_index, check_sizes, default_sizes, kl_best_of


@dataclass
class GenDataConfig:
    prompts: str = "bundled"  # data.format=prompts: "bundled" or a prompt file
    format: str = "prompts"  # prompts | tmas
    source: str | None = None  # data.format=tmas: folder, jsonl file or hub id
    split: str | None = "eval"  # prompts: train|eval; tmas: train|validation|test
    max_prompts: int | None = 8  # first N prompts (None = all)


@dataclass
class SamplingSection:
    max_new_tokens: int = 96  # new-token cap of each story
    temperature: float = 0.8  # sampling temperature (0 = greedy decoding)
    top_p: float = 0.95  # nucleus-sampling p (1.0 = off)
    batch_size: int = 8  # prompts generated per batch


@dataclass
class AgentsSection:
    backend: str = "local"  # local | server
    planning_tokens: int = 256  # new-token cap of each planning agent
    writing_tokens: int = 512  # of each writing agent
    finalizer_tokens: int = 1024  # new-token cap of the finalizer agent
    e2e_tokens: int = 1024  # new-token cap of the end-to-end (e2e) agent
    context_tokens: int = 2048  # prompt + scratchpad + new tokens must fit this
    adapters: dict[str, str] = field(default_factory=dict)  # agent -> LoRA adapter folder (local backend)
    server: dict[str, Any] = field(default_factory=dict)  # judge ClientConfig fields (server backend)


@dataclass
class BestOfSection:
    n: int = 1  # candidates per prompt; 1 = off
    scorer: str = "bt"  # what scores the candidates: bt (the RM at best_of.rm_path) | rubric (best_of.rubric)
    rm_path: str | None = None  # scorer=bt: BT RM folder (`rlcw train-rm`) that scores the candidates
    sizes: list[int] = field(default_factory=list)  # k of each best_of_<k>.jsonl; [] = powers of two up to n, and n
    batch_size: int = 16  # RM scoring batch
    length_control: bool = True  # use the RM folder's length-control fit when it has one
    head: str = "quality"  # an RM with a length head (rm.length_head=true): quality | length | sum
    rubric: RubricSection = field(default_factory=RubricSection)  # scorer=rubric: criteria and judge


@dataclass
class GenerateConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)
    data: GenDataConfig = field(default_factory=GenDataConfig)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    generator: str = "default"  # default | agents_room
    variant: str = "plan_write"  # agents_room: e2e | plan | write | plan_write
    agents: AgentsSection = field(default_factory=AgentsSection)
    best_of: BestOfSection = field(default_factory=BestOfSection)
    system: str = "model"  # the story records' `system` field (who wrote them); agents_room default: ar_<variant>
    run_name: str = "generate"  # name of the run folder under output_dir


def load_rows(data: GenDataConfig) -> list[dict]:
    if data.format == "tmas":
        from rlcw.data.tmas import load_tmas, prompt_rows

        if not data.source:
            raise RlcwError(
                "data.format=tmas needs data.source", hint="a TELL ME A STORY folder, jsonl file or hub id"
            )
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
    return LocalBackend(
        model,
        tokenizer,
        cfg.model.system_prompt,
        temperature=s.temperature,
        top_p=s.top_p,
        batch_size=s.batch_size,
        adapters=tuple(a.adapters),
    )


def agents_room_stories(cfg: GenerateConfig, rows: list[dict], model, tokenizer) -> list[dict]:
    from rlcw.agents.variants import AgentCaps, check_variant, run_variant

    check_variant(cfg.variant)
    a = cfg.agents
    caps = AgentCaps(
        planning=a.planning_tokens, writing=a.writing_tokens, finalizer=a.finalizer_tokens, e2e=a.e2e_tokens
    )
    name = f"ar_{cfg.variant}" if cfg.system == "model" else cfg.system
    return run_variant(
        rows,
        build_backend(cfg, model, tokenizer),
        cfg.variant,
        caps,
        context_tokens=a.context_tokens,
        seed=cfg.seed,
        system_name=name,
    )


def check_best_of(cfg: GenerateConfig) -> list[int]:
    """The best-of sizes to write ([] when best-of is off); errors name the key."""
    b = cfg.best_of
    if b.n < 1:
        raise RlcwError(f"best_of.n must be >= 1, got {b.n}", where="best_of.n")
    if b.n == 1:
        return []
    if cfg.generator != "default":
        raise RlcwError(
            "best_of.n > 1 needs generator=default", where="best_of.n", hint="Agents' Room writes one story per prompt"
        )
    check_choice("best_of.scorer", b.scorer, ("bt", "rubric"))
    if b.scorer == "rubric":
        if b.rm_path:
            raise RlcwError(
                "best_of.rm_path is set but best_of.scorer=rubric scores the candidates",
                where="best_of.rm_path",
                hint="drop best_of.rm_path, or set best_of.scorer=bt",
            )
        from rlcw.rewards.rubric import check_rubric

        check_rubric(asdict(b.rubric), "best_of.rubric")
    elif not b.rm_path:
        raise RlcwError(
            "best_of.n > 1 needs a reward model",
            where="best_of.rm_path",
            hint="e.g. best_of.rm_path=runs/train_rm/model, or best_of.scorer=rubric with best_of.rubric.* judge keys",
        )
    check_choice("best_of.head", b.head, ("quality", "length", "sum"))
    return check_sizes(list(b.sizes), b.n) if b.sizes else default_sizes(b.n)


def sample(cfg: GenerateConfig, rows: list[dict], model, tokenizer, n: int) -> list[dict]:
    """n seeded stories per prompt row, prompt-major (row i candidate j at i * n + j), with `reference` kept."""
    cand_rows = [{**r, "id": f"{r['id']}#{j}"} if n > 1 else r for r in rows for j in range(n)]
    s = cfg.sampling
    stories = generate_stories(
        model,
        tokenizer,
        cand_rows,
        system_prompt=cfg.model.system_prompt,
        system_name=cfg.system,
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        batch_size=s.batch_size,
        seed=cfg.seed,
    )
    refs = [r.get("reference") for r in rows for _ in range(n)]
    return [{**x, "reference": ref} if ref else x for x, ref in zip(stories, refs, strict=False)]


def _mean(values) -> float | None:
    """Mean of the finite values (None when there is none: a rubric's NaN is no score)."""
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else None


def score_candidates(cfg: GenerateConfig, cands: list[dict]) -> tuple[list[float], list[dict] | None, dict, str]:
    """(score per candidate, per-candidate rubric verdicts {criterion: P(yes) or None} or None, the scorer's own
    metrics, what scored them for the report). A rubric asks the judge once for every candidate x criterion."""
    b = cfg.best_of
    prompts, stories = [c["prompt"] for c in cands], [c["story"] for c in cands]
    if b.scorer == "rubric":
        from rlcw.rewards.rubric import rubric_scorer

        scorer = rubric_scorer(asdict(b.rubric), "best_of.rubric")
        scorer.progress = True
        try:
            scores = scorer.score(prompts, stories)
        finally:
            scorer.client.close()
        names = [c.name for c in scorer.criteria]
        verdicts = [dict(zip(names, row, strict=True)) for row in scorer.last_values]
        stats = {
            "bon/invalid": scorer.last_stats["invalid"],
            "bon/no_verdict": scorer.last_stats["no_verdict"],
            "judge/calls": float(scorer.client.stats["calls"]),  # uncached ones: client.cache_dir reuses verdicts
            "judge/cache_hits": float(scorer.client.stats["cache_hits"]),
        }
        judge = scorer.client.cfg
        return (
            scores,
            verdicts,
            stats,
            f"a rubric ({', '.join(names)}; {b.rubric.verdict} verdicts of {judge.kind} {judge.model})",
        )
    from rlcw.rewards.scorers import load_scorer

    scorer = load_scorer(
        "bt", b.rm_path, batch_size=b.batch_size, length_control="auto" if b.length_control else False, head=b.head
    )
    scorer.progress = True
    return scorer.score(prompts, stories), None, {}, str(b.rm_path)


def best_of_outputs(
    cfg: GenerateConfig, run, rows: list[dict], cands: list[dict], sizes: list[int]
) -> tuple[dict, dict]:
    """Score the candidates, write candidates/stories/best_of_<k> files; return (metrics, artifact paths)."""
    n = cfg.best_of.n
    scores, verdicts, metrics, label = score_candidates(cfg, cands)
    pools = [scores[i * n : (i + 1) * n] for i in range(len(rows))]  # (prompts, n); NaN never beats a score
    for i, c in enumerate(cands):
        score = scores[i] if math.isfinite(scores[i]) else None
        c["meta"] = {"prompt_id": rows[i // n]["id"], "candidate": i % n, "score": score}
        if verdicts is not None:
            c["meta"]["rubric"] = verdicts[i]
    paths = {"candidates": write_stories(run.samples / "candidates.jsonl", cands)}

    def chosen(k: int, system: str) -> list[dict]:
        out = []
        for i, row in enumerate(rows):
            j = best_index(pools[i], k)
            meta = {"best_of": k, **cands[i * n + j]["meta"], "prompt_id": row["id"]}
            out.append({**cands[i * n + j], "id": row["id"], "system": system, "meta": meta})
        return out

    names = list(verdicts[0]) if verdicts else []
    for k in sizes:
        picked = chosen(k, f"bon{k}" if cfg.system == "model" else f"{cfg.system}_bon{k}")
        paths[f"best_of_{k}"] = write_stories(run.samples / f"best_of_{k}.jsonl", picked)
        metrics[f"bon/{k}/score"] = _mean(x["meta"]["score"] for x in picked)
        metrics[f"bon/{k}/words"] = sum(count_words(x["story"]) for x in picked) / len(picked)
        metrics[f"bon/{k}/kl_analytic"] = kl_best_of(k)
        for name in names:
            metrics[f"bon/{k}/rubric/{name}"] = _mean(x["meta"]["rubric"][name] for x in picked)
    best = chosen(n, f"bon{n}" if cfg.system == "model" else cfg.system)
    paths["stories"] = write_stories(run.samples / "stories.jsonl", best)
    run.write_report(best_of_report(metrics, sizes, names, label, n, len(rows), len(cands)))
    return metrics, paths


def best_of_report(metrics: dict, sizes: list[int], names: list[str], label: str, n: int, prompts: int, cands: int):
    def fmt(v, digits: int = 4) -> str:
        return "n/a" if v is None else f"{v:.{digits}f}"

    head = "| k | mean score | mean words | KL bound (nats) |" + "".join(f" {c} |" for c in names)
    rows = [
        f"| {k} | {fmt(metrics[f'bon/{k}/score'])} | {fmt(metrics[f'bon/{k}/words'], 1)} | {kl_best_of(k):.3f} |"
        + "".join(f" {fmt(metrics[f'bon/{k}/rubric/{c}'], 3)} |" for c in names)
        for k in sizes
    ]
    text = (
        f"# Best-of-{n} with {label}\n\n{prompts} prompts, {cands} candidates; best-of-k = best of the first k "
        f"candidates.\n\n{head}\n|---|---|---|---|{'---|' * len(names)}\n" + "\n".join(rows) + "\n"
    )
    if names:
        text += (
            f"\nRubric columns: the chosen stories' mean verdict per criterion. Invalid verdicts: "
            f"{metrics['bon/invalid']:.1%}; candidates with no valid verdict (never picked over a scored one): "
            f"{int(metrics['bon/no_verdict'])}.\n"
        )
    return text


def validate(cfg: GenerateConfig) -> list[int]:
    """Every config check, before the run folder is written and before any model loads; returns the best-of sizes."""
    from rlcw.agents.variants import VARIANTS

    check_choice("generator", cfg.generator, ("default", "agents_room"))
    d, s = cfg.data, cfg.sampling
    check_choice("data.format", d.format, ("prompts", "tmas"))
    if d.format == "tmas" and not d.source:
        raise RlcwError(
            "data.format=tmas needs data.source",
            where="data.source",
            hint="a TELL ME A STORY folder, jsonl file or hub id",
        )
    check_at_least("data.max_prompts", d.max_prompts, 1)
    check_at_least("sampling.max_new_tokens", s.max_new_tokens, 1)
    check_at_least("sampling.batch_size", s.batch_size, 1)
    check_at_least("sampling.temperature", s.temperature, 0.0)
    if not 0.0 < s.top_p <= 1.0:
        raise RlcwError(
            f"sampling.top_p must be in (0, 1], got {s.top_p}", where="sampling.top_p", hint="e.g. sampling.top_p=0.95"
        )
    if cfg.generator == "agents_room":
        check_choice("variant", cfg.variant, tuple(VARIANTS))
        check_choice("agents.backend", cfg.agents.backend, ("local", "server"))
    if cfg.model.chat_template and not Path(cfg.model.chat_template).is_file():
        raise RlcwError(
            "chat template file not found", where="model.chat_template", hint=f"no file {cfg.model.chat_template}"
        )
    return check_best_of(cfg)


def main(cfg: GenerateConfig) -> dict:
    sizes = validate(cfg)
    with stage_run(cfg, "generate") as run:
        rows = load_rows(cfg.data)
        server = cfg.generator == "agents_room" and cfg.agents.backend == "server"
        model = tokenizer = None
        if not server:
            tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
            apply_chat_template_file(tokenizer, cfg.model.chat_template)
            if cfg.generator != "agents_room":  # the agents' calls are sized by agents.* caps, not one prompt
                cap = cfg.sampling.max_new_tokens
                context = context_length(cfg.model.name)
                rows = fit_to_context(
                    rows,
                    tokenizer,
                    cfg.model.system_prompt,
                    cap,
                    context,
                    "error",
                    "generation",
                    "sampling.max_new_tokens",
                )
            model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        start = time.perf_counter()
        if cfg.generator == "agents_room":
            stories = agents_room_stories(cfg, rows, model, tokenizer)
        else:
            stories = sample(cfg, rows, model, tokenizer, cfg.best_of.n)
        seconds = time.perf_counter() - start
        metrics = {"seconds_per_story": seconds / len(stories)}  # per sampled story (each candidate with best-of)
        if sizes:
            bon_metrics, paths = best_of_outputs(cfg, run, rows, stories, sizes)
            stories = read_stories(paths["stories"])
            metrics.update(
                {
                    "candidates": float(cfg.best_of.n * len(rows)),
                    "seconds_total": time.perf_counter() - start,
                    **bon_metrics,
                }
            )
        else:
            paths = {"stories": write_stories(run.samples / "stories.jsonl", stories)}
        metrics.update(
            {
                "stories": float(len(stories)),
                "mean_words": sum(count_words(x["story"]) for x in stories) / len(stories),
            }
        )
        run.log(0, metrics)
        return run.write_summary("completed", metrics, paths)
