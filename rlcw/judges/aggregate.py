"""From verdicts to rankings: wins matrix, Bradley-Terry strengths, win rates, length control,
order consistency, invalid counts (pure maths; the BT fit is rlcw.metrics.bradley_terry).

Definitions (stated in every report):
- outcome of a judgment for a system = 1 win, 0.5 Same/tie, 0 loss; invalid judgments are
  left out and counted, never turned into ties.
- win rate of X = mean outcome of X over all its valid judgments (both presentation orders
  pooled, so "both orders averaged").
- length-controlled win rate of X: logistic regression (maximum likelihood, scipy BFGS) of
  X's outcome on d = (words of X's story - words of the other) / 100 with an intercept; the
  value is the predicted win rate at d = 0, sigmoid(intercept).
- order consistency: over pairs judged validly in both orders, the share where both orders give
  the same outcome for the same system (win/win, tie/tie or loss/loss). Agents' Room reports
  90.2% for Gemini 1.5 Pro.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from rlcw.metrics.bradley_terry import bt_strengths, wins_matrix
from rlcw.metrics.pairwise import consistent_share

Judgment = tuple[str, str, float, int, int]  # (system_a, system_b, outcome for a, words_a, words_b)


def oriented(judgments: list[Judgment], system: str) -> tuple[list[float], list[float]]:
    """(outcomes, word differences) from `system`'s side, for the judgments it took part in."""
    ys, ds = [], []
    for a, b, y, wa, wb in judgments:
        if a == system:
            ys.append(y), ds.append(float(wa - wb))
        elif b == system:
            ys.append(1.0 - y), ds.append(float(wb - wa))
    return ys, ds


def win_rates(judgments: list[Judgment]) -> dict[str, float]:
    systems = sorted({s for a, b, *_ in judgments for s in (a, b)})
    return {s: float(np.mean(oriented(judgments, s)[0])) for s in systems}


def length_controlled_win_rate(outcomes: list[float], word_diffs: list[float]) -> float:
    """Predicted win rate at equal length, sigmoid(intercept) of outcome ~ 1 + diff/100 (NaN if not estimable)."""
    y = np.asarray(outcomes, dtype=float)
    if y.size == 0:
        return float("nan")
    d = np.asarray(word_diffs, dtype=float) / 100.0
    if np.all(y == y[0]):  # one outcome throughout (e.g. all wins): the same at any length
        return float(y[0])
    if np.allclose(d, d[0]):  # no length variation: the slope is not identifiable
        return float(y.mean()) if np.allclose(d, 0.0) else float("nan")
    from scipy.optimize import minimize
    from scipy.special import expit, log_expit

    def nll(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = w[0] + w[1] * d  # (n,)
        loss = -np.sum(y * log_expit(z) + (1.0 - y) * log_expit(-z))
        r = expit(z) - y  # (n,) d loss / d z
        return float(loss), np.array([r.sum(), (r * d).sum()])

    fit = minimize(nll, np.zeros(2), jac=True, method="BFGS", options={"gtol": 1e-9})
    intercept = float(fit.x[0])
    if not math.isfinite(intercept) or abs(intercept) > 30 or abs(fit.x[1]) > 30:  # (quasi-)separation
        return float("nan")
    return 1.0 / (1.0 + math.exp(-intercept))


def order_consistency(rows: list[dict], dimension: str) -> tuple[float, int]:
    """(share consistent, number of pairs with both orders valid) over verdict rows of one dimension
    (`rlcw.metrics.pairwise.consistent_share`; NaN when no pair was judged validly in both orders)."""
    by_pair: dict[tuple, dict[int, float]] = {}
    for r in rows:
        v = r["verdicts"].get(dimension)
        if not v or not v["valid"]:
            continue
        first = min(r["system_a"], r["system_b"])  # outcome from the alphabetically first system's side
        y = {"A": 1.0, "B": 0.0, "Same": 0.5}[v["value"]]
        y = y if r["system_a"] == first else 1.0 - y
        key = (r["prompt_id"], first, max(r["system_a"], r["system_b"]))
        by_pair.setdefault(key, {})[r["order"]] = y
    pairs = list(by_pair.values())
    share, n = consistent_share([o.get(0) for o in pairs], [o.get(1) for o in pairs])
    return (float("nan") if share is None else share), n


def invalid_counts(rows: list[dict], dimension: str) -> dict:
    """Judgments, valid and invalid on one dimension, with the reasons' kinds counted."""
    verdicts = [r["verdicts"].get(dimension) or {"valid": False, "reason": "no verdict"} for r in rows]
    reasons = Counter(v["reason"].split(":")[0] for v in verdicts if not v["valid"])
    n_invalid = sum(1 for v in verdicts if not v["valid"])
    return {
        "judgments": len(verdicts),
        "valid": len(verdicts) - n_invalid,
        "invalid": n_invalid,
        "invalid_share": n_invalid / len(verdicts) if verdicts else float("nan"),
        "invalid_reasons": dict(reasons),
    }


def summarize_judgments(judgments: list[Judgment], *, n_bootstrap: int = 200, seed: int = 0) -> dict:
    """Wins matrix, BT strengths with CIs, win rates and length-controlled win rates of valid judgments."""
    if not judgments:
        return {
            "systems": [],
            "wins_matrix": [],
            "bradley_terry": {},
            "win_rate": {},
            "length_controlled_win_rate": {},
            "note": "no valid judgments: nothing to rank",
        }
    comparisons = [(a, b, y) for a, b, y, *_ in judgments]
    systems, W = wins_matrix(comparisons)
    bt = bt_strengths(comparisons, n_bootstrap=n_bootstrap, seed=seed)
    lc = {s: length_controlled_win_rate(*oriented(judgments, s)) for s in systems}
    return {
        "systems": systems,
        "wins_matrix": W.tolist(),
        "bradley_terry": bt,
        "win_rate": win_rates(judgments),
        "length_controlled_win_rate": lc,
    }


def ranking(bt: dict[str, dict[str, float]]) -> list[str]:
    return sorted(bt, key=lambda s: -bt[s]["strength"])
