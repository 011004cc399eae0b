"""Best-of-n selection with a reward model: which candidate wins, and the analytic KL of doing so.

One pool of n candidates per prompt serves every k <= n: best-of-k takes the best among the FIRST k
candidates, so the curves over k come from one set of samples (Gao et al. 2022). Ties go to the
lowest index. The KL between best-of-k and the sampling policy is bounded by
`log k - (k - 1) / k` nats (Stiennon et al. 2020, Gao et al. 2022).

    best_index([0.1, 0.7, 0.7, 0.2], k=4)    # -> 1
    best_index([nan, 0.2, 0.1], k=3)         # -> 1: no score never wins
    kl_best_of(4)                            # -> log 4 - 3/4 = 0.636...
    best_of_weights([0.3, 0.9, 0.1], n=2)    # -> [1/3, 2/3, 0]: P(each candidate is best-of-2's pick)

`best_of_weights` is Gao et al.'s unbiased estimator of best-of-n from a pool of N >= n candidates:
the expectation over every n-subset of the pool, not one draw of the first n, so E[gold of best-of-n]
= sum_i weight_i * gold_i uses all N samples.
"""

from __future__ import annotations

import math

from rlcw.errors import RlcwError


def best_index(scores: list[float], k: int) -> int:
    """Index of the highest score among the first k (ties -> the lowest index). NaN (a rubric with no valid
    verdict: no score) loses to any number; k NaN scores -> 0."""
    if not 1 <= k <= len(scores):
        raise ValueError(f"k={k} needs 1 <= k <= {len(scores)} candidates")
    best = 0
    for i in range(1, k):
        if scores[i] > scores[best] or (math.isnan(scores[best]) and not math.isnan(scores[i])):
            best = i
    return best


def select_best_of(pools: list[list[float]], k: int) -> list[int]:
    """For each prompt's candidate scores, the index best-of-k selects."""
    return [best_index(scores, k) for scores in pools]


def best_of_weights(scores: list[float], n: int) -> list[float]:
    """P(candidate i is best-of-n's pick) when n of the N candidates are drawn uniformly without replacement.

    Rank the pool by score (1 = lowest; a tie ranks the lower index higher, `best_index`'s rule): the
    candidate of rank r wins exactly when it is drawn and the other n - 1 come from the r - 1 below it,
    so P = C(r - 1, n - 1) / C(N, n). The weights sum to 1; n = 1 gives 1/N each, n = N the argmax."""
    size = len(scores)
    if not 1 <= n <= size:
        raise ValueError(f"n={n} needs 1 <= n <= {size} candidates")
    order = sorted(range(size), key=lambda i: (scores[i], -i))  # ascending rank
    total = math.comb(size, n)
    weights = [0.0] * size
    for rank, i in enumerate(order, start=1):
        weights[i] = math.comb(rank - 1, n - 1) / total
    return weights


def kl_best_of(k: int) -> float:
    """Analytic KL(best-of-k || policy) bound in nats: log k - (k - 1) / k (0 for k = 1)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return math.log(k) - (k - 1) / k


def default_sizes(n: int) -> list[int]:
    """Powers of two up to n, and n itself: [1, 2, 4, 8] for 8, [1, 2, 4, 6] for 6."""
    sizes = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return sizes if sizes[-1] == n else sizes + [n]


def check_sizes(sizes: list[int], n: int) -> list[int]:
    """Sorted unique sizes, each in 1..n (an RlcwError names the bad one)."""
    for k in sizes:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise RlcwError(
                f"best-of size {k!r} is outside 1..{n}",
                where="best_of.sizes",
                hint=f"give integers between 1 and best_of.n={n}",
            )
    return sorted(set(sizes))
