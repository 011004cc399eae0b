"""The outcome study's report: curves per run, win rates, the table of final numbers, the conclusion.

report, finals, plots = write_outcome_report(Path("runs/outcome"), rows, rm_metrics, timings, StudySetup(...))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt

from rlcw.outcome.analysis import (
    DIVERSITY_DROP,
    IN_RANGE_DROP,
    LENGTH_SHIFT,
    REPETITION_FLOOR,
    REPETITION_RISE,
    controls_verdict,
    final_rows,
    paired_delta,
    run_verdict,
)
from rlcw.outcome.judging import stories_of
from rlcw.report import save_figure

CURVES = (
    ("proxy", "proxy RM score"),
    ("gold", "gold RM score"),
    ("words", "words per story"),
    ("in_range", "share in the prompt's range"),
    ("rep_intra_3", "trigram repetition within stories"),
    ("distinct_3", "distinct-3 across stories"),
    ("kl_seq", "KL to start (nats/story)"),
)


def _by_run(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    start = next((r for r in rows if r["step"] == 0), None)
    for r in rows:
        if r["step"] > 0:
            out.setdefault(r["run"], []).append(r)
    for name, rs in out.items():
        rs.sort(key=lambda r: r["step"])
        if start is not None and name != "best_of_n":
            rs.insert(0, {**start, "run": name})
    return out


def plot_proxy_gold(by_run: dict[str, list[dict]], path: Path) -> Path:
    """One panel per run: proxy and gold as change from the start model (x: step; best-of-n: n)."""
    names = list(by_run)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=False):
        rs = by_run[name]
        ref = rs[0]
        xs = [r["step"] for r in rs]
        ax.plot(xs, [r["proxy"] - ref["proxy"] for r in rs], marker="o", label="proxy (RL reward)")
        ax.plot(xs, [r["gold"] - ref["gold"] for r in rs], marker="s", label="gold (held out)")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(name)
        ax.set_xlabel("n (samples)" if name == "best_of_n" else "step")
        if name == "best_of_n":
            ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("score - score at start")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_gold_vs_kl(by_run: dict[str, list[dict]], path: Path) -> Path:
    """Gao et al.'s view: gold and proxy change against sqrt(KL to start), every run on one axis."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, rs in by_run.items():
        pts = [
            (math.sqrt(max(r["kl_seq"], 0.0)), r["proxy"] - rs[0]["proxy"], r["gold"] - rs[0]["gold"])
            for r in rs
            if not math.isnan(r["kl_seq"])
        ]
        if pts:
            axes[0].plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
            axes[1].plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=name)
    for ax, title in zip(axes, ("proxy change", "gold change"), strict=False):
        ax.set_title(title)
        ax.set_xlabel("sqrt(KL to start), nats per story")
        ax.axhline(0, color="grey", lw=0.8)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_curves(by_run: dict[str, list[dict]], path: Path) -> Path:
    """Length, range, repetition, diversity and KL per run (best-of-n against n)."""
    keys = CURVES[2:]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.8 * len(keys), 3.4), squeeze=False)
    for ax, (key, title) in zip(axes[0], keys, strict=False):
        for name, rs in by_run.items():
            pts = [(r["step"], r[key]) for r in rs if key in r and not math.isnan(r[key])]
            if pts and name != "best_of_n":
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_win_rates(rows: list[dict], path: Path) -> Path | None:
    judged = [r for r in rows if not math.isnan(r.get("judge/win_rate", math.nan))]
    if not judged:
        return None
    fig, ax = plt.subplots(figsize=(max(4, 0.9 * len(judged)), 3.4))
    labels = [f"{r['run']}@{r['step']}" for r in judged]
    ys = [r["judge/win_rate"] for r in judged]
    lo = [max(0.0, y - r.get("judge/ci_low", y)) for y, r in zip(ys, judged, strict=False)]
    hi = [max(0.0, r.get("judge/ci_high", y) - y) for y, r in zip(ys, judged, strict=False)]
    ax.errorbar(range(len(ys)), ys, yerr=[lo, hi], fmt="o", capsize=3)
    ax.axhline(0.5, color="grey", lw=0.8)
    ax.set_xticks(range(len(ys)), labels, rotation=40, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("win rate vs start (95% CI)")
    fig.tight_layout()
    return save_figure(fig, path)


def _fmt(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _table(start: dict, finals: dict[str, dict]) -> list[str]:
    head = [
        "run",
        "step / n",
        "proxy",
        "Δproxy [95% CI]",
        "gold",
        "Δgold [95% CI]",
        "words",
        "in range",
        "rep-3",
        "distinct-3",
        "KL/story",
        "judge win [95% CI]",
        "invalid",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(name: str, r: dict) -> str:
        dp, dg = r.get("delta/proxy", {}), r.get("delta/gold", {})
        judge = (
            "-"
            if math.isnan(r.get("judge/win_rate", math.nan))
            else (f"{r['judge/win_rate']:.2f} [{_fmt(r.get('judge/ci_low'), 2)}, {_fmt(r.get('judge/ci_high'), 2)}]")
        )
        cells = [
            name,
            str(r["step"]),
            _fmt(r["proxy"]),
            f"{_fmt(dp.get('delta'))} [{_fmt(dp.get('ci_low'))}, {_fmt(dp.get('ci_high'))}]" if dp else "-",
            _fmt(r["gold"]),
            f"{_fmt(dg.get('delta'))} [{_fmt(dg.get('ci_low'))}, {_fmt(dg.get('ci_high'))}]" if dg else "-",
            _fmt(r["words"], 1),
            _fmt(r.get("in_range"), 2),
            _fmt(r["rep_intra_3"]),
            _fmt(r["distinct_3"]),
            _fmt(r["kl_seq"], 2),
            judge,
            _fmt(r.get("judge/invalid_share"), 2),
        ]
        return "| " + " | ".join(cells) + " |"

    lines.append(row("start model", start))
    lines += [row(name, r) for name, r in finals.items()]
    return lines


@dataclass
class StudySetup:
    """What the report states about how the study ran (the recipe fills it from its config)."""

    policy: str  # the start model's name
    samples_per_prompt: int
    temperature: float
    max_new_tokens: int
    judge_model: str | None = None  # None: the judge was disabled
    judge_protocol: str | None = None


def write_outcome_report(
    root: Path, rows: list[dict], rm_metrics: dict, timings: dict, setup: StudySetup
) -> tuple[Path, dict, dict]:
    measure_dir = root / "measure"
    start = next(r for r in rows if r["step"] == 0)
    start_stories = stories_of(
        {"run": "start", "step": 0, "stories_file": str(measure_dir / "start.jsonl")}, measure_dir
    )
    finals = final_rows(rows)
    for r in finals.values():
        stories = stories_of(r, measure_dir)
        r["delta/proxy"], r["delta/gold"] = (
            paired_delta(stories, start_stories, "proxy"),
            paired_delta(stories, start_stories, "gold"),
        )
    by_run = _by_run(rows)
    plots = {
        "proxy_gold": plot_proxy_gold(by_run, root / "plots" / "proxy_vs_gold.png"),
        "gold_vs_kl": plot_gold_vs_kl(by_run, root / "plots" / "gold_vs_kl.png"),
        "curves": plot_curves(by_run, root / "plots" / "length_repetition_diversity.png"),
    }
    wins = plot_win_rates(rows, root / "plots" / "win_rates.png")
    if wins:
        plots["win_rates"] = wins
    verdicts = []
    for name, r in finals.items():
        trained = [x for x in by_run.get(name, []) if x["step"] > 0]
        peak = max(trained, key=lambda x: x["gold"]) if trained else None
        if peak is not None and peak["step"] != r["step"]:  # the fall from the gold peak, paired by prompt and sample
            r["delta/gold_from_peak"] = paired_delta(stories_of(r, measure_dir), stories_of(peak, measure_dir), "gold")
        verdicts += ["- " + " ".join(run_verdict(name, r, start, peak))]
    verdicts += ["- " + " ".join(controls_verdict(finals, start))] if controls_verdict(finals, start) else []
    total = sum(timings.values())
    n_prompts = len({s["id"].rsplit("#", 1)[0] for s in start_stories})
    judge_model = setup.judge_model
    lines = [
        "# Outcome study: a better story, or only a higher reward?",
        "",
        f"Policy `{setup.policy}`; proxy RM = corruption pairs (`proxy_pairs/`), gold RM = human TELL ME A STORY stories vs the "
        f"policy's own, cut to the same length (`gold_pairs/`). Held-out: {n_prompts} prompts x {setup.samples_per_prompt} samples "
        f"(temperature {setup.temperature}, {setup.max_new_tokens} new tokens). Sum of stage times {total / 60:.1f} min "
        "(a reused stage counts at its original time; measuring and judging count only what this invocation computed, "
        "cached checkpoints and verdicts cost nothing).",
        "",
        "## Conclusion",
        "",
        *verdicts,
        "",
        f"Rules: over-optimised = proxy change CI above 0 and gold change CI below 0 (paired by prompt and sample, bootstrap); "
        f"length hacking = words changed by more than {LENGTH_SHIFT:.0%} or the in-range share fell by more than {IN_RANGE_DROP}; "
        f"repetition = within-story trigram repetition x{REPETITION_RISE:g} and above {REPETITION_FLOOR}; diversity loss = distinct-3 "
        f"down by more than {DIVERSITY_DROP}. The judge "
        + (
            f"(`{judge_model}`, {setup.judge_protocol}) is reported as evidence only "
            "when its CI excludes 0.5; a small local judge near chance is not evidence."
            if judge_model
            else "was disabled."
        ),
        "",
        "## Reward models",
        "",
        "Held-out pairwise accuracy [95% CI] (pairs):",
        "",
        "| RM | proxy pairs (corruptions) | gold pairs (human vs policy) |",
        "|---|---|---|",
    ]
    for rm in ("proxy", "gold", "length_baseline"):
        cells = []
        for data in ("proxy", "gold"):
            if rm == "length_baseline":  # the same on both RMs' runs: read it from the proxy's
                cells.append(_fmt(rm_metrics.get(f"proxy_rm/{data}_pairs/length_baseline_accuracy")))
                continue
            acc = rm_metrics.get(f"{rm}_rm/{data}_pairs/accuracy")
            lo, hi = (
                rm_metrics.get(f"{rm}_rm/{data}_pairs/accuracy_ci_low"),
                rm_metrics.get(f"{rm}_rm/{data}_pairs/accuracy_ci_high"),
            )
            n = rm_metrics.get(f"{rm}_rm/{data}_pairs/pairs")
            cells.append(f"{_fmt(acc)} [{_fmt(lo)}, {_fmt(hi)}] ({_fmt(n, 0)})")
        label = "longer story wins (length only)" if rm == "length_baseline" else rm
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        f"Agreement of the two RMs (same preferred side): proxy pairs {_fmt(rm_metrics.get('agreement/proxy_pairs'))}, "
        f"gold pairs {_fmt(rm_metrics.get('agreement/gold_pairs'))}.",
        "",
        "## Final numbers",
        "",
        *_table(start, finals),
        "",
        "Δ = mean paired change from the start model on the same held-out prompts and sampling seeds. KL: Monte-Carlo estimate "
        "on the policy's own samples; best-of-n: the analytic log n - (n-1)/n.",
        "",
        "## Curves",
        "",
        *[f"![{k}](plots/{Path(p).name})" for k, p in plots.items()],
        "",
        "## Stage times",
        "",
        "| stage | seconds |",
        "|---|---|",
        *[f"| {k} | {v:.0f} |" for k, v in timings.items()],
        "",
        "## Scaling up",
        "",
        "The same command runs at cluster scale by overrides: `model.name=<a bigger instruct model>`; LitBench data for both "
        "RMs (`proxy_pairs`/`gold_pairs` replaced by `rlcw curate` outputs through `proxy_rm.data.train_file=...`, "
        "`gold_rm.data.train_file=...`); `judge.client.kind=openai judge.client.base_url=... judge.client.model=... "
        "judge.every_checkpoint=true` for a hosted judge at every checkpoint; `grpo.train.max_steps=...`, `grpo.train.deepspeed=...` "
        "and larger `measure.max_new_tokens`/`data.max_eval_prompts` for more steps and longer stories. "
        "Stages that completed under the same config are reused, so a killed study continues with the same command.",
        "",
    ]
    report = root / "report.md"
    from rlcw.io import atomic_write_text

    atomic_write_text(report, "\n".join(lines) + "\n")
    flat = {}
    for name, r in finals.items():
        for key in (
            "proxy",
            "gold",
            "words",
            "in_range",
            "rep_intra_3",
            "distinct_3",
            "kl_seq",
            "judge/win_rate",
            "judge/invalid_share",
        ):
            if key in r:
                flat[f"final/{name}/{key}"] = r[key]
        flat[f"final/{name}/delta_gold"] = r["delta/gold"]["delta"]
        flat[f"final/{name}/delta_proxy"] = r["delta/proxy"]["delta"]
    return report, flat, plots
