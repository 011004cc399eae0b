"""The quickstart's report.md: the headline, the held-out table, slop, the checks, before/after samples, stage
times and figures."""

from __future__ import annotations

import math
from pathlib import Path

from rlcw.io import read_jsonl
from rlcw.measure.monitors import plot_monitors
from rlcw.metrics.bootstrap import small_sample_note
from rlcw.pipelines.quickstart_gates import Check, ci_text
from rlcw.report import plot_lines, read_metrics, series, side_by_side


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


def smoothed(ys: list[float], window: int = 4) -> list[float]:
    """Trailing moving average over up to `window` points."""
    return [sum(ys[max(0, i - window + 1) : i + 1]) / len(ys[max(0, i - window + 1) : i + 1]) for i in range(len(ys))]


def plots(root: Path, warn: dict, stop: dict) -> list[Path]:
    """The report's figures; `warn` and `stop` (grpo.monitor's rules) are the thresholds drawn on the monitors figure."""
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
    monitors = plot_monitors(g_rows, root / "plots" / "grpo_monitors.png", warn, stop)
    return [reward_plot, probe, rm_plot, monitors]


def heldout_table(h: dict) -> list[str]:
    """The held-out table: start, tuned, change with its 95% CI over prompts."""
    rows = [
        ("RM score", f"{h['rm_start']:.2f}", f"{h['rm_final']:.2f}", ci_text(h, "rm_delta")),
        ("win rate of tuned vs start (by the RM)", "", "", ci_text(h, "win_rate", ".2f")),
        (
            "share that ends inside the word range",
            f"{h['in_range_start']:.2f}",
            f"{h['in_range_final']:.2f}",
            ci_text(h, "in_range_delta"),
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
            ci_text(h, "ended_short_delta") if "ended_short_delta_lo" in h else "",
        ),
        (
            "of the stories that ended, the share below the range",
            f"{h.get('short_of_ended_start', math.nan):.2f}",
            f"{h.get('short_of_ended_final', math.nan):.2f}",
            ci_text(h, "short_of_ended_delta") if "short_of_ended_delta_lo" in h else "",
        ),
        ("share ending before the cap", f"{h['finished_start']:.2f}", f"{h['finished_final']:.2f}", ""),
        ("words", f"{h['words_start']:.0f}", f"{h['words_final']:.0f}", ""),
        ("trigram repetition within stories", f"{h['rep_start']:.3f}", f"{h['rep_final']:.3f}", ""),
    ]
    small = small_sample_note(int(h.get("n_prompts", math.inf)), "prompts", "changes")
    lines = [f"**Warning: {small}.**", ""] if small else []
    lines += ["| measure | start | tuned | change [95% CI] |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    lines += [
        "",
        "What the RM change is made of:",
        "",
        f"- within pairs where both stories end before the cap: {ci_text(h, 'rm_delta_both_finished', empty='no such pair')}",
        f"- within pairs where both are cut at the cap: {ci_text(h, 'rm_delta_both_cut', empty='no such pair')}",
        f"- explained by ending more often: {h['rm_delta_from_ending']:+.2f} (= ended-share change "
        f"{h['finished_final'] - h['finished_start']:+.2f} x the RM's ended-minus-cut gap "
        f"{h['rm_gap_ended_minus_cut']:.2f} on the start samples)",
        f"- length-controlled RM change (minus b log(1+words), b fitted on the start samples): "
        f"{ci_text(h, 'rm_delta_length_controlled')}",
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
            f"- for ending (ended minus cut at the cap): {ci_text(h, 'rm_pays_ending', empty='no ended or no cut story')}",
            f"- for ending short (ended below the range minus ended inside it): "
            f"{ci_text(h, 'rm_pays_ending_short', empty='no story of one kind')}",
            f"- per 10 words within ended stories: {ci_text(h, 'rm_per_10_words_ended', empty='too few ended stories')}",
            f"- Pearson(RM score, words) over all start samples: {h['rm_words_pearson_start']:+.2f}; over the ended "
            f"ones only: {h.get('rm_words_pearson_start_ended', math.nan):+.2f}",
        ]
    return lines


SLOP_WARN = 1.0  # points of slop (% of words): a tuned-minus-start lower bound above this is warned about


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
    start, tuned = read_jsonl(root / "heldout" / "start.jsonl"), read_jsonl(root / "heldout" / "tuned.jsonl")
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


def headline(checks: list[Check], h: dict) -> str:
    """The report's first line: PASS or FAIL (naming the failed checks), the held-out RM change, the change in the
    share of stories ending inside the asked range and in the share ending below it (too short)."""
    failed = [c.name.split(":")[0].split(" (")[0] for c in checks if not c.passed]
    word = "PASS" if not failed else f"FAIL ({'; '.join(failed)})"
    short_start, short_final = h.get("ended_short_start", math.nan), h.get("ended_short_final", math.nan)
    return (
        f"{word}: held-out RM change {ci_text(h, 'rm_delta')}; ending inside the asked range "
        f"{h['in_range_start']:.2f} -> {h['in_range_final']:.2f} ({ci_text(h, 'in_range_delta')}); ending too short "
        f"{short_start:.2f} -> {short_final:.2f} ({short_final - short_start:+.2f})"
    )


def report(
    head: str,
    n_resamples: int,
    root: Path,
    timings: dict,
    h: dict,
    checks: list[Check],
    verdict: str,
    figures: list,
    slop: dict,
    extra: dict,
) -> str:
    """report.md's text; `head` names the model and the seed, `n_resamples` is the held-out bootstrap's,
    `figures` are `plots`' paths, `extra` the heldout.score_with changes."""
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
    by_name = {p.stem: p for p in figures}
    lines = [
        f"# {headline(checks, h)}",
        "",
        f"rlcw quickstart report. {head} Total stage time {total:.0f} s.",
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
        f"numbers for start and tuned, 95% percentile bootstrap over prompts, B = {n_resamples})",
        "",
        *heldout_table(h),
        "",
        *score_with_lines(extra),
        *slop_lines(slop),
        "",
        "## Checks",
        "",
    ]
    lines += [f"- {c.label}: {c.name}: {c.detail}" for c in checks]
    lines += ["", "## Samples before / after GRPO (held-out prompts, same random numbers)", "", gains_and_losses(root)]
    lines += ["## Stage times", "", "| stage | seconds | share |", "|---|---|---|"]
    lines += [f"| {k} | {v:.0f} | {100 * v / total:.0f}% |" for k, v in timings.items()]
    lines += ["", "## Other plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in figures[2:]]
    lines += [
        "",
        "Stage folders: "
        + ", ".join(f"`{k}/`" for k in timings)
        + " (each with config.yaml, metrics.jsonl, summary.json; `heldout/` holds the scored samples).",
    ]
    return "\n".join(lines) + "\n"
