"""Pairwise evaluation maths: accuracy, the length-only baseline (longer wins), accuracy by length
direction, score-length correlation, and order consistency of pairwise scorers (the one owner:
eval-rm, train-rm and the LLM judges all call `consistent_share`), and eval-rm's blocks of them: accuracy with
its bootstrap CI and length splits (`accuracy_block`), ties (`tie_block`), a rubric's per-criterion accuracy.

    pairwise_accuracy([2.0, 0.1], [1.0, 0.3])                   # 0.5
    order_consistency([0.9, 0.8], [0.2, 0.7])                    # 0.5: the 2nd pair's verdict follows position
    averaged_preference([0.9], [0.2])                            # [0.85] = (0.9 + 1 - 0.2) / 2

Two-order rule (GenRM and judges as pairwise scorers): a pair's preference is the average of both
presentation orders, and only a pair valid in BOTH orders has one; a pair with one invalid order
is left out of accuracy and counted as invalid (one order alone keeps the position bias the
averaging cancels). `rlcw.rewards.genrm.GenRMScorer.prefer`, train-rm and eval-rm use this rule.

Pure maths: no model code.
"""

from __future__ import annotations

from rlcw.metrics.bootstrap import bootstrap_ci
from rlcw.metrics.text import count_words


def pair_outcomes(chosen_scores: list[float], rejected_scores: list[float]) -> list[float]:
    """Per pair: 1 when chosen scores higher, 0.5 on a tie, 0 otherwise."""
    if len(chosen_scores) != len(rejected_scores):
        raise ValueError("need two equally long score lists")
    return [1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen_scores, rejected_scores, strict=False)]


def pairwise_accuracy(chosen_scores: list[float], rejected_scores: list[float]) -> float:
    """Share of pairs where chosen scores higher; a tie counts as half."""
    if len(chosen_scores) != len(rejected_scores) or not chosen_scores:
        raise ValueError("need two equally long, non-empty score lists")
    outcomes = pair_outcomes(chosen_scores, rejected_scores)
    return sum(outcomes) / len(outcomes)


def length_baseline_accuracy(pairs: list[dict]) -> float:
    """Accuracy of 'the longer story wins' (ties = half) on preference records."""
    return pairwise_accuracy(
        [float(count_words(p["chosen"])) for p in pairs], [float(count_words(p["rejected"])) for p in pairs]
    )


def length_direction(chosen_words: list[int], rejected_words: list[int]) -> dict[str, list[int]]:
    """Pair indices where the chosen story is longer, shorter, or equally long (in words)."""
    out: dict[str, list[int]] = {"chosen_longer": [], "chosen_shorter": [], "equal_length": []}
    for i, (c, r) in enumerate(zip(chosen_words, rejected_words, strict=False)):
        out["chosen_longer" if c > r else "chosen_shorter" if c < r else "equal_length"].append(i)
    return out


def mean_of(values: list[float], idx: list[int] | None = None) -> float | None:
    """Mean of values (or of values at idx); None when there are none."""
    xs = values if idx is None else [values[i] for i in idx]
    return sum(xs) / len(xs) if xs else None


def length_correlation(scores: list[float], words: list[float]) -> dict[str, float | None]:
    """Pearson and Spearman correlation of scores with word counts (None when undefined)."""
    from scipy import stats

    if len(scores) != len(words):
        raise ValueError("need as many word counts as scores")
    if len(scores) < 3 or len(set(scores)) < 2 or len(set(words)) < 2:
        return {"pearson": None, "spearman": None}
    return {"pearson": float(stats.pearsonr(words, scores)[0]), "spearman": float(stats.spearmanr(words, scores)[0])}


def averaged_preference(forward: list[float | None], backward: list[float | None]) -> list[float | None]:
    """P(chosen better) = (p(chosen first) + 1 - p(rejected first)) / 2; None unless both orders are valid
    (the two-order rule of this module's docstring)."""
    return [None if f is None or b is None else (f + 1.0 - b) / 2.0 for f, b in zip(forward, backward, strict=True)]


def outcome(p: float) -> float:
    """One preference probability as an outcome: 1 when > 0.5, 0.5 at exactly 0.5, else 0."""
    return 1.0 if p > 0.5 else 0.5 if p == 0.5 else 0.0


def prob_outcomes(p_chosen: list[float]) -> list[float]:
    """Per pair: 1 when P(chosen better) > 0.5, 0.5 at exactly 0.5, else 0."""
    return [outcome(p) for p in p_chosen]


def consistent_share(first: list[float | None], second: list[float | None]) -> tuple[float | None, int]:
    """(share, pairs) of order consistency: over pairs with an outcome in both orders, the share whose
    outcome for the SAME story is the same in both (win/win, tie/tie or loss/loss); None when no pair has both.

    first / second: the outcome (1, 0.5, 0; None = invalid) of one fixed story of each pair in each order."""
    both = [(a, b) for a, b in zip(first, second, strict=True) if a is not None and b is not None]
    if not both:
        return None, 0
    return sum(a == b for a, b in both) / len(both), len(both)


def order_consistency(forward: list[float | None], backward: list[float | None]) -> float | None:
    """`consistent_share` of a probability scorer: forward = P(first better) with chosen first, backward = the
    same with rejected first, so chosen's outcomes are outcome(f) and outcome(1 - b)."""
    first = [None if f is None else outcome(f) for f in forward]
    second = [None if b is None else outcome(1.0 - b) for b in backward]
    return consistent_share(first, second)[0]


def first_position_rate(forward: list[float | None], backward: list[float | None]) -> float | None:
    """Share of valid verdicts (both orders pooled) that prefer the story shown first (0.5 = no position bias)."""
    votes = [p for p in list(forward) + list(backward) if p is not None]
    return sum(outcome(p) for p in votes) / len(votes) if votes else None


def two_order_metrics(forward: list[float | None], backward: list[float | None]) -> dict[str, float | None]:
    """What train-rm and eval-rm report for a pairwise scorer under the two-order rule (None = undefined).

    accuracy: mean outcome of the averaged preference over the pairs valid in both orders."""
    avg = [p for p in averaged_preference(forward, backward) if p is not None]
    return {
        "accuracy": mean_of(prob_outcomes(avg)),
        "order_consistency": order_consistency(forward, backward),
        "first_position_rate": first_position_rate(forward, backward),
        "invalid_chosen_first": float(sum(p is None for p in forward)),
        "invalid_rejected_first": float(sum(p is None for p in backward)),
        "pairs_scored": float(len(avg)),
    }


def side_agreement(dx: list[float], dy: list[float], skip_ties: bool) -> tuple[float, int]:
    """(share, pairs) of pairs on which two scorers prefer the same side, from their score differences
    (first - second); a difference of 0 counts as 'not first' unless `skip_ties` leaves the pair out. NaN, 0 for none."""
    kept = [(x, y) for x, y in zip(dx, dy, strict=True) if not (skip_ties and (x == 0 or y == 0))]
    if not kept:
        return float("nan"), 0
    return sum((x > 0) == (y > 0) for x, y in kept) / len(kept), len(kept)


def accuracy_block(outcomes: list[float], split: dict[str, list[int]], prefix: str, resamples: int, seed: int) -> dict:
    """Accuracy, its bootstrap CI, and accuracy on chosen-longer / chosen-shorter pairs."""
    out = {f"{prefix}accuracy": mean_of(outcomes)}
    out[f"{prefix}accuracy_ci_low"], out[f"{prefix}accuracy_ci_high"] = bootstrap_ci(
        outcomes, n_resamples=resamples, seed=seed
    )
    for name in ("chosen_longer", "chosen_shorter"):
        out[f"{prefix}accuracy_{name}"] = mean_of(outcomes, split[name])
    return out


def tie_block(c: list[float], r: list[float], prefix: str) -> dict:
    """Ties and the accuracy without them (a yes/no rubric ties often)."""
    n = len(c)
    tied = sum(a == b for a, b in zip(c, r, strict=True))
    won = sum(a > b for a, b in zip(c, r, strict=True))
    return {
        f"{prefix}ties": tied / n if n else None,
        f"{prefix}accuracy_strict": won / n if n else None,
        f"{prefix}accuracy_untied": won / (n - tied) if n > tied else None,
    }


def criterion_accuracy(values: list[list[float | None]], names: list[str], n: int) -> dict:
    """Per criterion: accuracy (ties half), ties and the pairs where both sides got a valid verdict;
    `values` holds the n chosen rows, then the n rejected rows."""
    out: dict = {}
    for j, name in enumerate(names):
        both = [(values[i][j], values[n + i][j]) for i in range(n) if None not in (values[i][j], values[n + i][j])]
        c, r = [a for a, _ in both], [b for _, b in both]
        out[f"rubric/{name}/accuracy"] = mean_of(pair_outcomes(c, r)) if both else None
        out[f"rubric/{name}/ties"] = tie_block(c, r, "")["ties"]
        out[f"rubric/{name}/pairs"] = float(len(both))
    return out
