"""The monitors' lead-time reading by hand: warn step against the gold peak, in steps and in d."""

from __future__ import annotations

import json

import pytest

from rlcw.outcome.analysis import rl_curve, summarise
from rlcw.outcome.monitors import MEASURED, lead_rows, lead_summary, read_series


def _recs(gold: float, kl: float, prompts: int = 8) -> list[dict]:
    return [
        {
            "prompt_id": f"p{i}",
            "sample_index": k,
            "story": f"story {i} {k}",
            "scores": {"gold": gold + 0.01 * i, "proxy": gold},
            "words": 10 + i,
            "rep": 0.0,
            "finished": True,
            "kl_k3": kl,
            "kl_k1": kl,
        }
        for i in range(prompts)
        for k in range(2)
    ]


def _summary(golds: dict[int, float]):
    """Checkpoints every 4 steps; KL per story = (step / 4)^2, so d = step / 4 at each checkpoint."""
    ckpts = [(step, _recs(g, (step / 4) ** 2)) for step, g in sorted(golds.items())]
    return summarise(rl_curve("grpo", "proxy", _recs(0.0, 0.0), ckpts), n_resamples=100, fit_resamples=5)


def test_lead_time_in_steps_and_d_and_the_readings():
    s = _summary({4: 1.0, 8: 2.0, 12: 0.5})  # gold peaks at step 8 (d = 2), then falls
    assert s.peak.peak == 8 and s.peak.verdict == "fell"
    series = {
        "cap_share": [(1, 0.5), (2, 0.6), (3, 0.7), (6, 0.97), (10, 0.99)],  # breaks 0.95 at step 6
        "rep_intra": [(1, 0.01), (9, 0.2)],  # breaks 0.15 after the peak
        "distinct_group": [(1, 0.9), (12, 0.8)],  # never breaks min 0.6
        "words_mean": [(1, 40.0), (8, 30.0)],  # no rule
    }
    rules = {"max_cap_share": 0.95, "max_rep_intra": 0.15, "min_distinct_group": 0.6}
    rows = {r.stat: r for r in lead_rows(s, series, rules)}
    cap = rows["cap_share"]
    assert cap.start == pytest.approx(0.6) and cap.at_peak == 0.97 and cap.first_warn == 6
    assert cap.lead_steps == 2 and cap.warn_d == pytest.approx(1.5) and cap.lead_d == pytest.approx(0.5)
    assert cap.reading == "early"
    assert rows["rep_intra"].lead_steps == -1 and rows["rep_intra"].reading == "late"
    assert rows["distinct_group"].first_warn is None and rows["distinct_group"].reading == "missed"
    assert rows["words_mean"].rule is None and rows["words_mean"].reading == "no rule"
    table = "\n".join(lead_summary(list(rows.values())))
    assert "| max_cap_share 0.95 | 1 | 1 | 0 | 0 | 0 | 0 | 2 |" in table
    # the same warnings on a run whose gold never fell: false alarms and quiet
    flat = {r.stat: r for r in lead_rows(_summary({4: 1.0, 8: 2.0, 12: 2.5}), series, rules)}
    assert flat["cap_share"].reading == "false alarm" and flat["distinct_group"].reading == "quiet"


def test_read_series_takes_monitor_keys_and_an_ensembles_disagreement(tmp_path):
    rows = [
        {"step": 1, "monitor/cap_share": 0.5, "rewards/rm/disagreement": 0.2, "loss": 1.0},
        {"step": 2, "monitor/cap_share": float("nan"), "rewards/rm/disagreement": 0.3},
        {"time": 5.0},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    series = read_series(path)
    assert series == {"cap_share": [(1, 0.5)], "ensemble_disagreement": [(1, 0.2), (2, 0.3)]}
    assert read_series(tmp_path / "missing.jsonl") == {}
    s = _summary({4: 1.0, 8: 0.2})
    rows = {r.stat: r for r in lead_rows(s, {MEASURED: [(0, 0.1), (4, 0.4), (8, 0.9)]}, {f"max_{MEASURED}": 0.3})}
    assert rows[MEASURED].first_warn == 4 and rows[MEASURED].lead_steps == 0
