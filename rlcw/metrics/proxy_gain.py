"""How much of a proxy-reward gain would surface features (length, repetition) predict? (pure maths)

    ex = explain_proxy_gain({"words": words, "rep": rep}, proxy, {"words": +12.0, "rep": 0.01}, actual=0.8)
    ex.slopes["words"], ex.predicted["words"], ex.share      # proxy per word, proxy gain from words, share

The proxy is regressed on the features over the START policy's stories (least squares with an
intercept: proxy ~ c + sum_j beta_j x_j), so each slope says what the proxy pays for that feature when
nothing else was optimised. A run's predicted gain from feature j is beta_j times the run's change in
the feature's mean; share = total predicted / actual proxy gain. A share near 1 (or above) means the
surface change alone would buy the gain: the run may be gaming length or repetition rather than
writing better. The rule the outcome report applies is `explains` (share >= EXPLAINED_SHARE).
Tests with hand-worked numbers: tests/unit/test_proxy_gain.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

EXPLAINED_SHARE = 0.5  # surface features predict at least half of the proxy gain


@dataclass(frozen=True)
class SurfaceExplanation:
    slopes: dict[str, float]  # proxy per unit of each feature, on the start's stories
    predicted: dict[str, float]  # slope x the run's change in the feature's mean
    total_predicted: float
    actual: float
    share: float | None  # total_predicted / actual; None when the proxy did not rise (actual <= 0)

    @property
    def explains(self) -> bool:
        # 1e-9: a share of exactly the threshold must not flip with the least-squares solver's last bit
        return self.share is not None and self.share >= EXPLAINED_SHARE - 1e-9


def surface_slopes(features: Mapping[str, Sequence[float]], proxy: Sequence[float]) -> dict[str, float]:
    """Least-squares slopes of proxy ~ c + sum_j beta_j x_j (numpy lstsq; a constant feature gets slope 0)."""
    names = list(features)
    y = np.asarray(proxy, dtype=float)
    cols = [np.asarray(features[k], dtype=float) for k in names]
    if any(c.shape != y.shape for c in cols) or y.size < len(names) + 1:
        raise ValueError(f"need one value per story for every feature and more than {len(names)} stories")
    design = np.column_stack([np.ones_like(y), *cols])  # (stories, 1 + features)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)  # minimum-norm: a constant column shares the intercept
    out = {}
    for k, c, b in zip(names, cols, coef[1:], strict=True):
        out[k] = 0.0 if np.ptp(c) == 0 else float(b)
    return out


def explain_proxy_gain(
    features: Mapping[str, Sequence[float]],
    proxy: Sequence[float],
    changes: Mapping[str, float],
    actual: float,
) -> SurfaceExplanation:
    """Slopes on the start's stories, the gain they predict from the run's feature `changes`, and its share."""
    if set(changes) != set(features):
        raise ValueError(f"changes name {sorted(changes)} but the features are {sorted(features)}")
    slopes = surface_slopes(features, proxy)
    predicted = {k: slopes[k] * float(changes[k]) for k in slopes}
    total = float(sum(predicted.values()))
    share = total / actual if actual > 0 else None
    return SurfaceExplanation(slopes, predicted, total, float(actual), share)
