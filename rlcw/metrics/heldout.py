"""Paired held-out comparison of a start and a tuned policy, with a bootstrap over prompts.

    s = {"score": (P, K), "words": (P, K), "finished": (P, K), "in_range": (P, K), "rep": (P, K)}  # + "in_range_words"
    f = {...same keys, the tuned policy's samples for the same prompt and sample index...}
    stats = paired_stats(s, f)                  # point estimates
    table = paired_bootstrap(s, f, n_resamples=2000, seed=0)   # + `<key>_lo`, `<key>_hi`

Sample (p, k) of the start and the tuned policy answer prompt p with the same random numbers
(common random numbers), so they are a pair; prompts are the unit of resampling (the K samples
of a prompt are correlated), and every statistic is recomputed on each resample of prompts.

`in_range` is what the caller counts as meeting the prompt's range (`rlcw.measure.heldout`: a story that
ended, with its word count inside the range); the optional `in_range_words` (word count inside the
range, cut stories included) and `ended_short` (ended below the range) are reported as
`<key>_start` / `<key>_final`; with `ended_short`, its change `ended_short_delta` and
`short_rise_minus_in_range_rise` (the rise in the
share that ends below the range minus the rise in the share that ends inside it) gets its interval too, and
`short_of_ended_start` / `_final` / `_delta` is the share of the stories that ended which ended below the range
(NaN where none ended): the share ending too short is the share that ends times this, so a policy that learns to
end raises the first unless it lowers the second.

What the RM change is made of (`rm_delta` = mean of final - start over all pairs):
- `rm_delta_both_finished` / `rm_delta_both_cut`: the mean change within pairs where both sides
  end before the cap / both are cut at it (NaN when there is no such pair);
- `rm_gap_ended_minus_cut`: on the start samples, mean score of those that end minus those cut;
- `rm_delta_from_ending` = (finished_final - finished_start) x that gap: the part of the change
  that "ending more often" explains at the start's price of ending;
- `rm_delta_length_controlled`: the change after removing b x log(1 + words), with b the least
  squares slope of score on log(1 + words) over the start samples (the `rlcw eval-rm` length
  control form).
How many stories a bound on a change needs (`variance_components`, `design_se`, `bound_pass_chance`;
scripts/heldout_power.py reads them off finished runs): the chance that the upper end of the interval of a change
falls under a bound, given the true change and the design's standard error.
`rm_delta_prompt_sd` is the SD of the per-prompt mean change; `prompts_needed` is the number of
prompts at which a normal 95% interval would exclude 0 in 4 runs of 5 (80% power) if the true change
were the observed one; `in_range_prompt_sd` and `in_range_prompts_needed` are the same for the
in-range share.
"""

from __future__ import annotations

import math

import numpy as np

from rlcw.metrics.bootstrap import bootstrap_indices

KEYS = ("score", "words", "finished", "in_range", "rep")
OPTIONAL = ("in_range_words", "ended_short")  # reported (start and final share) when both policies have them


def _check(s: dict, f: dict) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    missing = [k for k in KEYS if k not in s or k not in f]
    if missing:
        raise ValueError(f"paired samples need the keys {KEYS}; missing {missing[0]!r}")
    keys = KEYS + tuple(k for k in OPTIONAL if k in s and k in f)
    s2 = {k: np.asarray(s[k], dtype=float) for k in keys}
    f2 = {k: np.asarray(f[k], dtype=float) for k in keys}
    shape = s2["score"].shape
    if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"samples must be (prompts, samples) arrays, got shape {shape}")
    bad = [k for k in keys if s2[k].shape != shape or f2[k].shape != shape]
    if bad:
        raise ValueError(f"'{bad[0]}' does not have the shape {shape} of 'score' for both policies")
    return s2, f2


def _masked_mean(x: np.ndarray, mask: np.ndarray) -> float:
    return float(x[mask].mean()) if mask.any() else math.nan


def length_slope(score: np.ndarray, words: np.ndarray) -> float:
    """Least-squares slope b of score ~ a + b log(1 + words); 0 when the lengths do not vary."""
    x, y = np.log1p(np.ravel(words)), np.ravel(score)
    if x.size < 2 or np.ptp(x) == 0:
        return 0.0
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())


def paired_stats(s: dict, f: dict) -> dict[str, float]:
    """Point estimates over every (prompt, sample) pair (see the module docstring)."""
    s, f = _check(s, f)
    d = f["score"] - s["score"]
    sf, ff = s["finished"] > 0.5, f["finished"] > 0.5
    gap = _masked_mean(s["score"], sf) - _masked_mean(s["score"], ~sf)
    slope = length_slope(s["score"], s["words"])
    out = {
        "rm_start": float(s["score"].mean()),
        "rm_final": float(f["score"].mean()),
        "rm_delta": float(d.mean()),
        "win_rate": float(((d > 0) + 0.5 * (d == 0)).mean()),
        "in_range_start": float(s["in_range"].mean()),
        "in_range_final": float(f["in_range"].mean()),
        "in_range_delta": float((f["in_range"] - s["in_range"]).mean()),
        "finished_start": float(sf.mean()),
        "finished_final": float(ff.mean()),
        "words_start": float(s["words"].mean()),
        "words_final": float(f["words"].mean()),
        "rep_start": float(s["rep"].mean()),
        "rep_final": float(f["rep"].mean()),
        "rm_delta_both_finished": _masked_mean(d, sf & ff),
        "rm_delta_both_cut": _masked_mean(d, ~sf & ~ff),
        "rm_gap_ended_minus_cut": gap,
        "rm_delta_from_ending": (float(ff.mean()) - float(sf.mean())) * gap,
        "rm_delta_length_controlled": float(d.mean() - slope * (np.log1p(f["words"]) - np.log1p(s["words"])).mean()),
    }
    for k in OPTIONAL:
        if k in s:
            out[f"{k}_start"], out[f"{k}_final"] = float(s[k].mean()), float(f[k].mean())
    if "ended_short" in s:  # > 0: more of the new endings fall below the range than inside it
        out["ended_short_delta"] = float((f["ended_short"] - s["ended_short"]).mean())
        out["short_rise_minus_in_range_rise"] = float(
            (f["ended_short"] - s["ended_short"]).mean() - (f["in_range"] - s["in_range"]).mean()
        )
        out["short_of_ended_start"] = _masked_mean(s["ended_short"], sf)
        out["short_of_ended_final"] = _masked_mean(f["ended_short"], ff)
        out["short_of_ended_delta"] = out["short_of_ended_final"] - out["short_of_ended_start"]
    return out


def _prompts_needed(change: np.ndarray, z_alpha: float = 1.96, z_power: float = 0.84) -> tuple[float, float]:
    """(SD of the per-prompt mean change, prompts at which a 95% interval excludes 0 with 80% power at the
    observed mean change: ((1.96 + 0.84) x SD / |mean|)^2, normal approximation; inf when the mean is 0)."""
    per_prompt = change.mean(1)
    sd = float(per_prompt.std(ddof=1)) if per_prompt.size > 1 else math.nan
    eff = abs(float(per_prompt.mean()))
    if eff == 0 or math.isnan(sd):
        return sd, math.inf
    return sd, float(math.ceil(((z_alpha + z_power) * sd / eff) ** 2))


def variance_components(change: np.ndarray) -> tuple[float, float]:
    """(between-prompt, within-prompt) variance of a (prompts, samples) paired change, by one-way ANOVA: within =
    the mean over prompts of each prompt's sample variance, between = the variance of the prompt means minus
    within / samples, floored at 0. Needs >= 2 prompts and >= 2 samples a prompt."""
    change = np.asarray(change, dtype=float)
    if change.ndim != 2 or min(change.shape) < 2:
        raise ValueError(f"variance components need >= 2 prompts x >= 2 samples, got shape {change.shape}")
    within = float(change.var(axis=1, ddof=1).mean())
    between = max(0.0, float(change.mean(axis=1).var(ddof=1)) - within / change.shape[1])
    return between, within


def design_se(between: float, within: float, prompts: int, samples: int) -> float:
    """Standard error of a mean paired change over `prompts` x `samples` (samples of a prompt correlated)."""
    return math.sqrt((between + within / samples) / prompts)


def bound_pass_chance(true_change: float, se: float, bound: float, z: float = 1.96) -> float:
    """Chance that the upper end of a normal 95% interval (mean + z x se) is <= `bound` when the true change is
    `true_change`: Phi((bound - z x se - true_change) / se)."""
    return 0.5 * (1 + math.erf((bound - z * se - true_change) / se / math.sqrt(2)))


def paired_bootstrap(s: dict, f: dict, n_resamples: int = 2000, alpha: float = 0.05, seed: int = 0) -> dict:
    """`paired_stats` plus `<key>_lo` / `<key>_hi`: two-sided percentile interval over resampled prompts."""
    s, f = _check(s, f)
    point = paired_stats(s, f)
    idx = bootstrap_indices(s["score"].shape[0], n_resamples, seed)
    draws = {k: [] for k in point}
    for row in idx:
        res = paired_stats({k: v[row] for k, v in s.items()}, {k: v[row] for k, v in f.items()})
        for k, v in res.items():
            draws[k].append(v)
    out = dict(point)
    for k, vals in draws.items():
        arr = np.asarray(vals, dtype=float)
        arr = arr[~np.isnan(arr)]
        lo, hi = np.quantile(arr, [alpha / 2, 1 - alpha / 2]) if arr.size else (math.nan, math.nan)
        out[f"{k}_lo"], out[f"{k}_hi"] = float(lo), float(hi)
    out["rm_delta_prompt_sd"], out["prompts_needed"] = _prompts_needed(f["score"] - s["score"])
    out["in_range_prompt_sd"], out["in_range_prompts_needed"] = _prompts_needed(f["in_range"] - s["in_range"])
    out["n_prompts"], out["n_samples"] = float(s["score"].shape[0]), float(s["score"].shape[1])
    return out
