"""What a reward model pays for ending, for ending short, and for words within ended stories (pure maths).

    prices = ending_prices(scores, words, finished, ended_short, groups=prompt_ids, n_resamples=1000)
    prices["ending_gap"], prices["ending_gap_lo"], prices["ending_gap_hi"]

On one policy's samples (the start model's, before any RL has learnt what the RM pays for):
- `ending_gap`: mean score of stories that ended (EOS before the cap) minus those cut at the cap;
- `short_gap`: among ended stories, mean score of those that end BELOW the prompt's word range minus
  those that end inside or above it (> 0: the RM pays for stopping early);
- `word_slope`: least-squares slope of score on words among ended stories, per word.
Each gets a cluster-bootstrap interval over `groups` (the prompts: a prompt's samples are correlated).
A statistic is NaN when its groups are empty (no cut story, no short ending, fewer than 2 lengths), and so is
its interval when a resample leaves a group empty.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from rlcw.metrics.bootstrap import grouped_bootstrap_ci

PRICES = ("ending_gap", "short_gap", "word_slope")


def _gap(score: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    return float(score[a].mean() - score[b].mean()) if a.any() and b.any() else math.nan


def _slope(score: np.ndarray, words: np.ndarray) -> float:
    if words.size < 2 or np.ptp(words) == 0:
        return math.nan
    wc = words - words.mean()
    return float((wc * (score - score.mean())).sum() / (wc * wc).sum())


def _prices(data: np.ndarray) -> dict[str, float]:
    """data: (n, 4) columns score, words, finished, ended_short."""
    score, words = data[:, 0], data[:, 1]
    ended, short = data[:, 2] > 0.5, data[:, 3] > 0.5
    return {
        "ending_gap": _gap(score, ended, ~ended),
        "short_gap": _gap(score, ended & short, ended & ~short),
        "word_slope": _slope(score[ended], words[ended]),
    }


def ending_prices(
    scores: Sequence[float],
    words: Sequence[float],
    finished: Sequence[bool],
    ended_short: Sequence[bool],
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, float]:
    """The three prices (module docstring) with `<price>_lo` / `<price>_hi` (95%); `groups` default: one per story."""
    data = np.column_stack([np.asarray(x, dtype=float) for x in (scores, words, finished, ended_short)])
    if data.shape[0] == 0:
        raise ValueError("no stories to price")
    groups = list(range(len(data))) if groups is None else list(groups)
    out = _prices(data)
    for name in PRICES:
        lo, hi = grouped_bootstrap_ci(data, groups, lambda d, n=name: _prices(d)[n], n_resamples, seed=seed)
        out[f"{name}_lo"], out[f"{name}_hi"] = lo, hi
    ended = data[:, 2] > 0.5
    out.update(
        stories=float(len(data)),
        ended=float(ended.sum()),
        ended_short=float((ended & (data[:, 3] > 0.5)).sum()),
    )
    return out
