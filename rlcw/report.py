"""Plots and markdown pieces for run reports (matplotlib, Agg backend)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rlcw.io import jsonl_lines


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl rows (a torn last line from a crash is skipped)."""
    rows = []
    if path.is_file():
        for line in jsonl_lines(path.read_text(encoding="utf-8")):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, last value per step."""
    by_step = {r["step"]: r[key] for r in rows if key in r}
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


@dataclass
class Panel:
    """One axis of a figure: a title saying what is drawn, one quantity (`ylabel`, with its unit), its lines,
    horizontal threshold lines (label -> y) and marked points (x, y, label), e.g. alerts."""

    title: str
    lines: dict[str, tuple[list, list]]
    ylabel: str = ""
    thresholds: dict[str, float] = field(default_factory=dict)
    marks: list[tuple[float, float, str]] = field(default_factory=list)


def _panel(item) -> Panel:
    return item if isinstance(item, Panel) else Panel(*item)


def plot_lines(panels: list, path: Path, xlabel: str = "step", title: str | None = None, ncols: int = 3) -> Path:
    """Panels (`Panel`, or `(title, {label: (xs, ys)}[, ylabel])`) in a grid of at most `ncols` columns, so an
    embedded figure stays readable; thresholds drawn as dashed lines, marks as red crosses; saved as PNG."""
    return save_figure(line_figure(panels, xlabel, title, ncols), path)


def line_figure(panels: list, xlabel: str = "step", title: str | None = None, ncols: int = 3):
    """The matplotlib figure `plot_lines` saves."""
    panels = [_panel(p) for p in panels]
    cols = max(1, min(ncols, len(panels)))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for label, (xs, ys) in panel.lines.items():
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, label=label)
        for (label, y), style in zip(panel.thresholds.items(), ("--", ":", "-."), strict=False):
            ax.axhline(y, color="tab:red" if "stop" in label else "tab:orange", linestyle=style, lw=1.2, label=label)
        if panel.marks:
            ax.scatter(
                [m[0] for m in panel.marks],
                [m[1] for m in panel.marks],
                marker="x",
                s=60,
                color="red",
                zorder=5,
                label=panel.marks[0][2],
            )
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(panel.ylabel)
        if xlabel == "step":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if not any(xs for xs, _ in panel.lines.values()):
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
        labelled = ax.get_legend_handles_labels()[0]  # an empty series draws nothing to name
        if labelled and (len(panel.lines) > 1 or panel.thresholds or panel.marks):
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    return fig


def save_figure(fig, path: Path, dpi: int = 110) -> Path:
    """Write a matplotlib figure atomically (temp file + rename) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    tmp.replace(path)
    return path


def _cell(text: str, limit: int = 700) -> str:
    text = text if len(text) <= limit else text[:limit] + " ..."
    return text.replace("|", "\\|").replace("\n", "<br>")


def side_by_side(before: list[dict], after: list[dict], labels: tuple[str, str] = ("before", "after")) -> str:
    """A markdown table: prompt | before story | after story, matched by record id."""
    after_by_id = {a["id"]: a for a in after}
    lines = [f"| prompt | {labels[0]} | {labels[1]} |", "|---|---|---|"]
    for b in before:
        a = after_by_id.get(b["id"])
        if a is not None:
            lines.append(f"| {_cell(b['prompt'], 300)} | {_cell(b['story'])} | {_cell(a['story'])} |")
    return "\n".join(lines)


def fmt_value(v) -> str:
    """A report cell: a float to 3 decimals, anything else (nan included) as its text."""
    return f"{v:.3f}" if isinstance(v, float) and not math.isnan(v) else str(v)


def step_table(title: str, history: list[dict]) -> list[str]:
    """A markdown section `## title` with a row a step of `history` (columns: the first entry's keys besides
    `step`; a missing value is nan), or no lines for no history."""
    if not history:
        return []
    keys = [k for k in history[0] if k != "step"]
    lines = [f"## {title}", "", "| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    return lines + [
        "| " + " | ".join([str(h["step"])] + [fmt_value(h.get(k, float("nan"))) for k in keys]) + " |" for h in history
    ]
