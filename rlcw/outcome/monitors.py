"""The RL monitors read against the gold: when did each warn rule break, relative to the gold peak? (no model code)

    series = read_series(run_dir / "metrics.jsonl")                 # stat -> [(step, value)] as the run logged it
    rows = lead_rows(summary, series, {"max_cap_share": 0.95})       # one MonitorRead per logged statistic

A monitor is useful when it warns BEFORE the gold turns down and stays quiet when it does not. For every
statistic a run logged (`monitor/<stat>`, and `ensemble_disagreement` from an ensemble reward's own log) and
for the ensemble disagreement measured on the checkpoints' held-out samples (`measured_disagreement`, when
the study has an ensemble proxy), this reads: its level at the start (mean of the first `BASE` logged
steps) and at the gold peak (the last logged value at or before the peak's step), the first step its warn
rule (`max_<stat>` / `min_<stat>`, `rlcw.measure.monitors.check_rules`) broke, and the lead time to the gold
peak in steps and in d = sqrt(KL per story) (steps mapped to d by interpolating the measured checkpoints;
the start is d = 0). The gold peak and whether gold fell after it are the split-half test's
(`rlcw.outcome.analysis`): the peak is chosen on one half of the prompts, the fall tested on the other.

Readings: "early" (warned at or before the peak, gold fell later), "late" (warned after the peak; gold
fell), "false alarm" (warned, gold never fell), "missed" (gold fell, no warning), "quiet" (neither).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlcw.io import jsonl_lines
from rlcw.measure.monitors import check_rules, monitor_stats
from rlcw.outcome.analysis import Summary

BASE = 3  # logged steps averaged for a statistic's start level
MEASURED = "measured_disagreement"  # the ensemble's disagreement on each checkpoint's held-out samples


@dataclass(frozen=True)
class MonitorRead:
    run: str
    stat: str
    rule: str | None  # "max_cap_share" etc.; None: no warn rule for this statistic
    threshold: float | None
    start: float
    at_peak: float | None
    first_warn: int | None  # step
    warn_d: float | None
    peak: int  # the gold peak's step
    peak_d: float
    gold_fell: bool

    @property
    def lead_steps(self) -> int | None:
        return None if self.first_warn is None else self.peak - self.first_warn

    @property
    def lead_d(self) -> float | None:
        return None if self.warn_d is None else self.peak_d - self.warn_d

    @property
    def reading(self) -> str:
        if self.rule is None:
            return "no rule"
        if self.first_warn is None:
            return "missed" if self.gold_fell else "quiet"
        if not self.gold_fell:
            return "false alarm"
        return "early" if self.first_warn <= self.peak else "late"


def read_series(metrics: Path) -> dict[str, list[tuple[int, float]]]:
    """stat -> [(step, value)] from a run's metrics.jsonl (finite values only, in step order)."""
    out: dict[str, list[tuple[int, float]]] = {}
    if not metrics.is_file():
        return out
    for line in jsonl_lines(metrics.read_text(encoding="utf-8")):
        row = json.loads(line)
        if "step" not in row:
            continue
        for stat, value in monitor_stats(row).items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                out.setdefault(stat, []).append((int(row["step"]), float(value)))
    return {k: sorted(v) for k, v in out.items()}


def gold_fell(s: Summary) -> bool:
    """The split-half verdict: gold fell after its peak, or some later point was measurably below it."""
    return s.peak.verdict == "fell" or any(a.kind != "no_fall" for a in s.after_peak)


def lead_rows(s: Summary, series: dict[str, list[tuple[int, float]]], rules: dict[str, float]) -> list[MonitorRead]:
    """One MonitorRead per statistic in `series` (and per rule whose statistic never appeared)."""
    xs, ds = [p.x for p in s.curve.points], [p.d for p in s.curve.points]
    peak = s.peak.peak
    peak_d = float(np.interp(peak, xs, ds))
    fell = gold_fell(s)
    by_stat = {rule.partition("_")[2]: rule for rule in rules}
    out = []
    for stat in sorted(set(series) | set(by_stat)):
        values = series.get(stat, [])
        rule = by_stat.get(stat)
        first = None
        if rule is not None:
            first = next((step for step, v in values if check_rules({stat: v}, {rule: rules[rule]})), None)
        before = [v for step, v in values if step <= peak]
        out.append(
            MonitorRead(
                run=s.curve.run,
                stat=stat,
                rule=rule,
                threshold=rules.get(rule) if rule else None,
                start=float(np.mean([v for _, v in values[:BASE]])) if values else float("nan"),
                at_peak=before[-1] if before else None,
                first_warn=first,
                warn_d=None if first is None else float(np.interp(first, xs, ds)),
                peak=peak,
                peak_d=peak_d,
                gold_fell=fell,
            )
        )
    return out


def _f(v, digits: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}g}"


def lead_table(rows: list[MonitorRead]) -> list[str]:
    head = ["run", "statistic", "warn rule", "start", "at the gold peak", "first warning (step)", "gold peak (step)"]
    head += ["lead (steps)", "lead (d)", "gold fell after", "reading"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        rule = f"{r.rule} {r.threshold:g}" if r.rule else "-"
        cells = [r.run, r.stat, rule, _f(r.start), _f(r.at_peak), _f(r.first_warn), str(r.peak)]
        cells += [_f(r.lead_steps), _f(r.lead_d), "yes" if r.gold_fell else "no", r.reading]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def lead_summary(rows: list[MonitorRead]) -> list[str]:
    """Per rule over the runs: how often it warned early, late, falsely, or missed a fall."""
    by_rule: dict[str, list[MonitorRead]] = {}
    for r in rows:
        if r.rule:
            by_rule.setdefault(f"{r.rule} {r.threshold:g}", []).append(r)
    lines = ["| warn rule | runs | early | late | false alarm | missed | quiet | median lead (steps) |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    for rule, rs in by_rule.items():
        counts = {k: sum(r.reading == k for r in rs) for k in ("early", "late", "false alarm", "missed", "quiet")}
        leads = [r.lead_steps for r in rs if r.lead_steps is not None and r.gold_fell]
        lead = f"{np.median(leads):g}" if leads else "-"
        lines.append(f"| {rule} | {len(rs)} | " + " | ".join(str(v) for v in counts.values()) + f" | {lead} |")
    return lines
