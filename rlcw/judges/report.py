"""Judge reports: the strengths plot and the markdown tables of `rlcw judge`."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rlcw.judges.aggregate import ranking  # noqa: E402
from rlcw.report import save_figure  # noqa: E402


def plot_strengths(
    panels: dict[str, dict[str, dict[str, float]]], path: Path, title: str = "Bradley-Terry strength"
) -> Path:
    """One panel per dimension: BT log-strength per system with its bootstrap interval."""
    panels = {k: v for k, v in panels.items() if v} or {"(no valid verdicts)": {}}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (dim, bt) in zip(axes[0], panels.items(), strict=False):
        order = ranking(bt)[::-1]
        ys = list(range(len(order)))
        xs = [bt[s]["strength"] for s in order]
        lo = [bt[s]["strength"] - bt[s]["ci_low"] for s in order]
        hi = [bt[s]["ci_high"] - bt[s]["strength"] for s in order]
        if order:
            ax.errorbar(xs, ys, xerr=[lo, hi], fmt="o", capsize=3)
        ax.set_yticks(ys, order)
        ax.axvline(0, color="grey", lw=0.6)
        ax.set_title(dim)
        ax.set_xlabel(title)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def pairwise_table(
    dim: str, summary: dict, invalid: dict | None = None, consistency: tuple[float, int] | None = None
) -> str:
    """Markdown section for one dimension of a side-by-side protocol (or rankings derived from scores)."""
    lines = [f"### {dim}", ""]
    if invalid is not None and consistency is not None:
        lines += [
            f"judgments {invalid['judgments']}, valid {invalid['valid']}, **invalid {invalid['invalid']}** "
            f"({_f(invalid['invalid_share'])}) {invalid['invalid_reasons'] or ''}; order consistency "
            f"{_f(consistency[0])} over {consistency[1]} pairs judged validly in both orders",
            "",
        ]
    bt = summary["bradley_terry"]
    if not bt:
        return "\n".join(lines + [summary.get("note", ""), ""])
    lines += ["| system | BT strength | 95% CI | win rate | length-controlled win rate |", "|---|---|---|---|---|"]
    for s in ranking(bt):
        lines.append(
            f"| {s} | {_f(bt[s]['strength'])} | [{_f(bt[s]['ci_low'])}, {_f(bt[s]['ci_high'])}] | "
            f"{_f(summary['win_rate'][s])} | {_f(summary['length_controlled_win_rate'][s])} |"
        )
    systems = summary["systems"]
    lines += [
        "",
        "wins matrix (row beat column; ties count half):",
        "",
        "| | " + " | ".join(systems) + " |",
        "|---" * (len(systems) + 1) + "|",
    ]
    for s, row in zip(systems, summary["wins_matrix"], strict=False):
        lines.append(f"| {s} | " + " | ".join(f"{w:g}" for w in row) + " |")
    return "\n".join(lines + [""])


DEFINITIONS = (
    "Definitions: an invalid reply (no verdict, two different verdicts, a hedge or an unknown label) is "
    "left out and counted, never scored as a tie. Win rate = mean outcome (win 1, Same 0.5, loss 0) over "
    "valid judgments, both presentation orders pooled. Length-controlled win rate = sigmoid(intercept) of a "
    "logistic regression of the outcome on (own words - other's words)/100, i.e. the predicted win rate at "
    "equal length. Order consistency = share of pairs, judged validly in both orders, whose two judgments "
    "agree (Agents' Room reports 90.2%). BT = Bradley-Terry log-strengths (centred) with percentile "
    "bootstrap 95% intervals."
)
