"""What a reward model pays for ending, for ending short, and for words: "ending is not length".

A story cut at the completion cap mid-sentence is worse; a story that ends at half the asked length
is not better for it. On scored samples of one policy (start-model samples: `rlcw.measure.heldout` records
with `score`, `words`, `finished`, `min_words`, `max_words`, `prompt_index`):

- `ended_minus_cut`: mean score of the stories that ended before the cap minus those cut at it;
- `short_minus_inside`: among ended stories, mean score of those below the prompt's word range minus
  those inside it (> 0: the RM pays for stopping early);
- `per_10_words_ended`: among ended stories, 10 x the least-squares slope of score on words.

Each comes with a 95% percentile interval over prompts (`<key>_lo`, `<key>_hi`; the samples of a
prompt are resampled together) and its counts; a statistic with an empty group is NaN.
`words_pearson` is Pearson(score, words) over every sample (cut ones included); `words_pearson_ended` over
the ended stories only, where length is not confounded with being cut (cut stories are the long ones, so
an RM that pays for ending reads as paying for shortness over every sample).

    prices = ending_prices(records, n_resamples=1000, seed=0)
"""

from __future__ import annotations

import math

import numpy as np

from rlcw.metrics.bootstrap import bootstrap_indices

KEYS = ("ended_minus_cut", "short_minus_inside", "per_10_words_ended")


def _gap(score: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    return float(score[a].mean() - score[b].mean()) if a.any() and b.any() else math.nan


def _slope(y: np.ndarray, x: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0:
        return math.nan
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())


def _pearson(score: np.ndarray, words: np.ndarray) -> float:
    ok = score.size > 2 and np.ptp(score) > 0 and np.ptp(words) > 0
    return float(np.corrcoef(score, words)[0, 1]) if ok else math.nan


def ending_stats(score, words, finished, short, inside) -> dict[str, float]:
    """The three prices (module docstring) from (N,) arrays; short / inside count ended stories only."""
    score, words = np.asarray(score, float), np.asarray(words, float)
    ended, short, inside = (np.asarray(v, bool) for v in (finished, short, inside))
    return {
        "ended_minus_cut": _gap(score, ended, ~ended),
        "short_minus_inside": _gap(score, ended & short, ended & inside),
        "per_10_words_ended": 10 * _slope(score[ended], words[ended]),
    }


def ending_prices(records: list[dict], n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05) -> dict:
    """`ending_stats` of scored records, with intervals over prompts, counts and `words_pearson`."""
    if not records:
        raise ValueError("ending prices need at least one scored story")
    score = np.array([float(r["score"]) for r in records])
    words = np.array([float(r["words"]) for r in records])
    ended = np.array([bool(r["finished"]) for r in records])
    lo = np.array([r.get("min_words") if r.get("min_words") is not None else -np.inf for r in records], float)
    hi = np.array([r.get("max_words") if r.get("max_words") is not None else np.inf for r in records], float)
    short, inside = ended & (words < lo), ended & (words >= lo) & (words <= hi)
    point = ending_stats(score, words, ended, short, inside)
    groups: dict = {}
    for i, r in enumerate(records):
        groups.setdefault(r.get("prompt_index", r.get("prompt_id", i)), []).append(i)
    members = [np.asarray(m) for m in groups.values()]
    draws = {k: [] for k in KEYS}
    for draw in bootstrap_indices(len(members), n_resamples, seed):
        idx = np.concatenate([members[j] for j in draw])
        for k, v in ending_stats(score[idx], words[idx], ended[idx], short[idx], inside[idx]).items():
            draws[k].append(v)
    out: dict[str, float] = dict(point)
    for k, vals in draws.items():
        arr = np.asarray(vals)
        arr = arr[~np.isnan(arr)]
        q = np.quantile(arr, [alpha / 2, 1 - alpha / 2]) if arr.size else (math.nan, math.nan)
        out[f"{k}_lo"], out[f"{k}_hi"] = float(q[0]), float(q[1])
    out["words_pearson"] = _pearson(score, words)
    out["words_pearson_ended"] = _pearson(score[ended], words[ended])
    out.update(n_ended=float(ended.sum()), n_cut=float((~ended).sum()), n_short=float(short.sum()))
    out["n_inside"] = float(inside.sum())
    return out
