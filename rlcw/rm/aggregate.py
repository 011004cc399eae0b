"""How a reward-model ensemble's member scores become one reward (Coste et al. 2023, "Reward Model
Ensembles Help Mitigate Overoptimization").

`members` is always k lists of n scores: members[j][i] is member j's score of item i.

- `mean`: (1/k) sum_j r_j
- `wco` (worst-case optimisation): min_j r_j
- `uwo` (uncertainty-weighted optimisation): mean - lambda * var, where var = (1/k) sum_j (r_j - mean)^2
  is the population variance across members (the intra-ensemble variance; k, not k - 1, in the denominator).

    aggregate([[1.0, 2.0], [3.0, 0.0]], "uwo", lam=0.5)   # -> [1.5, 0.5]  (means 2, 1; variances 1, 1)

`disagreement` is the population standard deviation across members, per item (what RL logs and the
monitors watch); `agreement` is how often every member prefers the same side of a pair.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

AGGREGATES = ("mean", "wco", "uwo")


def _check(members: Sequence[Sequence[float]]) -> int:
    if not members:
        raise ValueError("an ensemble needs at least one member's scores")
    n = len(members[0])
    if any(len(m) != n for m in members):
        raise ValueError(f"members scored different numbers of items: {[len(m) for m in members]}")
    return n


def member_mean(members: Sequence[Sequence[float]]) -> list[float]:
    n = _check(members)
    return [sum(m[i] for m in members) / len(members) for i in range(n)]


def member_variance(members: Sequence[Sequence[float]]) -> list[float]:
    """Population variance across members, per item."""
    means = member_mean(members)
    return [sum((m[i] - mu) ** 2 for m in members) / len(members) for i, mu in enumerate(means)]


def disagreement(members: Sequence[Sequence[float]]) -> list[float]:
    """Population standard deviation across members, per item."""
    return [math.sqrt(v) for v in member_variance(members)]


def aggregate(members: Sequence[Sequence[float]], how: str = "mean", lam: float = 0.0) -> list[float]:
    """One score per item from k members' scores (see module docstring); `lam` is UWO's lambda."""
    if how not in AGGREGATES:
        raise ValueError(f"unknown ensemble aggregate '{how}' (use one of {', '.join(AGGREGATES)})")
    if how == "wco":
        n = _check(members)
        return [min(m[i] for m in members) for i in range(n)]
    means = member_mean(members)
    if how == "mean":
        return means
    if lam < 0:
        raise ValueError(f"uwo lambda must be >= 0, got {lam}")
    return [mu - lam * v for mu, v in zip(means, member_variance(members), strict=True)]


def agreement(chosen: Sequence[Sequence[float]], rejected: Sequence[Sequence[float]]) -> float:
    """Share of pairs on which every member gives the same verdict (chosen > rejected, or not).

    chosen[j][i], rejected[j][i]: member j's scores of pair i's two sides. A tie counts as 'not chosen'."""
    n = _check(list(chosen) + list(rejected))
    if n == 0:
        return float("nan")
    same = sum(len({c[i] > r[i] for c, r in zip(chosen, rejected, strict=True)}) == 1 for i in range(n))
    return same / n


def member_summary(members: Sequence[Sequence[float]]) -> dict[str, float]:
    """What RL logs per step: each member's mean score (`member_<j>/mean`) and the mean disagreement."""
    out = {f"member_{j}/mean": sum(m) / len(m) for j, m in enumerate(members) if m}
    if members and members[0]:
        out["disagreement"] = sum(disagreement(members)) / len(members[0])
    return out
