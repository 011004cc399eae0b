"""Reward over-optimisation statistics in Gao et al.'s (2022) design (pure maths, no model code).

    diff = paired_prompt_bootstrap(tuned_gold, start_gold)          # (prompt_id, sample) -> value
    test = split_half_peak(gold_by_checkpoint, order=[0, 50, 100])  # peak chosen on one half, fall tested on the other
    fit = fit_gao_rl(d, gold_change)                                # R(d) = d (a - b log d), d = sqrt(KL)

Design note: how the outcome study (`rlcw outcome`) uses these pieces, stage by stage.

1. Gold. A fixed scorer RL never trains against (an RM folder or hub id). Score k completions per RL
   prompt sampled from the start policy with `top_k=0, top_p=1, temperature=1`.
2. On-policy pairs labelled by the gold. `rlcw.metrics.gold_pairs.completion_pairs(prompt_ids, k,
   per_prompt, seed)` names the pairs; `label_pairs(pairs, gold, temperature, seed)` orders each into
   (prompt_id, chosen, rejected) by a Bradley-Terry draw, P(a > b) = sigmoid((r_a - r_b) / temperature)
   (`gold_labels`), and returns the expected label noise (mean min(p, 1 - p)) that the report states.
3. Proxies of two sizes. Train the proxy RM on N_small and N_large labelled pairs (prompts of the
   held-out measurement set never enter); report each proxy's agreement with the gold on held-out
   on-policy pairs: `rlcw.metrics.pairwise.pairwise_accuracy` with the gold's preferred side as
   chosen, its CI from `grouped_bootstrap_ci` over the pair outcomes grouped by prompt.
4. Runs on one axis. Every checkpoint of every run (and the start) is sampled on the held-out prompts,
   several samples per prompt, with `top_k=0` (transformers' default top_k=50 otherwise truncates the
   sampler while the log-probs use the full distribution). KL per story comes from
   `rlcw.measure.kl.kl_to_reference` on the SAMPLED ids, EOS included (estimator named in the report,
   k3 by default); d = sqrt(mean KL per story). Best-of-n sits at d = sqrt(kl_best_of(n))
   (`rlcw.rewards.best_of_n.kl_best_of`, the analytic log n - (n-1)/n), one candidate pool, n up to 32+.
5. Statistics. Each story value is keyed (prompt_id, sample_index). Every CI is
   `paired_prompt_bootstrap` (whole prompts resampled, `rlcw.metrics.bootstrap.grouped_bootstrap_ci`).
   Whether gold peaked and fell is `split_half_peak`: the peak checkpoint is chosen on one half of the
   held-out prompts (`split_prompts`, seeded hash of the prompt id) and the fall from it to the final
   checkpoint is tested on the other half, so selection and test never share data.
6. Fits. Per run, gold change from the start against d: `fit_gao_rl` (R(d) = d (a - b log d));
   best-of-n: `fit_gao_bon` (R(d) = d (a - b d)). Each returns a, b, the peak d* and R(d*), whether
   d* lies inside the measured range, or a reason why there is no fit or no peak. `fit_gao_ci` gives
   prompt-level percentile intervals of a, b and d* (d held at its measured values).

Tests with hand-worked numbers: tests/unit/test_overopt.py.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

from rlcw.metrics.bootstrap import bootstrap_indices, grouped_bootstrap_ci

StoryKey = tuple[str, int]  # (prompt_id, sample_index)


@dataclass(frozen=True)
class PairedDiff:
    """Mean of (a - b) over paired stories with a prompt-level percentile CI."""

    delta: float
    ci_low: float
    ci_high: float
    n_prompts: int
    n_stories: int


def paired_prompt_bootstrap(
    a: Mapping[StoryKey, float],
    b: Mapping[StoryKey, float],
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PairedDiff:
    """Mean of a[key] - b[key] over stories, CI from resampling PROMPTS (all samples of a prompt together).

    Both systems must hold the same (prompt_id, sample_index) keys: a paired comparison that silently
    dropped unmatched stories could compare different prompts."""
    if set(a) != set(b):
        only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
        raise ValueError(f"paired stories differ: {only_a} keys only in a, {only_b} only in b")
    if not a:
        raise ValueError("no stories to compare")
    keys = sorted(a)
    diffs = [a[k] - b[k] for k in keys]
    prompts = [k[0] for k in keys]
    low, high = grouped_bootstrap_ci(diffs, prompts, n_resamples=n_resamples, alpha=alpha, seed=seed)
    return PairedDiff(float(np.mean(diffs)), low, high, len(set(prompts)), len(keys))


def split_prompts(prompt_ids: Sequence[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """(select, test): a fixed split of the unique prompt ids by a seeded hash; select gets n // 2.

    Prompts are ordered by sha256(f"{seed}:{prompt_id}") and the first n // 2 form the selection half,
    so the split is the same on every machine, for every run and whatever the input order."""
    unique = sorted(set(prompt_ids), key=lambda p: hashlib.sha256(f"{seed}:{p}".encode()).hexdigest())
    if len(unique) < 2:
        raise ValueError("a split-half test needs at least 2 prompts")
    half = len(unique) // 2
    return sorted(unique[:half]), sorted(unique[half:])


@dataclass(frozen=True)
class PeakTest:
    """The checkpoint where gold peaks on the selection half, and the fall to the final one on the test half.

    verdict: "fell" (CI of final - peak below 0), "rose" (above 0), "no_fall" (CI spans 0) or
    "peak_is_final" (the selection half peaks at the last checkpoint: nothing to test, fall is None)."""

    peak: Hashable
    final: Hashable
    select_means: dict
    fall: PairedDiff | None
    verdict: str


def _restrict(values: Mapping[StoryKey, float], prompts: set[str]) -> dict[StoryKey, float]:
    return {k: v for k, v in values.items() if k[0] in prompts}


def peak_fall(
    gold: Mapping[Hashable, Mapping[StoryKey, float]],
    order: Sequence[Hashable],
    select: Sequence[str],
    test: Sequence[str],
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PeakTest:
    """Peak = the checkpoint in `order` with the highest mean gold over `select` prompts (ties: the
    earliest); fall = paired final - peak on `test` prompts with a prompt-level CI.

    `gold[checkpoint][(prompt_id, sample)]` holds per-story gold; `order[-1]` is the final checkpoint.
    Passing the same prompts as select and test reproduces the biased same-data test (for comparison)."""
    sel, tst = set(select), set(test)
    means = {}
    for c in order:
        chosen = list(_restrict(gold[c], sel).values())
        if not chosen:
            raise ValueError(f"checkpoint {c!r} has no story for the selection prompts")
        means[c] = float(np.mean(chosen))
    peak = max(order, key=lambda c: (means[c], -order.index(c)))
    final = order[-1]
    if peak == final:
        return PeakTest(peak, final, means, None, "peak_is_final")
    fall = paired_prompt_bootstrap(
        _restrict(gold[final], tst), _restrict(gold[peak], tst), n_resamples=n_resamples, alpha=alpha, seed=seed
    )
    verdict = "fell" if fall.ci_high < 0 else "rose" if fall.ci_low > 0 else "no_fall"
    return PeakTest(peak, final, means, fall, verdict)


def split_half_peak(
    gold: Mapping[Hashable, Mapping[StoryKey, float]],
    order: Sequence[Hashable],
    seed: int = 0,
    n_resamples: int = 1000,
    alpha: float = 0.05,
) -> PeakTest:
    """`peak_fall` on the `split_prompts(seed)` halves of the prompts the final checkpoint was measured on."""
    select, test = split_prompts([k[0] for k in gold[order[-1]]], seed=seed)
    return peak_fall(gold, order, select, test, n_resamples=n_resamples, alpha=alpha, seed=seed)


@dataclass(frozen=True)
class GaoFit:
    """A fitted Gao et al. curve. a, b are None when there is no fit; d_star None when there is no peak.

    reason says why (too few points, degenerate design, b <= 0 so the curve never turns down)."""

    form: str
    a: float | None
    b: float | None
    d_star: float | None
    r_star: float | None
    peak_in_range: bool
    n_points: int
    rmse: float | None
    reason: str | None


def _bon(d, a, b):
    return d * (a - b * d)


def _rl(d, a, b):
    # d log d -> 0 as d -> 0 (the start sits at d = 0)
    return a * d - b * np.where(d > 0, d * np.log(np.where(d > 0, d, 1.0)), 0.0)


_FORMS = {"bon": _bon, "rl": _rl}


def _peak(form: str, a: float, b: float) -> float:
    return a / (2 * b) if form == "bon" else math.exp(a / b - 1)


def fit_gao(form: str, d: Sequence[float], r: Sequence[float], min_points: int = 3) -> GaoFit:
    """Least-squares fit (scipy curve_fit) of gold change r against d = sqrt(KL) for form "bon"
    (R = d (a - b d), peak d* = a / 2b) or "rl" (R = d (a - b log d), peak d* = exp(a/b - 1)).

    r is the gold CHANGE from the start (R(0) = 0 in both forms). Points at d = 0 carry no
    information about a, b, so at least `min_points` points with distinct d > 0 are needed."""
    func = _FORMS[form]
    x, y = np.asarray(d, dtype=float), np.asarray(r, dtype=float)
    if x.shape != y.shape or not (np.isfinite(x).all() and np.isfinite(y).all()) or (x < 0).any():
        raise ValueError("d and r must be finite, of one length, with d >= 0")
    n = int(np.unique(x[x > 0]).size)
    if n < min_points:
        return GaoFit(form, None, None, None, None, False, n, None, f"{n} distinct d > 0, need {min_points}")
    design = np.stack([func(x, 1.0, 0.0), func(x, 0.0, -1.0)], axis=1)  # (n, 2): the a and b columns
    if np.linalg.matrix_rank(design) < 2:
        return GaoFit(form, None, None, None, None, False, n, None, "degenerate design: a and b not identifiable")
    (a, b), _ = curve_fit(func, x, y, p0=[0.0, 0.0])
    a, b = float(a), float(b)
    rmse = float(np.sqrt(np.mean((func(x, a, b) - y) ** 2)))
    if b <= 0:
        return GaoFit(form, a, b, None, None, False, n, rmse, f"b = {b:.3g} <= 0: the fitted curve never turns down")
    d_star = _peak(form, a, b)
    if d_star <= 0:
        return GaoFit(
            form, a, b, None, None, False, n, rmse, f"a = {a:.3g} <= 0: the fitted curve falls from the start"
        )
    in_range = bool(x.min() <= d_star <= x.max())
    return GaoFit(form, a, b, d_star, float(func(np.array(d_star), a, b)), in_range, n, rmse, None)


def fit_gao_bon(d: Sequence[float], r: Sequence[float], min_points: int = 3) -> GaoFit:
    """Best-of-n: R(d) = d (a - b d); see `fit_gao`."""
    return fit_gao("bon", d, r, min_points)


def fit_gao_rl(d: Sequence[float], r: Sequence[float], min_points: int = 3) -> GaoFit:
    """RL: R(d) = d (a - b log d); see `fit_gao`."""
    return fit_gao("rl", d, r, min_points)


@dataclass(frozen=True)
class FitInterval:
    """Prompt-level percentile intervals of a fit's a, b and d* (d* over the resamples that have a peak).

    fitted_share: resamples with a fit; peak_share: resamples whose fit turns down at some d > 0."""

    a: tuple[float, float]
    b: tuple[float, float]
    d_star: tuple[float, float] | None
    fitted_share: float
    peak_share: float


def fit_gao_ci(
    form: str,
    d: Sequence[float],
    gold: Sequence[Mapping[StoryKey, float]],
    start: Mapping[StoryKey, float],
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    min_points: int = 3,
) -> FitInterval:
    """Resample prompts, recompute each point's mean gold change from the start (paired by story key),
    refit `form`; percentile intervals over the resamples. gold[i] holds the per-story gold at d[i]."""
    keys = sorted(start)
    if len(gold) != len(d) or any(set(g) != set(start) for g in gold):
        raise ValueError("every point needs gold for exactly the start's (prompt_id, sample) keys, one per d")
    change = np.array([[g[k] - start[k] for g in gold] for k in keys])  # (stories, points)
    prompts = sorted({k[0] for k in keys})
    row = {p: i for i, p in enumerate(prompts)}
    sums, counts = np.zeros((len(prompts), len(d))), np.zeros(len(prompts))
    for k, c in zip(keys, change, strict=True):
        sums[row[k[0]]] += c
        counts[row[k[0]]] += 1
    fits = [
        fit_gao(form, d, sums[draw].sum(0) / counts[draw].sum(), min_points)
        for draw in bootstrap_indices(len(prompts), n_resamples, seed)
    ]
    fitted = [f for f in fits if f.a is not None]
    peaks = [f.d_star for f in fitted if f.d_star is not None]
    q = (alpha / 2, 1 - alpha / 2)

    def interval(xs: list[float]) -> tuple[float, float]:
        return (float(np.quantile(xs, q[0])), float(np.quantile(xs, q[1]))) if xs else (math.nan, math.nan)

    return FitInterval(
        interval([f.a for f in fitted]),
        interval([f.b for f in fitted]),
        interval(peaks) if peaks else None,
        len(fitted) / n_resamples,
        len(peaks) / n_resamples,
    )
