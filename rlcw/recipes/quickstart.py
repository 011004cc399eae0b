"""The whole loop on one machine, with a report: the product's main job at small scale.

prepare-model -> build-pairs -> train-rm (BT, LoRA) -> grpo (RM + length terms, monitors, learning
probe, LoRA) -> one held-out measurement (start vs tuned on >= 32 held-out prompts x 4 samples with
common random numbers, rlcw.measure.heldout) -> export (merged, logits checked) -> report.md.

The check PASSES only when the held-out RM change AND the change in the share of stories inside
the prompt's word range both have a 95% lower bound above 0 (bootstrap over prompts); otherwise
the report says what was and was not shown (`gates.heldout=false` turns this gate off, for the
tiny-model test). The report opens with the training reward (raw and smoothed) and the learning
probe, then the held-out table with the decomposition of the RM change (both ended / both cut /
explained by ending more often / length-controlled) and what the RM pays on the start samples for ending,
for ending short and per 10 words within ended stories (`rlcw.metrics.ending`), then before/after samples: the largest RM
gains and the largest losses. Each stage is the real recipe with its own run folder under
`<output_dir>/<run_name>/`; override any of them by prefix, e.g. `grpo.train.max_steps=20`. Running it again
resumes per stage (`rlcw.pipelines.stages`, chained): a stage completed under the same settings is reused, a changed
setting re-runs that stage and every stage after it, `overwrite=true` runs every stage again.

    scripts/quickstart.sh                       # set-up + this, on the embedded model
    rlcw quickstart --config configs/quickstart/cpu.yaml [seed=1]
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlcw.config import assign
from rlcw.io import read_jsonl
from rlcw.measure.heldout import check_score_with
from rlcw.metrics.bootstrap import small_sample_note
from rlcw.pipelines.quickstart_gates import gate, held_out_slop, rm_kind, score_with_metrics, start_prices
from rlcw.pipelines.quickstart_report import plots, report
from rlcw.pipelines.stages import Stages
from rlcw.recipes import build_pairs, export, generate, grpo, prepare_model, train_rm
from rlcw.recipes.common.prompts import check_overlap
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import ModelConfig, RunKeys


@dataclass
class Gates:
    """What makes a quickstart 'with meaning' (checked and shown in the report)."""

    # 0.75: held-out corruption pairs whose ending no longer tells them apart (rlcw.data.corrupt.match_ending);
    # the quickstart RM measured 0.78 (100 pairs, +-4 points), 0.82 with 30 steps; 0.86 before, with the cue
    min_rm_accuracy: float = 0.75
    min_grpo_steps: int = 10  # GRPO steps the run must complete
    heldout: bool = True  # RM change and in-range change lower bounds > 0 (false: tiny-model tests)
    exit_on_fail: bool = True  # `rlcw quickstart` exits 1 when a gate fails (false: exit 0, e.g. calibration loops)
    # reward-hacking checks on the held-out samples, read at their 95% upper bounds over prompts (false: reported,
    # not gating)
    hacking: bool = True
    max_short_rise: float = 0.05  # the share of stories ending below the prompt's range may rise by at most this
    max_slop_rise: float = 2.0  # slop (% of words in over-used phrases) may rise by at most this many points


@dataclass
class HeldoutSection:
    """The one held-out measurement at the end (rlcw.measure.heldout)."""

    prompts: str = "bundled"  # "bundled" or a prompt file of the held-out prompts
    # one split or several, in order: [heldout, study] + max_prompts 40 = the 32 `heldout` prompts and the first 8
    # `study` ones (the two styles alternate in both); RL prompts are checked against every measured one
    split: str | list[str] = "heldout"
    max_prompts: int | None = None  # first N prompts of the split(s) (None = all)
    n_samples: int = 4  # samples per prompt for each policy (CRN seeds)
    seed: int = 1234  # sample k of every prompt uses seed + k, for the start and the tuned policy alike
    n_resamples: int = 2000  # paired bootstrap resamples over prompts
    fit_to_cap: bool = True  # leave out prompts whose range the completion cap cannot hold
    # fp32 | bf16 (both policies sampled on bf16 copies) | auto: bf16 where AMX runs bf16 matmuls or they timed faster (the log says which)
    precision: str = "auto"
    draw: str = "multinomial"  # multinomial | inverse_cdf: one random number a row a step (same distribution)
    # more scorers of the start and tuned samples, name -> reward spec (bt, genrm, remote, rubric, slop, python;
    # weight ignored; a bt spec without rm_path is the run's RM): each one's change with a CI over prompts, per
    # criterion for a rubric, e.g. {rubric: {type: rubric, criteria: "ttcw:1,9,13"}} (report, heldout/score_with.json)
    score_with: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class ReferencesSection:
    """Start-model stories for the RL prompts, written when a grpo reward spec has an `anchor` without `references`
    (PAR, rlcw.rewards.anchored): the stories the anchored reward is centred on (`references/stories.jsonl`)."""

    n_samples: int = 2  # stories per RL prompt (the anchor's per_prompt reads at most this many)
    seed: int = 4321  # sample k of every prompt uses seed + k (apart from the held-out measurement's seed)
    draw: str = "inverse_cdf"  # multinomial | inverse_cdf (the same distribution, one batch for every index)


@dataclass
class QuickstartConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)
    build_pairs: build_pairs.BuildPairsConfig = field(default_factory=build_pairs.BuildPairsConfig)
    train_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)
    grpo: grpo.GRPORecipeConfig = field(default_factory=grpo.GRPORecipeConfig)
    generate: generate.GenerateConfig = field(default_factory=generate.GenerateConfig)
    export: export.ExportConfig = field(default_factory=export.ExportConfig)
    heldout: HeldoutSection = field(default_factory=HeldoutSection)
    references: ReferencesSection = field(default_factory=ReferencesSection)
    gates: Gates = field(default_factory=Gates)
    run_name: str = "quickstart"  # name of the run folder under output_dir
    # false: a stage completed under the same settings is reused; true: every stage runs again (old folders kept as
    # <stage>.replaced-<time>)
    overwrite: bool = False


def wire(cfg: QuickstartConfig, root: str) -> None:
    """Point every stage at the shared model, seed and this run's folder, and chain their files.

    Every key set here is derived: setting one yourself (YAML or command line) to another value is an
    error naming it (`rlcw.config.assign`), never a silent reset."""

    def put(key: str, value) -> None:
        assign(cfg, key, value)

    for name in ("build_pairs", "train_rm", "grpo", "generate", "export"):
        put(f"{name}.output_dir", root), put(f"{name}.run_name", name), put(f"{name}.seed", cfg.seed)
        put(f"{name}.overwrite", False)  # the stage runner reuses a stage or moves its old folder aside
    pairs = [f"{root}/build_pairs/pairs/train.jsonl", f"{root}/build_pairs/pairs/eval.jsonl"]
    put("train_rm.model", ModelConfig(name=cfg.model.name, dtype=cfg.model.dtype))
    put("train_rm.data.train_file", pairs[0]), put("train_rm.data.eval_file", pairs[1])
    put("grpo.model", cfg.model)
    put("grpo.reward.rm_path", f"{root}/train_rm/model")
    put("grpo.data.no_overlap_with", pairs)
    put("export.model", ModelConfig(**{**vars(cfg.model), "name": f"{root}/grpo/checkpoints/final"}))
    put("generate.model", cfg.model)
    references(cfg, root)  # an anchor without references: the start's stories this run writes


def references(cfg: QuickstartConfig, root: str) -> list[str]:
    """The grpo reward specs anchored on the start stories this run writes (`references/stories.jsonl`)."""
    from rlcw.rewards.anchored import default_references

    return default_references(cfg.grpo.reward.specs, f"{root}/references/stories.jsonl")


def write_references(cfg: QuickstartConfig, folder: Path, rows: list[dict], cap: int) -> dict:
    """`references.n_samples` start-model stories for every RL prompt row, as story records."""
    from rlcw.data.records import write_stories
    from rlcw.measure.heldout import HeldoutSettings, policy_samples
    from rlcw.models import load_tokenizer

    r = cfg.references
    s = HeldoutSettings(
        n_samples=r.n_samples,
        max_new_tokens=cap,
        seed=r.seed,
        n_resamples=0,
        system_prompt=cfg.model.system_prompt,
        draw=r.draw,
    )
    recs, seconds = policy_samples(cfg.model.name, load_tokenizer(cfg.model.name, padding_side="left"), rows, s)
    keep = ("id", "prompt", "story", "min_words", "max_words")
    path = write_stories(folder / "stories.jsonl", [{**{k: x[k] for k in keep}, "system": "start"} for x in recs])
    return {
        "status": "completed",
        "metrics": {"stories": float(len(recs)), "time/sample_s": seconds},
        "path": str(path),
    }


def main(cfg: QuickstartConfig) -> dict:
    root = str(Path(cfg.output_dir) / cfg.run_name)
    wire(cfg, root)  # an override clash fails before the run folder is written
    # RL prompts apart from every measured prompt (grpo checks only its own eval split), before any folder is written
    rollout = grpo.rollout_seam(cfg.grpo)  # its story cap fits both prompt sets and caps the held-out stories
    cap, measured = rollout.story_cap, heldout_rows(cfg, rollout.story_cap)
    heldout_settings(cfg, cap)  # a bad heldout.precision / heldout.draw fails here, before any stage
    check_score_with(dict(cfg.heldout.score_with))
    check_overlap(grpo.train_prompts(cfg.grpo, rollout), measured, [])
    with stage_run(cfg, "quickstart") as run:
        # chained: a stage whose settings changed runs again, and so does every stage after it
        st, results, path = Stages(not cfg.overwrite, "quickstart", chain=True), {}, run.path
        prep = prepare_model.PrepareModelConfig(model=cfg.model, output_dir=root, run_name="prepare_model")
        results["prepare_model"] = st.run("prepare_model", prepare_model.main, prep)
        results["build_pairs"] = st.run("build_pairs", build_pairs.main, cfg.build_pairs)
        results["train_rm"] = st.run("train_rm", train_rm.main, cfg.train_rm)
        if references(cfg, root):
            rows = grpo.train_prompts(cfg.grpo, rollout)
            key = {"references": asdict(cfg.references), "model": asdict(cfg.model), "prompts": ids(rows), "cap": cap}
            refs = st.cached("references", path / "references", key, lambda f: write_references(cfg, f, rows, cap))
            results["references"] = refs
        results["grpo"] = st.run("grpo", grpo.main, cfg.grpo)
        key = {"heldout": {k: v for k, v in asdict(cfg.heldout).items() if k != "score_with"}, "cap": cap}
        key.update(model=asdict(cfg.model), prompts=ids(measured))
        results["heldout"] = st.cached("heldout", path / "heldout", key, lambda _: _measure(cfg, root, measured, cap))
        if small := small_sample_note(len(measured), "held-out prompts", "changes"):
            print(f"[rlcw] warning: {small}", flush=True)
        if cfg.heldout.score_with:
            key = {"score_with": dict(cfg.heldout.score_with), "seed": cfg.seed, "n": cfg.heldout.n_resamples}
            folder = path / "heldout" / "score_with"  # its record; the scores go beside the held-out samples
            results["heldout_scores"] = st.cached("heldout_scores", folder, key, lambda _: _score_with(cfg, path))
        results["export"] = st.run("export", export.main, cfg.export)
        return finish(cfg, run, results, st.timings)


def ids(rows: list[dict]) -> list[str]:
    """The prompt rows' ids (a cached stage's key)."""
    return [str(r.get("id", r["prompt"])) for r in rows]


def finish(cfg: QuickstartConfig, run, results: dict[str, dict], timings: dict[str, float]) -> dict:
    """The gates, the report and summary.json from the stages' results."""
    slop = held_out_slop(run.path, cfg.heldout.n_resamples)
    rm = rm_kind(cfg.train_rm.rm.ensemble.size, cfg.train_rm.rm.length_head)
    metrics, checks, verdict = gate(cfg.gates, results, slop, rm)
    figures = plots(run.path, cfg.grpo.monitor.warn, cfg.grpo.monitor.stop)
    keys = ("slop_start", "slop_final", "slop_delta", "slop_delta_lo", "slop_delta_hi")
    metrics.update({f"heldout/{k}": float(slop[k]) for k in keys if math.isfinite(slop[k])})
    extra = results.get("heldout_scores", {})
    metrics.update(score_with_metrics(extra))
    head = f"Model: `{cfg.model.name}`, seed {cfg.seed}."
    n = cfg.heldout.n_resamples
    run.write_report(report(head, n, run.path, timings, results["heldout"], checks, verdict, figures, slop, extra))
    status = "completed" if all(c.passed for c in checks) else "failed"
    metrics["gate/passed"] = float(status == "completed")  # every check (1.0) or not (0.0)
    metrics.update({f"time/{k}_s": round(v, 1) for k, v in timings.items()})
    artifacts = {
        "report": run.path / "report.md",
        "model": results["export"]["artifacts"]["model"],
        "heldout": run.path / "heldout" / "heldout.json",
        **{p.stem: p for p in figures},
    }
    error = None if status == "completed" else "quality gates not met (see report.md)"
    return run.write_summary(status, metrics, artifacts, error=error)


def heldout_rows(cfg: QuickstartConfig, cap: int) -> list[dict]:
    """The held-out prompt rows (fitted to the story cap `cap` when asked)."""
    from rlcw.data.prompts import load_prompts
    from rlcw.errors import RlcwError
    from rlcw.rewards.length import range_fits_cap

    h = cfg.heldout
    rows, seen = [], set()
    for split in [h.split] if isinstance(h.split, str) else h.split:
        for row in load_prompts(h.prompts, split):
            if row["id"] not in seen:  # a file without splits gives the same rows for every split
                seen.add(row["id"])
                rows.append(row)
    if h.fit_to_cap:
        tpw = cfg.grpo.data.tokens_per_word
        rows = [r for r in rows if range_fits_cap(r.get("max_words"), cap, tpw)]
    rows = rows[: h.max_prompts or None]
    if len(rows) < 2:
        raise RlcwError(f"{len(rows)} held-out prompt(s) left: a bootstrap over prompts needs more", where="heldout")
    return rows


def heldout_settings(cfg: QuickstartConfig, cap: int):
    """The measurement's settings (rlcw.measure.heldout.HeldoutSettings), its sampler checked; `cap` is the
    rollout's story cap."""
    from rlcw.measure.heldout import HeldoutSettings, check_sampler

    h = cfg.heldout
    s = HeldoutSettings(
        n_samples=h.n_samples,
        max_new_tokens=cap,
        seed=h.seed,
        n_resamples=h.n_resamples,
        system_prompt=cfg.model.system_prompt,
        precision=h.precision,
        draw=h.draw,
    )
    check_sampler(s)
    return s


def _measure(cfg: QuickstartConfig, root: str, rows: list[dict], cap: int) -> dict:
    from rlcw.measure.heldout import measure_policies

    tuned = f"{root}/grpo/checkpoints/final"
    s = heldout_settings(cfg, cap)
    stats = measure_policies(cfg.model.name, tuned, cfg.grpo.reward.rm_path, rows, s, Path(root) / "heldout")
    stats.update(start_prices(read_jsonl(Path(root) / "heldout" / "start.jsonl"), s.n_resamples))
    return stats


def _score_with(cfg: QuickstartConfig, root: Path) -> dict:
    """heldout.score_with's scorers on the scored held-out samples (rlcw.measure.heldout.score_with), written to
    heldout/score_with.json (the changes) and heldout/score_with.jsonl (every story's values)."""
    from rlcw.io import atomic_write_json, atomic_write_jsonl
    from rlcw.measure.heldout import score_with

    start, tuned = read_jsonl(root / "heldout" / "start.jsonl"), read_jsonl(root / "heldout" / "tuned.jsonl")
    defaults = {"rm_path": cfg.grpo.reward.rm_path, "seed": cfg.seed}
    out, rows = score_with(dict(cfg.heldout.score_with), start, tuned, defaults, cfg.heldout.n_resamples)
    atomic_write_jsonl(root / "heldout" / "score_with.jsonl", rows)
    atomic_write_json(root / "heldout" / "score_with.json", out)
    return out
