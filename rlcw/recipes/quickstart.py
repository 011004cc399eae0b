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
`<output_dir>/<run_name>/`; override any of them by prefix, e.g. `grpo.train.max_steps=20`.

    scripts/quickstart.sh                       # set-up + this, on the embedded model
    rlcw quickstart --config configs/quickstart/cpu.yaml [seed=1]
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcw.config import assign
from rlcw.io import read_jsonl
from rlcw.logs import say
from rlcw.measure.heldout import check_score_with
from rlcw.measure.monitors import plot_monitors
from rlcw.recipes import build_pairs, export, generate, grpo, prepare_model, train_rm
from rlcw.recipes.common.prompts import check_overlap
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import ModelConfig
from rlcw.report import plot_lines, read_metrics, series, side_by_side


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
    precision: str = "fp32"  # fp32 | bf16: both policies sampled on bf16 copies (the fast path)
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
class QuickstartConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    build_pairs: build_pairs.BuildPairsConfig = field(default_factory=build_pairs.BuildPairsConfig)
    train_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)
    grpo: grpo.GRPORecipeConfig = field(default_factory=grpo.GRPORecipeConfig)
    generate: generate.GenerateConfig = field(default_factory=generate.GenerateConfig)
    export: export.ExportConfig = field(default_factory=export.ExportConfig)
    heldout: HeldoutSection = field(default_factory=HeldoutSection)
    references: ReferencesSection = field(default_factory=ReferencesSection)
    gates: Gates = field(default_factory=Gates)
    output_dir: str = "runs"  # parent folder of the run folder <output_dir>/<run_name>
    run_name: str = "quickstart"  # name of the run folder under output_dir
    seed: int = 0  # random seed of the run
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>


def wire(cfg: QuickstartConfig, root: str) -> None:
    """Point every stage at the shared model, seed and this run's folder, and chain their files.

    Every key set here is derived: setting one yourself (YAML or command line) to another value is an
    error naming it (`rlcw.config.assign`), never a silent reset."""

    def put(key: str, value) -> None:
        assign(cfg, key, value)

    for name in ("build_pairs", "train_rm", "grpo", "generate", "export"):
        put(f"{name}.output_dir", root), put(f"{name}.run_name", name), put(f"{name}.seed", cfg.seed)
        put(f"{name}.overwrite", True)  # a re-run of the quickstart starts each stage fresh
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


def write_references(cfg: QuickstartConfig, root: str, rows: list[dict], cap: int) -> dict:
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
    path = write_stories(
        Path(root) / "references" / "stories.jsonl", [{**{k: x[k] for k in keep}, "system": "start"} for x in recs]
    )
    return {"status": "completed", "metrics": {"stories": float(len(recs)), "time/sample_s": seconds}, "path": path}


def main(cfg: QuickstartConfig) -> dict:
    root = str(Path(cfg.output_dir) / cfg.run_name)
    wire(cfg, root)  # an override clash fails before the run folder is written
    # RL prompts apart from every measured prompt (grpo checks only its own eval split), before any folder is written
    rollout = grpo.rollout_seam(cfg.grpo)  # its story cap fits both prompt sets and caps the held-out stories
    measured = heldout_rows(cfg, rollout.story_cap)
    heldout_settings(cfg, rollout.story_cap)  # a bad heldout.precision / heldout.draw fails here, before any stage
    check_score_with(dict(cfg.heldout.score_with))
    check_overlap(grpo.train_prompts(cfg.grpo, rollout), measured, [])
    with stage_run(cfg, "quickstart") as run:
        timings: dict[str, float] = {}
        results: dict[str, dict] = {}

        def stage(name: str, fn, stage_cfg):
            start = time.time()
            say("quickstart", f"{name} ...")
            results[name] = fn(stage_cfg)
            timings[name] = time.time() - start
            status = results[name].get("status")
            say("quickstart", f"{name} done in {timings[name]:.0f} s" + (f" ({status})" if status else ""))

        stage(
            "prepare_model",
            prepare_model.main,
            prepare_model.PrepareModelConfig(
                model=cfg.model, output_dir=root, run_name="prepare_model", overwrite=True
            ),
        )
        stage("build_pairs", build_pairs.main, cfg.build_pairs)
        stage("train_rm", train_rm.main, cfg.train_rm)
        if references(cfg, root):
            rows = grpo.train_prompts(cfg.grpo, rollout)
            stage("references", lambda c: write_references(c, root, rows, rollout.story_cap), cfg)
        stage("grpo", grpo.main, cfg.grpo)
        stage("heldout", lambda c: _measure(c, root, measured, rollout.story_cap), cfg)
        if cfg.heldout.score_with:
            stage("heldout_scores", lambda c: _score_with(c, Path(root)), cfg)
        stage("export", export.main, cfg.export)
        slop = held_out_slop(run.path, cfg.heldout.n_resamples)
        metrics, checks, verdict = _gate(cfg, results, slop)
        plots = _plots(run.path, cfg.grpo.monitor)
        keys = ("slop_start", "slop_final", "slop_delta", "slop_delta_lo", "slop_delta_hi")
        metrics.update({f"heldout/{k}": float(slop[k]) for k in keys if math.isfinite(slop[k])})
        extra = results.get("heldout_scores", {})
        metrics.update(score_with_metrics(extra))
        run.write_report(_report(cfg, run.path, timings, results["heldout"], checks, verdict, plots, slop, extra))
        status = "completed" if all(ok for _, ok, _ in checks) else "failed"
        metrics["gate/passed"] = float(status == "completed")  # every check (1.0) or not (0.0)
        metrics.update({f"time/{k}_s": round(v, 1) for k, v in timings.items()})
        artifacts = {
            "report": run.path / "report.md",
            "model": results["export"]["artifacts"]["model"],
            "heldout": run.path / "heldout" / "heldout.json",
            **{p.stem: p for p in plots},
        }
        return run.write_summary(
            status,
            metrics,
            artifacts,
            error=None if status == "completed" else "quality gates not met (see report.md)",
        )


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


def score_with_metrics(extra: dict) -> dict[str, float]:
    """summary.json keys of heldout.score_with: heldout/score_with/<name>_{start,final,delta,delta_lo,delta_hi},
    and heldout/score_with/<name>/<criterion>_... for a rubric's criteria (NaN left out)."""
    out = {}

    def put(prefix: str, r: dict) -> None:
        for k, v in (
            ("start", "start"),
            ("final", "tuned"),
            ("delta", "delta"),
            ("delta_lo", "lo"),
            ("delta_hi", "hi"),
        ):
            if math.isfinite(r.get(v, math.nan)):
                out[f"{prefix}_{k}"] = float(r[v])

    for name, r in extra.items():
        put(f"heldout/score_with/{name}", r)
        for crit, rc in r.get("criteria", {}).items():
            put(f"heldout/score_with/{name}/{crit}", rc)
    return out


def score_with_lines(extra: dict) -> list[str]:
    """The report's table of heldout.score_with: start, tuned, change [CI] per scorer and rubric criterion."""
    if not extra:
        return []

    def row(label: str, r: dict) -> str:
        dropped = f" ({r['dropped']} pairs without a score left out)" if r.get("dropped") else ""
        return (
            f"| {label} | {r['start']:.3f} | {r['tuned']:.3f} | {r['delta']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
            f"{dropped} |"
        )

    lines = [
        "Also scored (`heldout.score_with`, the same samples):",
        "",
        "| scorer | start | tuned | change [95% CI] |",
    ]
    lines.append("|---|---|---|---|")
    for name, r in extra.items():
        lines.append(row(f"`{name}`", r))
        lines += [row(f"`{name}` / {crit}", rc) for crit, rc in r.get("criteria", {}).items()]
    return [*lines, ""]


# rlcw.metrics.ending's names -> the held-out keys (on the start samples, scored as RL scores)
ENDING_NAMES = {
    "ended_minus_cut": "rm_pays_ending",
    "short_minus_inside": "rm_pays_ending_short",
    "per_10_words_ended": "rm_per_10_words_ended",
}


def start_prices(records: list[dict], n_resamples: int) -> dict[str, float]:
    """What the RM pays on the start samples for ending, ending short and words, with intervals over prompts,
    and Pearson(RM score, words)."""
    from rlcw.metrics.ending import ending_prices

    p = ending_prices(records, n_resamples)
    out = {new + end: p[old + end] for old, new in ENDING_NAMES.items() for end in ("", "_lo", "_hi")}
    out["rm_words_pearson_start"] = p["words_pearson"]
    out["rm_words_pearson_start_ended"] = p["words_pearson_ended"]
    return out


SUMMARY_KEYS = (
    "rm_delta",
    "rm_delta_lo",
    "rm_delta_hi",
    "win_rate",
    "win_rate_lo",
    "win_rate_hi",
    "in_range_start",
    "in_range_final",
    "in_range_delta",
    "in_range_delta_lo",
    "in_range_delta_hi",
    "in_range_words_start",
    "in_range_words_final",
    "ended_short_start",
    "ended_short_final",
    "ended_short_delta",
    "ended_short_delta_lo",
    "ended_short_delta_hi",
    "short_rise_minus_in_range_rise",
    "short_rise_minus_in_range_rise_lo",
    "short_rise_minus_in_range_rise_hi",
    "finished_start",
    "finished_final",
    "rm_delta_both_finished",
    "rm_delta_both_cut",
    "rm_delta_from_ending",
    "rm_gap_ended_minus_cut",
    "rm_delta_length_controlled",
    "rm_delta_length_controlled_lo",
    "rm_delta_length_controlled_hi",
    *[k + end for k in ENDING_NAMES.values() for end in ("", "_lo", "_hi")],
    "rm_words_pearson_start",
    "rm_words_pearson_start_ended",
    "words_start",
    "words_final",
    "rep_start",
    "rep_final",
    "rm_delta_prompt_sd",
    "prompts_needed",
    "in_range_prompt_sd",
    "in_range_prompts_needed",
    "n_prompts",
    "n_samples",
)


def verdict_text(h: dict) -> tuple[bool, str]:
    """(the held-out gate passed, what was and was not shown, in plain words). Passing needs both lower
    bounds above 0 AND no evidence that the gain is made of one-liners: the rise in the share of stories
    that end below the range may not exceed the rise in the share that ends inside it with 95% confidence
    (`short_rise_minus_in_range_rise_lo` <= 0, the same prompt bootstrap). A comparison of the two point
    estimates alone flipped on one story in 128 (calibration: +0.125 against +0.117)."""
    rm_ok, range_ok = h["rm_delta_lo"] > 0, h["in_range_delta_lo"] > 0
    short_rise = h.get("ended_short_final", 0.0) - h.get("ended_short_start", 0.0)
    excess_lo = h.get("short_rise_minus_in_range_rise_lo", short_rise - h["in_range_delta"])
    short_ok = not excess_lo > 0
    rm = (
        f"the RM score rose on held-out prompts ({h['rm_delta']:+.2f}, 95% CI [{h['rm_delta_lo']:+.2f}, "
        f"{h['rm_delta_hi']:+.2f}])"
    )
    rng = (
        f"the share of stories that end inside the prompt's word range went {h['in_range_start']:.2f} -> "
        f"{h['in_range_final']:.2f} (change CI [{h['in_range_delta_lo']:+.2f}, {h['in_range_delta_hi']:+.2f}])"
    )
    short = (
        f"the share that ends below the range went {h.get('ended_short_start', math.nan):.2f} -> "
        f"{h.get('ended_short_final', math.nan):.2f} ({short_rise:+.2f}, against {h['in_range_delta']:+.2f} inside it; "
        f"difference {_ci({'d': short_rise - h['in_range_delta'], **h}, 'short_rise_minus_in_range_rise' if 'short_rise_minus_in_range_rise' in h else 'd')})"
    )
    if rm_ok and range_ok and short_ok:
        return True, f"Shown: {rm}, and {rng}; {short}."
    ci = f"{h['rm_delta']:+.2f}, 95% CI [{h['rm_delta_lo']:+.2f}, {h['rm_delta_hi']:+.2f}]"
    parts = [f"Shown: {rm}." if rm_ok else f"Not shown: that the RM score rose (held-out change {ci}, not above 0)."]
    parts.append(f"Shown: {rng}." if range_ok else f"Not shown: that stories got closer to the asked length; {rng}.")
    if not short_ok:
        parts.append(f"Not shown: that the gain is not made of stories that end too short; {short}, above 0.")
    if (
        rm_ok
        and not math.isnan(h["rm_delta_from_ending"])
        and abs(h["rm_delta_from_ending"]) >= 0.5 * abs(h["rm_delta"])
    ):
        parts.append(
            f"At least half of the RM change ({h['rm_delta_from_ending']:+.2f} of {h['rm_delta']:+.2f}) is explained by "
            "stories ending before the cap more often, not by better stories of the same kind."
        )
    return False, " ".join(parts)


def hacking_checks(g: Gates, h: dict, slop: dict, rm: str) -> list[tuple[str, bool, str]]:
    """The reward-hacking checks (name, passed, what was measured): ending too short and slop may not rise beyond
    the gates' bounds at 95% (upper bounds over prompts); `rm` says what the reward model is (a defence that changes
    it is compared with the plain BT RM elsewhere: the outcome study's defences section)."""
    off = "" if g.hacking else " (reported, not gating: gates.hacking=false)"
    hi, lo = h.get("ended_short_delta_hi", math.nan), h.get("ended_short_delta_lo", math.nan)
    short = (
        f"{h.get('ended_short_start', math.nan):.2f} -> {h.get('ended_short_final', math.nan):.2f}, change "
        f"{h.get('ended_short_delta', math.nan):+.2f} [{lo:+.2f}, {hi:+.2f}] (upper bound needs <= {g.max_short_rise:+.2f})"
    )
    slop_text = (
        f"{slop['slop_start']:.1f} -> {slop['slop_final']:.1f} points, change {slop['slop_delta']:+.1f} "
        f"[{slop['slop_delta_lo']:+.1f}, {slop['slop_delta_hi']:+.1f}] (upper bound needs <= {g.max_slop_rise:+.1f})"
    )
    short_ok = hi <= g.max_short_rise  # NaN (no word ranges) fails: nothing was shown
    slop_ok = slop["slop_delta_hi"] <= g.max_slop_rise
    return [
        ("no rise in stories ending too short (reward hacking, 95%)" + off, short_ok or not g.hacking, short),
        ("no rise in slop (reward hacking, 95%)" + off, slop_ok or not g.hacking, f"{slop_text}; reward model: {rm}"),
    ]


def rm_kind(cfg: train_rm.TrainRMConfig) -> str:
    """What the quickstart's reward model is, in words."""
    if cfg.rm.ensemble.size > 1:
        return f"an ensemble of {cfg.rm.ensemble.size} BT members"
    return "a two-head (ODIN) BT RM" if cfg.rm.length_head else "the plain BT RM (no accuracy cost to compare)"


def _gate(cfg: QuickstartConfig, results: dict, slop: dict) -> tuple[dict, list[tuple[str, bool, str]], str]:
    rm = results["train_rm"]["metrics"]
    steps = int(results["grpo"]["metrics"].get("train/steps", 0))
    acc = rm.get("eval/accuracy", 0.0)
    h = results["heldout"]
    metrics = {
        "rm/accuracy": acc,
        "rm/length_baseline_accuracy": rm.get("eval/length_baseline_accuracy"),
        "grpo/steps": float(steps),
        "export/max_logit_diff": results["export"]["metrics"]["max_logit_diff"],
        **{f"grpo/{k}": v for k, v in results["grpo"]["metrics"].items() if k.startswith(("eval/", "probe/"))},
        **{f"heldout/{k}": float(h[k]) for k in SUMMARY_KEYS if k in h},
    }
    metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
    grpo_error = results["grpo"].get("error")
    ok, verdict = verdict_text(h)
    checks = [
        (
            "RM held-out accuracy on length-matched pairs",
            acc >= cfg.gates.min_rm_accuracy,
            f"{acc:.3f} (needs >= {cfg.gates.min_rm_accuracy})",
        ),
        ("GRPO steps", steps >= cfg.gates.min_grpo_steps, f"{steps} (needs >= {cfg.gates.min_grpo_steps})"),
        (
            "GRPO reward-hacking monitors in range",
            not grpo_error,
            grpo_error or f"{int(results['grpo']['metrics'].get('monitor/alerts', 0))} warning(s), no stop",
        ),
        (
            "held-out gain: RM change and in-range change, both 95% lower bounds > 0, ending too short not rising more"
            " (95%)" + ("" if cfg.gates.heldout else " (gate off: gates.heldout=false)"),
            ok or not cfg.gates.heldout,
            verdict,
        ),
    ]
    hacking = hacking_checks(cfg.gates, h, slop, rm_kind(cfg.train_rm))
    metrics["gate/heldout"] = float(checks[-1][1])  # the held-out gain check alone
    metrics["gate/hacking"] = float(all(ok for _, ok, _ in hacking))  # the reward-hacking checks
    return metrics, [*checks, *hacking], verdict


def smoothed(ys: list[float], window: int = 4) -> list[float]:
    """Trailing moving average over up to `window` points."""
    return [sum(ys[max(0, i - window + 1) : i + 1]) / len(ys[max(0, i - window + 1) : i + 1]) for i in range(len(ys))]


def _plots(root, monitor) -> list:
    """The report's figures; `monitor` (grpo.monitor) gives the thresholds drawn on the monitors figure."""
    from rlcw.measure.probe import plot_probe, read_probe

    rm_rows = read_metrics(root / "train_rm" / "metrics.jsonl")
    g_rows = read_metrics(root / "grpo" / "metrics.jsonl")
    rm_key = next((k for r in g_rows for k in r if k.startswith("rewards/rm") and k.endswith("/mean")), "reward")
    xs, ys = series(g_rows, "reward")
    rx, ry = series(g_rows, rm_key)
    reward_plot = plot_lines(
        [
            (
                "GRPO training reward (total)",
                {"raw": (xs, ys), "smoothed (4 steps)": (xs, smoothed(ys))},
                "reward (mean over completions)",
            ),
            ("RM term of the reward", {"raw": (rx, ry), "smoothed (4 steps)": (rx, smoothed(ry))}, "RM score"),
            (
                "length terms of the reward",
                {
                    "length_range": series(g_rows, "rewards/length_range/mean"),
                    "overlong": series(g_rows, "rewards/overlong/mean"),
                },
                "reward (mean, <= 0)",
            ),
            (
                "completions cut at the token cap",
                {"cut share": series(g_rows, "completions/clipped_ratio")},
                "share of completions",
            ),
        ],
        root / "plots" / "training_reward.png",
        ncols=2,
    )
    probe = plot_probe(read_probe(root / "grpo" / "probe.jsonl"), root / "plots" / "probe.png")
    acc = series(rm_rows, "eval_accuracy")  # empty with train_rm.train.eval_steps=0 (one evaluation at the end)
    rm_panels = [("RM accuracy on held-out pairs", {"eval accuracy": acc}, "accuracy")] if acc[0] else []
    rm_plot = plot_lines(
        [*rm_panels, ("RM training loss (Bradley-Terry)", {"loss": series(rm_rows, "loss")}, "loss (nats)")],
        root / "plots" / "rm_training.png",
        title="Reward model training (train_rm)",
    )
    monitors = plot_monitors(g_rows, root / "plots" / "grpo_monitors.png", monitor.warn, monitor.stop)
    return [reward_plot, probe, rm_plot, monitors]


def _ci(h: dict, k: str, fmt: str = "+.2f", empty: str = "n/a") -> str:
    """`value [lo, hi]`; `empty` where the value is NaN (e.g. no pair of that kind in the sample)."""
    if math.isnan(h[k]):
        return empty
    lo, hi = h.get(f"{k}_lo"), h.get(f"{k}_hi")
    return f"{h[k]:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if lo is not None else f"{h[k]:{fmt}}"


def heldout_table(h: dict) -> list[str]:
    """The held-out table: start, tuned, change with its 95% CI over prompts."""
    rows = [
        ("RM score", f"{h['rm_start']:.2f}", f"{h['rm_final']:.2f}", _ci(h, "rm_delta")),
        ("win rate of tuned vs start (by the RM)", "", "", _ci(h, "win_rate", ".2f")),
        (
            "share that ends inside the word range",
            f"{h['in_range_start']:.2f}",
            f"{h['in_range_final']:.2f}",
            _ci(h, "in_range_delta"),
        ),
        (
            "share with a word count inside the range, cut stories included",
            f"{h.get('in_range_words_start', math.nan):.2f}",
            f"{h.get('in_range_words_final', math.nan):.2f}",
            "",
        ),
        (
            "share that ends below the range (too short)",
            f"{h.get('ended_short_start', math.nan):.2f}",
            f"{h.get('ended_short_final', math.nan):.2f}",
            "",
        ),
        ("share ending before the cap", f"{h['finished_start']:.2f}", f"{h['finished_final']:.2f}", ""),
        ("words", f"{h['words_start']:.0f}", f"{h['words_final']:.0f}", ""),
        ("trigram repetition within stories", f"{h['rep_start']:.3f}", f"{h['rep_final']:.3f}", ""),
    ]
    lines = ["| measure | start | tuned | change [95% CI] |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    lines += [
        "",
        "What the RM change is made of:",
        "",
        f"- within pairs where both stories end before the cap: {_ci(h, 'rm_delta_both_finished', empty='no such pair')}",
        f"- within pairs where both are cut at the cap: {_ci(h, 'rm_delta_both_cut', empty='no such pair')}",
        f"- explained by ending more often: {h['rm_delta_from_ending']:+.2f} (= ended-share change "
        f"{h['finished_final'] - h['finished_start']:+.2f} x the RM's ended-minus-cut gap "
        f"{h['rm_gap_ended_minus_cut']:.2f} on the start samples)",
        f"- length-controlled RM change (minus b log(1+words), b fitted on the start samples): "
        f"{_ci(h, 'rm_delta_length_controlled')}",
        f"- per-prompt SD of the RM change {h['rm_delta_prompt_sd']:.2f}, of the in-range change "
        f"{h['in_range_prompt_sd']:.2f}; prompts a 95% interval would need to exclude 0 in 4 runs of 5 at these "
        f"effects: {h['prompts_needed']:.0f} (RM), {h['in_range_prompts_needed']:.0f} (in range) (used: "
        f"{h['n_prompts']:.0f} x {h['n_samples']:.0f} samples)",
    ]
    if "rm_pays_ending" in h:  # ending is not length: each price on its own
        lines += [
            "",
            "What the RM pays on the start samples (95% CI over prompts):",
            "",
            f"- for ending (ended minus cut at the cap): {_ci(h, 'rm_pays_ending', empty='no ended or no cut story')}",
            f"- for ending short (ended below the range minus ended inside it): "
            f"{_ci(h, 'rm_pays_ending_short', empty='no story of one kind')}",
            f"- per 10 words within ended stories: {_ci(h, 'rm_per_10_words_ended', empty='too few ended stories')}",
            f"- Pearson(RM score, words) over all start samples: {h['rm_words_pearson_start']:+.2f}; over the ended "
            f"ones only: {h.get('rm_words_pearson_start_ended', math.nan):+.2f}",
        ]
    return lines


SLOP_WARN = 1.0  # points of slop (% of words): a tuned-minus-start lower bound above this is warned about


def held_out_slop(root: Path, n_resamples: int) -> dict:
    """Slop of the held-out samples against the bundled human stories (rlcw.metrics.slop.slop_change): start vs
    tuned with a CI over prompts, and each model's most over-represented phrases."""
    import json

    from rlcw.metrics.slop import SlopBaseline, slop_change
    from rlcw.rewards.slop import load_human_texts

    start = [json.loads(x) for x in (root / "heldout" / "start.jsonl").read_text().splitlines()]
    tuned = [json.loads(x) for x in (root / "heldout" / "tuned.jsonl").read_text().splitlines()]
    return slop_change(
        SlopBaseline(load_human_texts("bundled")),
        [r["story"] for r in start],
        [r["story"] for r in tuned],
        [r["prompt_id"] for r in start],
        n_resamples=n_resamples,
    )


def _top(phrases, k: int) -> str:
    return ", ".join(f"'{p.text}' ({p.ratio:.0f}x, {p.model_count} uses)" for p in phrases[:k]) or "none"


def slop_warning(c: dict) -> list[str]:
    """A line under the verdict when the tuned model's slop rose beyond SLOP_WARN points (95% lower bound): the
    RM change may be paid for stock phrasing, which the gate does not check."""
    if not c["slop_delta_lo"] > SLOP_WARN:
        return []
    return [
        f"**Warning: slop rose {c['slop_delta']:+.1f} points [{c['slop_delta_lo']:+.1f}, {c['slop_delta_hi']:+.1f}] "
        f"(% of words inside phrases over-used against human stories; the tuned model's most over-used: "
        f"{_top(c['top_tuned'], 4)}): part of the RM gain may be paid for stock phrasing. The gate does not check "
        "this; a `type: slop` reward term with a negative weight, or the monitor's `max_slop` rule, counters it.**",
        "",
    ]


def slop_lines(c: dict, k: int = 8) -> list[str]:
    """The report's slop paragraph: start vs tuned with the CI, and each model's most over-represented phrases."""

    def top(phrases) -> str:
        return _top(phrases, k)

    return [
        f"Slop (% of words inside phrases over-used against the bundled human stories; {len(c['phrases'])} phrases "
        f"from start and tuned samples pooled): start {c['slop_start']:.2f}, tuned {c['slop_final']:.2f}, change "
        f"{c['slop_delta']:+.2f} [{c['slop_delta_lo']:+.2f}, {c['slop_delta_hi']:+.2f}] over {c['n_prompts']} prompts.",
        "",
        f"- most over-represented in the start model's samples: {top(c['top_start'])}",
        f"- most over-represented in the tuned model's samples: {top(c['top_tuned'])}",
    ]


def gains_and_losses(root: Path, k: int = 3) -> str:
    """Side-by-side start/tuned samples: the k largest RM gains and the k largest losses, labelled."""
    import json

    start = [json.loads(x) for x in (root / "heldout" / "start.jsonl").read_text().splitlines()]
    tuned = [json.loads(x) for x in (root / "heldout" / "tuned.jsonl").read_text().splitlines()]
    order = sorted(range(len(start)), key=lambda i: tuned[i]["score"] - start[i]["score"])
    out = []
    for label, idx in (("Largest RM gains", order[::-1][:k]), ("Largest RM losses", order[:k])):
        before = [
            dict(start[i], story=f"(RM {start[i]['score']:.2f}, {start[i]['words']} words) {start[i]['story']}")
            for i in idx
        ]
        after = [
            dict(tuned[i], story=f"(RM {tuned[i]['score']:.2f}, {tuned[i]['words']} words) {tuned[i]['story']}")
            for i in idx
        ]
        out += [f"### {label}", "", side_by_side(before, after, ("start model", "after GRPO")), ""]
    return "\n".join(out)


def headline(checks: list, h: dict) -> str:
    """The report's first line: PASS or FAIL (naming the failed checks), the held-out RM change, the change in the
    share of stories ending inside the asked range and in the share ending below it (too short)."""
    failed = [name.split(":")[0].split(" (")[0] for name, ok, _ in checks if not ok]
    word = "PASS" if not failed else f"FAIL ({'; '.join(failed)})"
    short_start, short_final = h.get("ended_short_start", math.nan), h.get("ended_short_final", math.nan)
    return (
        f"{word}: held-out RM change {_ci(h, 'rm_delta')}; ending inside the asked range "
        f"{h['in_range_start']:.2f} -> {h['in_range_final']:.2f} ({_ci(h, 'in_range_delta')}); ending too short "
        f"{short_start:.2f} -> {short_final:.2f} ({short_final - short_start:+.2f})"
    )


def _report(
    cfg, root, timings: dict, h: dict, checks: list, verdict: str, plots: list, slop: dict, extra: dict | None = None
) -> str:
    from rlcw.measure.probe import MIN_MOVE, did_not_move, read_probe

    total = sum(timings.values())
    probe = read_probe(root / "grpo" / "probe.jsonl")
    if probe:
        move = probe[-1]["probe/abs_logp_change"]
        probe_line = (
            f"Learning probe: mean |log-prob change| on held-out texts {move:.4f} nats/token at step "
            f"{probe[-1]['step']}: "
            + ("**the policy did not move**" if did_not_move(probe) else "the policy moved")
            + f" (threshold {MIN_MOVE}); KL to the start on fresh samples {probe[-1].get('probe/kl_to_start', float('nan')):.4f}."
        )
    else:
        probe_line = "Learning probe: off (grpo.probe.every_steps=0)."
    by_name = {p.stem: p for p in plots}
    lines = [
        f"# {headline(checks, h)}",
        "",
        f"rlcw quickstart report. Model: `{cfg.model.name}`, seed {cfg.seed}. Total stage time {total:.0f} s.",
        "",
        f"**{verdict}**",
        "",
        *slop_warning(slop),
        "## Training reward and learning probe",
        "",
        f"![training reward](plots/{by_name['training_reward'].name})",
        "",
        probe_line,
        "",
        f"![probe](plots/{by_name['probe'].name})",
        "",
        f"## Held-out measurement ({h['n_prompts']:.0f} prompts x {h['n_samples']:.0f} samples, same random "
        "numbers for start and tuned, 95% percentile bootstrap over prompts, B = "
        f"{cfg.heldout.n_resamples})",
        "",
        *heldout_table(h),
        "",
        *score_with_lines(extra or {}),
        *slop_lines(slop),
        "",
        "## Checks",
        "",
    ]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {name}: {detail}" for name, ok, detail in checks]
    lines += ["", "## Samples before / after GRPO (held-out prompts, same random numbers)", "", gains_and_losses(root)]
    lines += ["## Stage times", "", "| stage | seconds | share |", "|---|---|---|"]
    lines += [f"| {k} | {v:.0f} | {100 * v / total:.0f}% |" for k, v in timings.items()]
    lines += ["", "## Other plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots[2:]]
    lines += [
        "",
        "Stage folders: "
        + ", ".join(f"`{k}/`" for k in timings)
        + " (each with config.yaml, metrics.jsonl, summary.json; `heldout/` holds the scored samples).",
    ]
    return "\n".join(lines) + "\n"
