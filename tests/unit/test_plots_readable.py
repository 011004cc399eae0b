"""Plots a reader can read: a grid, not a strip; every axis labelled; thresholds drawn; broken rules marked."""

from __future__ import annotations

from rlcw.measure.monitors import MONITOR_PANELS, PREFIX, plot_monitors
from rlcw.report import Panel, line_figure, plt


def _rows(n: int = 6) -> list[dict]:
    return [
        {"step": s, PREFIX + "cap_share": 0.8 + 0.04 * s, PREFIX + "kl_to_start": 0.1 * s} for s in range(1, n + 1)
    ]


def test_panels_go_in_a_grid_with_labelled_axes_and_drawn_thresholds():
    panels = [Panel(f"p{i}", {"a": ([1, 2], [0.1, 0.2])}, "share", {"warn: max a": 0.15}) for i in range(7)]
    fig = line_figure(panels)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    width, height = fig.get_size_inches()
    assert len(visible) == 7 and width / height < 2  # 3 columns x 3 rows, not 7 side by side
    assert all(ax.get_ylabel() == "share" and ax.get_xlabel() == "step" for ax in visible)
    assert all(any(line.get_linestyle() == "--" for line in ax.get_lines()) for ax in visible)
    plt.close(fig)


def test_monitor_figure_draws_warn_and_stop_and_marks_the_steps_that_broke_a_rule(tmp_path, monkeypatch):
    import rlcw.report as report

    seen = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: seen.setdefault("fig", fig) and path)
    plot_monitors(_rows(), tmp_path / "m.png", {"max_cap_share": 0.95}, {"max_kl_to_start": 2.0})
    axes = {ax.get_title(): ax for ax in seen["fig"].axes if ax.get_visible()}
    assert len(axes) == len(MONITOR_PANELS) and all(ax.get_ylabel() for ax in axes.values())
    cap = axes["completions cut at the token cap"]
    assert [t.get_text() for t in cap.get_legend().get_texts()] == ["cap share", "warn: max cap_share", "rule broken"]
    marked = cap.collections[0].get_offsets()
    assert [round(x) for x, _ in marked] == [4, 5, 6]  # 0.96, 1.00, 1.04 > 0.95
    kl = axes["KL to the starting model"]
    assert "stop: max kl_to_start" in [t.get_text() for t in kl.get_legend().get_texts()]
    plt.close(seen["fig"])
