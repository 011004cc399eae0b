"""Agreement between judge (or reward-model) scores and human scores (pure maths).

    from rlcw.metrics.agreement import group_agreement, fleiss_kappa
    rows = [("plot1", "gpt4", 3.0, 9.0), ("plot1", "claude", 1.0, 4.0), ...]  # group, item, human, judge
    group_agreement(rows)["mean_spearman"]

Definitions (as the reference-based TTCW paper reports them, averaged over its 12 plots):
- Per group (e.g. one plot, whose items are the systems' stories): Spearman's rho on average
  ranks and Kendall's tau-b, exactly as `scipy.stats.spearmanr` / `kendalltau(variant="b")`
  compute them. When scipy's value is undefined (a group whose human or judge scores are all
  equal, or that has a single item) the group counts as 0, not as missing.
- Pairwise accuracy per group: over the unordered item pairs of the group, the share whose order
  the judge gets right. Tie rules (`TIE_RULES`):
    "half"   (default) pairs the humans tied are left out; a judge tie on a pair the humans
             ordered counts as half right;
    "strict" pairs the humans tied are left out; a judge tie counts as wrong;
    "exact"  every pair counts; right only when both orders agree exactly (tie = tie).
  A group without a pair to count has no accuracy and is left out of the mean.
- Means are unweighted over groups.
- System-level correlation (Agents' Room, "by systems"): Spearman between human and judge
  scores aggregated per system (here: per `item` name, the mean over groups), N = systems.
- Item-level correlation (Agents' Room, "by items"): Spearman between human and judge scores of
  every rated item pooled, N = rows (for pairwise verdicts: +1 = A better, 0 = same, -1 = B better).
- Fleiss' kappa (statsmodels) for k raters who each labelled the same items.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from itertools import combinations

import numpy as np
from scipy import stats

TIE_RULES = ("half", "strict", "exact")


def _or_zero(value: float) -> float:
    return 0.0 if value is None or math.isnan(value) else float(value)


def spearman(human: Sequence[float], judge: Sequence[float], undefined: float = 0.0) -> float:
    """Spearman's rho on average ranks (scipy); undefined (constant or < 2 items) -> `undefined`.

    The one Spearman of rlcw: 0 by default, as agreement counts a constant group (Agents' Room);
    the RL monitors pass NaN so an undefined correlation never reads as "no correlation"."""
    if len(human) < 2 or len(set(human)) < 2 or len(set(judge)) < 2:
        return undefined
    rho = stats.spearmanr(human, judge).statistic
    return undefined if rho is None or math.isnan(rho) else float(rho)


def kendall_tau_b(human: Sequence[float], judge: Sequence[float]) -> float:
    """Kendall's tau-b (scipy); undefined (constant or < 2 items) -> 0."""
    if len(human) < 2 or len(set(human)) < 2 or len(set(judge)) < 2:
        return 0.0
    return _or_zero(stats.kendalltau(human, judge, variant="b").statistic)


def _pair_credit(h: float, j: float, tie_rule: str) -> float | None:
    """Credit for one pair given the signs of human and judge differences; None = not counted."""
    if tie_rule == "exact":
        return 1.0 if np.sign(h) == np.sign(j) else 0.0
    if h == 0:
        return None
    if j == 0:
        return 0.5 if tie_rule == "half" else 0.0
    return 1.0 if (h > 0) == (j > 0) else 0.0


def pairwise_accuracy(human: Sequence[float], judge: Sequence[float], tie_rule: str = "half") -> float | None:
    """Share of item pairs ordered as the humans order them (see the module docstring for ties)."""
    if tie_rule not in TIE_RULES:
        raise ValueError(f"unknown tie rule {tie_rule!r}; choose one of {', '.join(TIE_RULES)}")
    credits = [
        _pair_credit(human[a] - human[b], judge[a] - judge[b], tie_rule) for a, b in combinations(range(len(human)), 2)
    ]
    counted = [c for c in credits if c is not None]
    return sum(counted) / len(counted) if counted else None


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def correlation(human: Sequence[float], judge: Sequence[float]) -> dict[str, float | int | None]:
    """{"spearman", "p_value", "n"}: Spearman over the given points (undefined rho -> 0, p None)."""
    rho = spearman(human, judge)
    defined = len(human) > 2 and len(set(human)) > 1 and len(set(judge)) > 1
    p = _or_zero(stats.spearmanr(human, judge).pvalue) if defined else None
    return {"spearman": rho, "p_value": p, "n": len(human)}


def system_level(rows: Sequence[tuple[str, str, float, float]]) -> dict[str, float | int | None]:
    """Agents' Room "by systems": Spearman of per-item-name mean human vs mean judge scores."""
    human: dict[str, list[float]] = defaultdict(list)
    judge: dict[str, list[float]] = defaultdict(list)
    for _, item, h, j in rows:
        human[item].append(h)
        judge[item].append(j)
    names = sorted(human)
    return correlation([float(np.mean(human[n])) for n in names], [float(np.mean(judge[n])) for n in names])


def item_level(rows: Sequence[tuple[str, str, float, float]]) -> dict[str, float | int | None]:
    """Agents' Room "by items": Spearman over every (human, judge) pair of scores pooled."""
    return correlation([r[2] for r in rows], [r[3] for r in rows])


def group_agreement(rows: Sequence[tuple[str, str, float, float]], tie_rule: str = "half") -> dict:
    """Per-group Spearman / Kendall tau-b / pairwise accuracy, their unweighted means, and the
    system- and item-level correlations. `rows` are (group, item, human_score, judge_score)."""
    if not rows:
        raise ValueError("agreement needs at least one row")
    grouped: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for group, _, h, j in rows:
        grouped[group].append((float(h), float(j)))
    groups = {}
    for name in sorted(grouped):
        human, judge = [p[0] for p in grouped[name]], [p[1] for p in grouped[name]]
        groups[name] = {
            "n_items": len(human),
            "spearman": spearman(human, judge),
            "kendall": kendall_tau_b(human, judge),
            "pairwise_accuracy": pairwise_accuracy(human, judge, tie_rule),
        }
    return {
        "groups": groups,
        "n_groups": len(groups),
        "tie_rule": tie_rule,
        "mean_spearman": _mean([g["spearman"] for g in groups.values()]),
        "mean_kendall": _mean([g["kendall"] for g in groups.values()]),
        "mean_pairwise_accuracy": _mean([g["pairwise_accuracy"] for g in groups.values()]),
        "system_level": system_level(rows),
        "item_level": item_level(rows),
    }


def fleiss_kappa(ratings: Sequence[Sequence[Hashable]]) -> float:
    """Fleiss' kappa (statsmodels) of `ratings[item][rater]`; every item needs the same k >= 2
    ratings. All raters giving one label everywhere is perfect agreement and returns 1.0."""
    from statsmodels.stats.inter_rater import aggregate_raters
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

    if not ratings:
        raise ValueError("Fleiss' kappa needs at least one item")
    k = len(ratings[0])
    if k < 2 or any(len(r) != k for r in ratings):
        raise ValueError("Fleiss' kappa needs the same number (>= 2) of ratings for every item")
    labels = sorted({label for row in ratings for label in row}, key=str)
    if len(labels) == 1:
        return 1.0
    codes = np.array([[labels.index(label) for label in row] for row in ratings])
    table, _ = aggregate_raters(codes, n_cat=len(labels))
    return float(sm_fleiss(table, method="fleiss"))
