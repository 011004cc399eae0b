"""Position bias and logprob-verdict summaries of pairwise verdict rows (pure maths over rows).

    position_bias(rows, "overall")     # share of valid verdicts for the story shown first (0.5 = none)
    logprob_summary(rows, "preferred") # margins, and the verdict with both orders averaged

A weak judge shows here: a judge that always answers "A" has position bias 1.0 and order
consistency 0, whatever its invalid share.
"""

from __future__ import annotations

from rlcw.metrics.pairwise import averaged_preference, first_position_rate, prob_outcomes


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


_FIRST = {"A": 1.0, "B": 0.0, "Same": 0.5}


def position_bias(rows: list[dict], dimension: str) -> float | None:
    """Share of valid verdicts for the story shown first (A), Same = half (0.5 = no position bias)."""
    votes = [_FIRST[r["verdicts"][dimension]["value"]] for r in rows if r["verdicts"][dimension]["valid"]]
    return first_position_rate(votes, [])


def logprob_summary(rows: list[dict], dimension: str) -> dict:
    """Mean label-probability margin, and the verdict with both orders averaged: per pair P(system x
    better) = (P_x shown first wins + 1 - P_y shown first wins) / 2 (Same counts half), and per system
    the share of its pairs that average in its favour (0.5 at exactly 0.5) and its mean P."""
    margins = [r["verdicts"][dimension]["margin"] for r in rows if r["verdicts"][dimension].get("margin") is not None]
    first_wins: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in rows:
        probs = r["verdicts"][dimension].get("probs")
        if probs:
            key = (r["prompt_id"], *sorted((r["system_a"], r["system_b"])))
            first_wins.setdefault(key, {})[r["system_a"]] = probs["A"] + probs.get("Same", 0.0) / 2
    keys = [k for k, v in first_wins.items() if len(v) == 2]
    p_x = averaged_preference([first_wins[k][k[1]] for k in keys], [first_wins[k][k[2]] for k in keys])
    outcomes = prob_outcomes([float(p) for p in p_x])
    per_system: dict[str, list[tuple[float, float]]] = {}
    for (_, x, y), p, o in zip(keys, p_x, outcomes, strict=True):
        per_system.setdefault(x, []).append((float(p), o))
        per_system.setdefault(y, []).append((1.0 - float(p), 1.0 - o))
    return {
        "mean_margin": _mean(margins),
        "pairs_both_orders": len(keys),
        "averaged_win_rate": {s: _mean([o for _, o in v]) for s, v in sorted(per_system.items())},
        "mean_p_better": {s: _mean([p for p, _ in v]) for s, v in sorted(per_system.items())},
        "pair_probs": {"|".join(k): float(p) for k, p in zip(keys, p_x, strict=True)},
    }
