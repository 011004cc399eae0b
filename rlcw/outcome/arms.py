"""The outcome report's section on arms over seeds at matched KL, read by every gold (`rlcw.outcome.seeds`).

    lines, flat = arms_section({"gold": reading1, "gold2": reading2}, targets=[2, 4, 6], base="grpo")

One table row per arm and reading point (each d in `targets`, then each seed's split-half peak): the change from
the start, raw and free of length and ending, with its seed-then-prompt 95% interval, for each gold side by side,
and the share of the read stories outside the start stories' range (no residual for them). A second table holds
each arm minus `base` at the same points. A conclusion is stated only where every gold agrees: a change whose
intervals are above 0 (or below) under each gold; otherwise the section says the golds disagree or the change is
null.

    lines, flat = junk_section({"grpo": [(6, records), (12, records)], ...})   # per run: (step, measured records)

`junk_section` gives each run's share of measured stories that are no prose at all (`rlcw.metrics.text.is_junk`)
at every checkpoint, and the first step where most are: a collapse the golds may pay for (RMs score text unlike
their training data arbitrarily), which neither the residual's cells nor a gold "fall" can show unless the gold
readings score junk as a failure (`rlcw.outcome.screen`, the study's default).
"""

from __future__ import annotations

import math

from rlcw.outcome.seeds import KINDS, Estimate, SeedReading


def _cell(e: Estimate | None) -> str:
    if e is None:
        return "not reached"
    return "no story inside the cells" if math.isnan(e.delta) else e.text()


def _sign(e: Estimate | None) -> int:
    """+1 above 0, -1 below, 0 spanning 0 or not read."""
    if e is None:
        return 0
    return 1 if e.ci_low > 0 else -1 if e.ci_high < 0 else 0


def _points(reading: SeedReading, arm: str, targets: list[float], kind: str) -> dict:
    """label -> Estimate (or None) against the start: each target d, then the peak."""
    out = {f"d = {t:g}": reading.at_d(arm, t, kind) for t in targets}
    out["peak"] = reading.peak(arm, kind)
    return out


def agreed(estimates: list[Estimate | None]) -> int:
    """+1 / -1 when every gold's interval is above / below 0, else 0 (null or disagreement)."""
    signs = {_sign(e) for e in estimates}
    return signs.pop() if len(signs) == 1 else 0


def arms_section(
    readings: dict[str, SeedReading], targets: list[float], base: str | None, notes: list[str] | None = None
) -> tuple[list[str], dict[str, float]]:
    """The report lines and flat metrics (`arms/<arm>/<point>/<gold>/<kind>`, delta and CI)."""
    golds = list(readings)
    first = readings[golds[0]]
    arms = sorted(first.runs, key=lambda a: (a != base, a))
    head = "| arm | seeds | point | " + " | ".join(f"{g} {k}" for g in golds for k in KINDS) + " | outside |"
    rule = "|" + "---|" * (4 + len(golds) * len(KINDS))
    lines = [
        "## Arms over seeds at matched KL",
        "",
        "Each arm is read where every one of its seeds first reaches d = sqrt(KL per story) (per-prompt values "
        "interpolated between the checkpoints around the crossing), and at each seed's gold peak (chosen on one half "
        "of the prompts, read on the other). Change from the start; 95% intervals resample the seeds, then the "
        "prompts (`rlcw.outcome.seeds`). *residual*: gold minus the mean gold of start stories with the same length "
        "bin and ending (a screened junk story: minus the start stories' overall mean); *outside*: share of the read "
        "stories outside the start stories' range, left out of the residual.",
        "",
        *(notes or []),
        head,
        rule,
    ]
    flat: dict[str, float] = {}
    read = {g: {a: {k: _points(r, a, targets, k) for k in KINDS} for a in arms} for g, r in readings.items()}
    for a in arms:
        for label in read[golds[0]][a][KINDS[0]]:
            cells = [read[g][a][k][label] for g in golds for k in KINDS]
            res = read[golds[0]][a]["residual"][label]
            outside = "-" if res is None else f"{res.outside:.0%}"
            reached = f"{first.reached(a, float(label[4:]))} of {len(first.runs[a])}" if label != "peak" else ""
            point = label if label != "peak" else f"peak (d = {res.d:.1f})"
            seeds = str(len(first.runs[a])) + (f", reached {reached}" if reached and cells[0] is None else "")
            lines.append(f"| {a} | {seeds} | {point} | " + " | ".join(_cell(c) for c in cells) + f" | {outside} |")
            for g in golds:
                for k in KINDS:
                    e = read[g][a][k][label]
                    if e is not None:
                        key = f"arms/{a}/{label.replace('d = ', 'd').replace(' ', '')}/{g}/{k}"
                        flat.update({key: e.delta, f"{key}_ci_low": e.ci_low, f"{key}_ci_high": e.ci_high})
    lines += ["", *_against_base(readings, arms, targets, base), *_conclusions(read, golds, arms, base)]
    return lines, flat


def _against_base(readings: dict[str, SeedReading], arms: list[str], targets: list[float], base: str | None):
    others = [a for a in arms if a != base]
    if base is None or base not in arms or not others:
        return []
    golds = list(readings)
    lines = [
        f"Each arm minus `{base}` at the same d (each arm's seeds resampled on their own, the prompts once for both):",
        "",
        "| arm | point | " + " | ".join(f"{g} {k}" for g in golds for k in KINDS) + " |",
        "|" + "---|" * (2 + len(golds) * len(KINDS)),
    ]
    for a in others:
        for t in targets:
            cells = [readings[g].diff(a, base, t, k) for g in golds for k in KINDS]
            lines.append(f"| {a} - {base} | d = {t:g} | " + " | ".join(_cell(c) for c in cells) + " |")
    return [*lines, ""]


def _conclusions(read: dict, golds: list[str], arms: list[str], base: str | None) -> list[str]:
    """One sentence per arm: where the residual change is above / below 0 under every gold, or why not."""
    out = [f"Conclusions (stated only where all of {', '.join(golds)} agree):", ""]
    for a in arms:
        labels = list(read[golds[0]][a]["residual"])
        ups = [lb for lb in labels if agreed([read[g][a]["residual"][lb] for g in golds]) > 0]
        downs = [lb for lb in labels if agreed([read[g][a]["residual"][lb] for g in golds]) < 0]
        split = [
            lb
            for lb in labels
            if len({_sign(read[g][a]["residual"][lb]) for g in golds}) > 1
            and any(read[g][a]["residual"][lb] is not None for g in golds)
        ]
        parts = []
        if ups:
            parts.append(f"the residual gold rose at {', '.join(ups)} under every gold")
        if downs:
            parts.append(f"fell at {', '.join(downs)} under every gold")
        if split:
            parts.append(f"the golds disagree at {', '.join(split)}")
        if not parts:
            parts.append("no residual change that every gold measures (null)")
        out.append(f"- **{a}**: " + "; ".join(parts) + ".")
    return [*out, ""]


def junk_section(
    measured: dict[str, list[tuple[int, list[dict]]]], arm_of: dict[str, str] | None = None, screened: bool = False
) -> tuple[list[str], dict[str, float]]:
    """Report lines (a table: run, the junk share at each checkpoint, the first step where it passes one half; then,
    given each run's arm, how many of each arm's seeds collapsed and from which step, and whether the gold readings
    score that junk raw or, `screened`, as a failure: `rlcw.outcome.screen`) and flat metrics `junk/<run>/step<k>`;
    ([], {}) when there is nothing measured."""
    from rlcw.metrics.text import is_junk

    if not any(measured.values()):
        return [], {}
    lines = [
        "Stories that are no prose at all (fewer letters than other visible characters, `rlcw.metrics.text.is_junk`), "
        "share per checkpoint. A run whose stories turned to junk collapsed, whatever a gold scores them.",
        "",
        "| run | junk share by step | most junk from step |",
        "|---|---|---|",
    ]
    flat: dict[str, float] = {}
    collapsed: dict[str, list[int | None]] = {}  # arm -> each seed's first step with most stories junk
    for run, points in measured.items():
        shares = [(step, sum(is_junk(r["story"]) for r in recs) / max(1, len(recs))) for step, recs in points]
        flat.update({f"junk/{run}/step{step}": share for step, share in shares})
        first = next((step for step, share in shares if share > 0.5), None)
        lines.append(
            f"| {run} | "
            + ", ".join(f"{step}: {share:.2f}" for step, share in shares)
            + f" | {'-' if first is None else first} |"
        )
        if arm_of:
            collapsed.setdefault(arm_of[run], []).append(first)
    if arm_of:
        said = [
            f"{arm} {len(steps)} of {len(firsts)} (from step {', '.join(map(str, steps))})"
            for arm, firsts in collapsed.items()
            if (steps := [f for f in firsts if f is not None])
        ]
        how = "score junk as a failure, each gold's floor" if screened else "score junk"
        lines += [
            "",
            f"Seeds whose stories turned to junk, by arm (gold readings from that step on {how}): "
            + ("; ".join(said) if said else "none")
            + ".",
        ]
    return [*lines, ""], flat
