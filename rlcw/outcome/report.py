"""The outcome study's report: the Gao plot with fits, surface curves, the RM table, the points table, verdicts.

    report, flat, plots = write_outcome_report(Path("runs/outcome"), summaries, rm_rows, setup, timings)

Every number comes from `rlcw.outcome.analysis.Summary` objects; nothing is computed twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from rlcw.io import atomic_write_text
from rlcw.metrics.proxy_gain import EXPLAINED_SHARE
from rlcw.outcome.analysis import (
    KL_TARGET,
    AggregateChoice,
    Summary,
    ci_text,
    proxy_verdict,
    residual_verdict,
    run_verdict,
)
from rlcw.outcome.monitors import MonitorRead, lead_summary, lead_table
from rlcw.outcome.screen import screen_note
from rlcw.report import save_figure

# (why, overrides): the report's "Scale up" section; tests/recipes/test_outcome.py validates every one
SCALE_UP = (
    (
        "longer RL, until KL >= 2 nats per story",
        [
            "grpo.train.max_steps=120",
            "grpo.train.save_steps=15",
            "grpo_lc.train.max_steps=60",
            "ppo.train.max_steps=40",
        ],
    ),
    ("bigger best-of-n (the pool is the largest n)", ["best_of_n.sizes=[1,2,4,8,16,32,64,128]"]),
    ("more samples per held-out prompt", ["measure.samples_per_prompt=8"]),
    ("more held-out prompts (a prompt file with train and study splits)", ["data.prompts=my_prompts.jsonl"]),
    (
        "more proxy data and a third proxy size",
        [
            "proxies={small: 256, medium: 1024, large: 4096}",
            "proxy_data.samples_per_prompt=16",
            "proxy_rm.train.max_steps=300",
        ],
    ),
    ("RL against the small proxy", ["rl_proxy=small"]),
    ("a longer-trained default gold", ["gold.samples_per_prompt=4", "gold_rm.train.max_steps=120"]),
)


@dataclass
class StudySetup:
    """What the report states about how the study ran (the recipe fills it from its config)."""

    policy: str
    gold: str  # where the gold came from (an RM path, or "trained here")
    gold_rewards: str  # one sentence: what the gold rewards
    prompts: int
    samples_per_prompt: int
    pool: int  # best-of-n candidates per prompt
    max_new_tokens: int
    kl_estimator: str = "k3"
    rl_proxy: str = ""
    slop_phrases: list[str] | None = None  # the fingerprint every story's slop score counts
    junk_floor: dict[str, float] | None = None  # each gold's floor junk stories score (None: the screen is off)


def _label(s: Summary) -> str:
    return s.curve.run


def _fit_line(ax, s: Summary, color) -> None:
    f = s.fit
    if f.a is None:
        return
    top = max(p.d for p in s.curve.points)
    d = np.linspace(0, top * 1.05, 60)
    r = (
        d * (f.a - f.b * d)
        if f.form == "bon"
        else f.a * d - f.b * np.where(d > 0, d * np.log(np.maximum(d, 1e-12)), 0)
    )
    ax.plot(d, r, ls="--", lw=1, color=color)


def plot_gao(summaries: list[Summary], path: Path) -> Path:
    """Gold (with prompt-level CIs and the fitted Gao form, dashed) and proxy change against d, every curve."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, s in enumerate(summaries):
        color = f"C{i % 10}"
        pts = s.curve.points
        d = [p.d for p in pts]
        gold = [0.0] + [s.deltas[p.x]["gold"].delta for p in pts[1:]]
        low = [0.0] + [s.deltas[p.x]["gold"].delta - s.deltas[p.x]["gold"].ci_low for p in pts[1:]]
        high = [0.0] + [s.deltas[p.x]["gold"].ci_high - s.deltas[p.x]["gold"].delta for p in pts[1:]]
        marker = "s" if s.curve.form == "bon" else "o"
        axes[0].errorbar(d, gold, yerr=[low, high], marker=marker, ms=4, capsize=2, color=color, label=_label(s))
        _fit_line(axes[0], s, color)
        proxy = [0.0] + [s.deltas[p.x]["proxy"].delta for p in pts[1:]]
        axes[1].plot(d, proxy, marker=marker, ms=4, color=color, label=_label(s))
    for ax, title in zip(axes, ("gold change from the start (95% CI; dashed: Gao fit)", "proxy change"), strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("d = sqrt(KL to the start), nats^0.5 per story")
        ax.axhline(0, color="grey", lw=0.8)
        ax.axvline(math.sqrt(KL_TARGET), color="grey", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_surface(summaries: list[Summary], path: Path) -> Path:
    """Words, trigram repetition and distinct-3 against d, every curve."""
    keys = (("words", "words per story"), ("rep", "trigram repetition within a story"), ("distinct", "distinct-3"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for i, s in enumerate(summaries):
        pts, marker = s.curve.points, "s" if s.curve.form == "bon" else "o"
        for ax, (key, _) in zip(axes, keys, strict=True):
            ys = [p.distinct if key == "distinct" else p.mean(key) for p in pts]
            ax.plot([p.d for p in pts], ys, marker=marker, ms=4, color=f"C{i % 10}", label=_label(s))
    for ax, (_, title) in zip(axes, keys, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("d = sqrt(KL to the start)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def _f(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def slop_note(setup: StudySetup) -> list[str]:
    if not setup.slop_phrases:
        return []
    top = ", ".join(f"'{p}'" for p in setup.slop_phrases[:12])
    return [
        f"Slop: % of a story's words inside the {len(setup.slop_phrases)} phrases the measured stories (the start's "
        f"and every checkpoint's, pooled) over-use against the bundled human stories (`rlcw.metrics.slop`): {top}.",
        "",
    ]


def points_table(summaries: list[Summary]) -> list[str]:
    head = ["run", "step / n", "d", "KL k3", "KL k1", "proxy", "Δproxy [95% CI]", "gold", "Δgold [95% CI]"]
    head += ["words", "rep-3", "distinct-3", "slop % [Δ 95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        for p in s.curve.points:
            dl = s.deltas.get(p.x, {})
            cells = [s.curve.run, str(p.x), f"{p.d:.3f}", f"{p.kl:.4f}", _f(p.kl_k1, 4), f"{p.mean('proxy'):.3f}"]
            cells += [ci_text(dl.get("proxy")), f"{p.mean('gold'):.3f}", ci_text(dl.get("gold"))]
            cells += [f"{p.mean('words'):.1f}", f"{p.mean('rep'):.3f}", f"{p.distinct:.3f}"]
            slop = f"{p.mean('slop'):.2f}" + (f" ({ci_text(dl['slop'])})" if "slop" in dl else "")
            cells.append(slop if "slop" in p.values else "-")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or np.std(xs) == 0 or np.std(ys) == 0:
        return None
    return float(np.corrcoef(xs, ys)[0, 1])


def after_peak_text(s: Summary) -> str:
    """One cell: what happened after the gold peak (split-half verdict, then the per-point readings)."""
    kinds = [a.kind for a in s.after_peak]
    if s.peak.verdict == "peak_is_final":
        return "peak is the last point"
    text = {"fell": "gold fell", "rose": "gold rose further", "no_fall": "no measurable fall"}[s.peak.verdict]
    if "overoptimised" in kinds:
        text += "; over-optimised"
    if "collapsed" in kinds:
        text += "; collapsed"
    return text


def methods_table(summaries: list[Summary]) -> list[str]:
    """One row per run: where gold peaked, the gold and residual rise there (test half), what came after, and
    how much the optimised proxy paid for length on start stories."""
    head = ["run", "proxy", "d at the gold peak", "gold peak - start [95% CI]", "residual peak - start [95% CI]"]
    head += ["residual", "after the peak", "r(proxy, words) on start stories"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        c = s.curve
        r = _pearson(c.start_features.get("words", []), c.start_proxy)
        cells = [c.run, c.proxy, f"{s.point(s.peak.peak).d:.3f}", ci_text(s.rise), ci_text(s.residual_rise)]
        cells += [residual_verdict(s), after_peak_text(s), _f(r, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def residual_table(summaries: list[Summary]) -> list[str]:
    """Every point's gold change split into what words and ending predict and the residual (prompt-level CIs)."""
    head = ["run", "step / n", "d", "Δgold [95% CI]", "Δwords", "Δended", "explained by words + ending"]
    head += ["Δresidual [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        for p in s.curve.points[1:]:
            dl = s.deltas[p.x]
            cells = [s.curve.run, str(p.x), f"{p.d:.3f}", ci_text(dl["gold"]), f"{dl['words'].delta:+.1f}"]
            cells += [f"{dl['ended'].delta:+.3f}", f"{s.explained[p.x]:+.3f}", ci_text(s.residual[p.x])]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def slopes_line(summaries: list[Summary]) -> str:
    seen = {}
    for s in summaries:
        b = s.curve.gold_slopes
        seen.setdefault((round(b["words"], 6), round(b["ended"], 6)), []).append(s.curve.run)
    parts = [f"{w:+.4f} per word and {e:+.3f} for ending ({', '.join(runs)})" for (w, e), runs in seen.items()]
    return "The gold's slopes on start-policy stories outside each curve's start point: " + "; ".join(parts) + "."


def fits_table(summaries: list[Summary]) -> list[str]:
    lines = [
        "| run | form | a [95% CI] | b [95% CI] | d* [95% CI] | R(d*) | peak in range | points | rmse / why no fit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        f, ci = s.fit, s.fit_ci

        def iv(v, pair):
            return f"{_f(v)} [{_f(pair[0])}, {_f(pair[1])}]" if pair else _f(v)

        form = "d(a - b d)" if f.form == "bon" else "d(a - b log d)"
        cells = [
            s.curve.run,
            form,
            iv(f.a, ci.a if ci else None),
            iv(f.b, ci.b if ci else None),
            iv(f.d_star, ci.d_star if ci else None) + (f" ({ci.peak_share:.0%} of resamples peak)" if ci else ""),
            _f(f.r_star),
            "yes" if f.peak_in_range else "no",
            str(f.n_points),
            f.reason or _f(f.rmse, 4),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def peak_table(summaries: list[Summary]) -> list[str]:
    lines = [
        "| run | peak (selection half) | d at peak | peak - start (test half) | final - peak (test half) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for s in summaries:
        p = s.point(s.peak.peak)
        lines.append(
            f"| {s.curve.run} | {p.x} | {p.d:.3f} | {ci_text(s.rise)} | {ci_text(s.peak.fall)} | {s.peak.verdict} |"
        )
    after = [(s, a) for s in summaries for a in s.after_peak]
    if after:
        lines += [
            "",
            "Every point after the peak against the peak, on the test half (CIs Bonferroni-corrected over the run's "
            "points after its peak): over-optimisation is gold below the peak while the proxy is above it; a collapse "
            "is both below.",
            "",
            "| run | step / n | d | gold - peak | proxy - peak | reading |",
            "|---|---|---|---|---|---|",
        ]
        for s, a in after:
            lines.append(
                f"| {s.curve.run} | {a.x} | {s.point(a.x).d:.3f} | {ci_text(a.gold)} | {ci_text(a.proxy)} | {a.kind} |"
            )
    return lines


def rm_table(rm_rows: list[dict]) -> list[str]:
    """rm_rows: {"rm", "role", "train_pairs", "label_noise", "agreement" (Agreement or None), "note"}."""
    lines = [
        "| RM | role | training pairs | label noise | agreement with the gold [95% CI] (pairs, prompts) | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in rm_rows:
        a = r.get("agreement")
        agree = f"{a.accuracy:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}] ({a.pairs}, {a.prompts})" if a else "-"
        lines.append(
            f"| {r['rm']} | {r['role']} | {_f(r.get('train_pairs'))} | {_f(r.get('label_noise'))} | {agree} | {r.get('note', '')} |"
        )
    return lines


def aggregate_section(choice: AggregateChoice | None) -> list[str]:
    """Which ensemble aggregate best-of-n uses best (chosen on one half of the prompts, tested on the other)."""
    if choice is None:
        return []
    rows = [f"| {label} | {gold:+.3f} |" for label, gold in choice.selection_gold.items()]
    return [
        "## Ensemble aggregate for best-of-n",
        "",
        "Best-of-n of the ensemble proxy under each aggregate, re-aggregated from its members' pool scores: mean gold "
        "of the pick at the largest n on the selection half of the prompts. The best one is reported with its gold "
        f"change from n = 1 on the test half: **{choice.chosen}**, {ci_text(choice.test)}.",
        "",
        "| aggregate | gold at the largest n, selection half |",
        "|---|---|",
        *rows,
        "",
    ]


def monitor_section(reads: list[MonitorRead]) -> list[str]:
    """The monitors' lead-time table and its per-rule summary (empty without RL runs)."""
    if not reads:
        return []
    runs = len({r.run for r in reads})
    return [
        "## Monitors against the gold peak",
        "",
        "Each statistic the RL runs logged, read against the run's gold peak (`rlcw.outcome.monitors`): a useful "
        "warn rule breaks at or before the peak of a run whose gold then fell (early), and stays quiet otherwise. "
        "`measured_disagreement` is the ensemble proxy's member spread on each checkpoint's held-out samples, "
        "whichever proxy the run optimised. Lead = peak - first warning (positive: before the peak).",
        "",
        *lead_summary(reads),
        "",
        f"{runs} run(s): counts this small calibrate nothing on their own; read them with the levels below "
        "(start, at the peak) to place a threshold between what the start logs and what the peak logs.",
        "",
        *lead_table(reads),
        "",
    ]


def write_outcome_report(
    root: Path,
    summaries: list[Summary],
    rm_rows: list[dict],
    setup: StudySetup,
    timings: dict[str, float],
    monitors: list[MonitorRead] | None = None,
    aggregate_choice: AggregateChoice | None = None,
    arms: list[str] | None = None,
) -> tuple[Path, dict, dict]:
    """report.md, its flat metrics and plots; `arms`: the lines of the arms-over-seeds section
    (`rlcw.outcome.arms`), placed after the conclusion."""
    plots = {
        "gao": plot_gao(summaries, root / "plots" / "gao_gold_proxy_vs_d.png"),
        "surface": plot_surface(summaries, root / "plots" / "length_repetition_diversity_vs_d.png"),
    }
    proxies = list(dict.fromkeys(s.curve.proxy for s in summaries))
    lines = [
        "# Outcome study: does optimising a learned reward make better stories, or only a higher reward?",
        "",
        f"Gao et al. (2022)'s design at small scale. Policy `{setup.policy}`. **The gold is a stand-in for human "
        f"judgement, not human judgement**: {setup.gold}. {setup.gold_rewards} Proxies are reward models trained on "
        "pairs of the start policy's own samples for the RL prompts, labelled by sampled Bradley-Terry draws from the "
        f"gold. RL and DPO optimise `{setup.rl_proxy}`, best-of-n each proxy in turn; the gold only measures.",
        "",
        f"Measurement: {setup.prompts} held-out prompts (the bundled `study` split, never trained on) x "
        f"{setup.samples_per_prompt} samples per checkpoint, temperature 1, top_k 0, top_p 1, at most "
        f"{setup.max_new_tokens} new tokens, common random numbers across checkpoints. KL per story on the sampled "
        f"token ids including EOS, estimator {setup.kl_estimator} (k1 alongside); d = sqrt(mean KL per story). "
        f"Best-of-n: one pool of {setup.pool} start samples per prompt, Gao et al.'s unbiased estimator over every "
        "n-subset, d = sqrt(log n - (n-1)/n). Every CI is a 95% prompt-level paired bootstrap; peaks are chosen on "
        f"one half of the prompts and tested on the other. {screen_note(setup.junk_floor)}",
        "",
        "## Conclusion",
        "",
        *["- " + line for s in summaries for line in run_verdict(s)],
        "",
        "How far each proxy could be pushed before the gold fell (split-half test; fitted peak where the fit turns down):",
        "",
        *[proxy_verdict(p, [s for s in summaries if s.curve.proxy == p]) for p in proxies],
        "",
        f"Rules: a change is real when its CI excludes 0; length and repetition explain a proxy gain when their slopes "
        f"on the start's stories predict at least {EXPLAINED_SHARE:.0%} of it; KL target {KL_TARGET:g} nats per story.",
        "",
        *(arms or []),
        "## Every method at its gold peak",
        "",
        "Peaks chosen on one half of the prompts, rises tested on the other; the residual is the gold free of "
        "length and ending (`rlcw.outcome.analysis`: gold minus its own start-story slopes on words and ending).",
        "",
        *methods_table(summaries),
        "",
        "## Reward models",
        "",
        *rm_table(rm_rows),
        "",
        "## Gao plot",
        "",
        f"![gold and proxy against d](plots/{plots['gao'].name})",
        "",
        "## Fits",
        "",
        *fits_table(summaries),
        "",
        "## Peak and fall (split-half)",
        "",
        *peak_table(summaries),
        "",
        *monitor_section(monitors or []),
        *aggregate_section(aggregate_choice),
        "## Length, repetition and diversity",
        "",
        f"![length, repetition, diversity against d](plots/{plots['surface'].name})",
        "",
        "## Gold change: length and ending against the residual",
        "",
        slopes_line(summaries),
        "",
        *residual_table(summaries),
        "",
        "## Every point (changes from the start with prompt-level 95% CIs)",
        "",
        *slop_note(setup),
        *points_table(summaries),
        "",
        "## Stage times",
        "",
        "| stage | seconds |",
        "|---|---|",
        *[f"| {k} | {v:.0f} |" for k, v in timings.items()],
        f"| total | {sum(timings.values()):.0f} |",
        "",
        "A reused stage counts at its original time.",
        "",
        "## Scale up",
        "",
        "Sizes that do not fit 150 CPU minutes, as overrides of the same command (stages whose settings did not change are reused):",
        "",
        *[f"- {why}: `{' '.join(overrides)}`" for why, overrides in SCALE_UP],
        "",
        "On a GPU: a bigger policy (`model.name=Qwen/Qwen2.5-1.5B-Instruct`) and a stronger gold (`gold.rm_path=` an RM "
        "trained on LitBench); the study's own sampling, KL and scoring run where the models load (CPU as shipped).",
        "",
    ]
    report = atomic_write_text(root / "report.md", "\n".join(lines) + "\n")
    return report, flat_metrics(summaries), plots


def flat_metrics(summaries: list[Summary]) -> dict[str, float]:
    """summary.json numbers per curve (floats only, the run folder contract; a missing value is left out):
    final d, proxy and gold change, the peak and its d, the split-half rise and fall (with CIs), whether gold
    fell after the peak (1/0) and whether a later point showed over-optimisation (1/0), the fit."""
    out: dict[str, float] = {}

    def put(name: str, value) -> None:
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            out[name] = float(value)

    def put_ci(name: str, diff) -> None:
        if diff is not None:
            put(name, diff.delta)
            put(f"{name}_lo", diff.ci_low)
            put(f"{name}_hi", diff.ci_high)

    for s in summaries:
        key, fin = s.curve.run, s.final
        put(f"{key}/final_d", fin.d)
        if fin.x in s.deltas:
            put_ci(f"{key}/delta_gold", s.deltas[fin.x]["gold"])
            put_ci(f"{key}/delta_proxy", s.deltas[fin.x]["proxy"])
        put(f"{key}/peak", s.peak.peak)
        put(f"{key}/peak_d", s.point(s.peak.peak).d)
        put_ci(f"{key}/rise_test_half", s.rise)
        put_ci(f"{key}/residual_rise_test_half", s.residual_rise)
        put_ci(f"{key}/fall_test_half", s.peak.fall)
        put(f"{key}/gold_fell", s.peak.verdict == "fell")
        put(f"{key}/overoptimised", any(a.kind == "overoptimised" for a in s.after_peak))
        put(f"{key}/fit_a", s.fit.a)
        put(f"{key}/fit_b", s.fit.b)
        put(f"{key}/fit_d_star", s.fit.d_star)
    return out
