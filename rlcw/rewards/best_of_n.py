"""Best-of-n selection with a reward model: which candidate wins, and the analytic KL of doing so.

One pool of n candidates per prompt serves every k <= n: best-of-k takes the best among the FIRST k
candidates, so the curves over k come from one set of samples (Gao et al. 2022). Ties go to the
lowest index. The KL between best-of-k and the sampling policy is bounded by
`log k - (k - 1) / k` nats (Stiennon et al. 2020, Gao et al. 2022).

    best_index([0.1, 0.7, 0.7, 0.2], k=4)    # -> 1
    kl_best_of(4)                            # -> log 4 - 3/4 = 0.636...
"""

from __future__ import annotations

import math

from rlcw.errors import RlcwError


def best_index(scores: list[float], k: int) -> int:
    """Index of the highest score among the first k (ties -> the lowest index)."""
    if not 1 <= k <= len(scores):
        raise ValueError(f"k={k} needs 1 <= k <= {len(scores)} candidates")
    best = 0
    for i in range(1, k):
        if scores[i] > scores[best]:
            best = i
    return best


def select_best_of(pools: list[list[float]], k: int) -> list[int]:
    """For each prompt's candidate scores, the index best-of-k selects."""
    return [best_index(scores, k) for scores in pools]


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
