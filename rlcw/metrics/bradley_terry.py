"""Bradley-Terry strengths from pairwise comparisons, with bootstrap intervals (pure maths).

    from rlcw.metrics.bradley_terry import bt_strengths, wins_matrix
    comparisons = [("tuned", "base", 1.0), ("base", "tuned", 0.5), ("tuned", "ref", 0.0)]
    systems, W = wins_matrix(comparisons)        # W[i, j] = wins of systems[i] over systems[j]
    bt_strengths(comparisons)["tuned"]           # {"strength": ..., "ci_low": ..., "ci_high": ...}

Model: P(i beats j) = sigmoid(s_i - s_j), where s are log-strengths. An outcome is the first
system's share of the win: 1.0 = first wins, 0.0 = second wins, 0.5 = a tie, counted as half a
win for each side (any value in [0, 1] is split the same way). The fit maximises
    sum_ij W_ij log sigmoid(s_i - s_j) - (l2 / 2) * sum_i s_i^2
with scipy's L-BFGS and the analytic gradient. The small L2 term (a Gaussian prior) keeps a
system that won or lost every comparison finite; with l2=0 the fit is the plain maximum
likelihood (then 3 wins to 1 gives s_A - s_B = log 3 exactly). At the optimum the strengths
already have mean 0 (the prior's gradient is the only part that does not cancel in the sum);
we centre again so l2=0 fits are comparable too. Intervals are percentile intervals over refits
on comparisons resampled with replacement (`rlcw.metrics.bootstrap.bootstrap_indices`); a system
missing from a resample is held at 0 by the prior.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from rlcw.metrics.bootstrap import bootstrap_indices

Comparison = tuple[str, str, float]


def _check(comparisons: Sequence[Comparison]) -> None:
    if not comparisons:
        raise ValueError("Bradley-Terry needs at least one comparison")
    for k, (a, b, outcome) in enumerate(comparisons):
        if a == b:
            raise ValueError(f"comparison {k}: a system cannot be compared with itself ({a!r})")
        if not 0.0 <= float(outcome) <= 1.0:
            raise ValueError(f"comparison {k}: outcome {outcome!r} is not in [0, 1] (1 = first wins, 0.5 = tie)")


def _matrix(comparisons: Sequence[Comparison], index: dict[str, int]) -> np.ndarray:
    W = np.zeros((len(index), len(index)))
    for a, b, outcome in comparisons:
        W[index[a], index[b]] += float(outcome)
        W[index[b], index[a]] += 1.0 - float(outcome)
    return W


def wins_matrix(comparisons: Sequence[Comparison]) -> tuple[list[str], np.ndarray]:
    """(systems sorted by name, W) with W[i, j] = wins of systems[i] over systems[j], ties as 0.5."""
    _check(comparisons)
    systems = sorted({name for a, b, _ in comparisons for name in (a, b)})
    return systems, _matrix(comparisons, {s: i for i, s in enumerate(systems)})


def fit_bt(W: np.ndarray, l2: float = 0.01) -> np.ndarray:
    """Centred log-strengths (n,) maximising the penalised BT likelihood of wins matrix W (n, n)."""
    n = W.shape[0]

    def loss_and_grad(s: np.ndarray) -> tuple[float, np.ndarray]:
        d = s[:, None] - s[None, :]  # (n, n) s_i - s_j
        loss = -np.sum(W * log_expit(d)) + 0.5 * l2 * s @ s
        p = expit(d)  # (n, n) P(i beats j)
        grad = -np.sum(W * (1.0 - p), axis=1) + np.sum(W.T * p, axis=1) + l2 * s
        return float(loss), grad

    result = minimize(
        loss_and_grad,
        np.zeros(n),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-10, "ftol": 1e-14, "maxiter": 1000},
    )
    return result.x - result.x.mean()


def bt_strengths(
    comparisons: Sequence[Comparison],
    *,
    n_bootstrap: int = 200,
    alpha: float = 0.05,
    seed: int = 0,
    l2: float = 0.01,
) -> dict[str, dict[str, float]]:
    """{system: {"strength", "ci_low", "ci_high"}}: centred log-strengths, percentile CIs.

    n_bootstrap=0 gives the point estimate as both ends of the interval."""
    systems, W = wins_matrix(comparisons)
    index = {s: i for i, s in enumerate(systems)}
    point = fit_bt(W, l2)
    low, high = point.copy(), point.copy()
    if n_bootstrap > 0:
        rows = list(comparisons)
        draws = np.array(
            [
                fit_bt(_matrix([rows[k] for k in idx], index), l2)
                for idx in bootstrap_indices(len(rows), n_bootstrap, seed)
            ]
        )
        low, high = np.quantile(draws, alpha / 2, axis=0), np.quantile(draws, 1 - alpha / 2, axis=0)
    return {
        s: {"strength": float(point[i]), "ci_low": float(low[i]), "ci_high": float(high[i])}
        for i, s in enumerate(systems)
    }


def win_probability(strengths: dict[str, dict[str, float]], a: str, b: str) -> float:
    """P(a beats b) under the fitted model."""
    return float(expit(strengths[a]["strength"] - strengths[b]["strength"]))
