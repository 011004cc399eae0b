"""Plots and markdown pieces for run reports (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl rows (a torn last line from a crash is skipped)."""
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
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


def plot_lines(panels: list[tuple[str, dict[str, tuple[list, list]]]], path: Path, xlabel: str = "step") -> Path:
    """One subplot per (title, {label: (xs, ys)}) panel, saved as PNG."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels, strict=False):
        for label, (xs, ys) in lines.items():
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, label=label)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


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
