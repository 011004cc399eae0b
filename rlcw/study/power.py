"""Sample-size guidance: how many rated pairs detect a win rate different from 0.5.

    pairs_needed(0.6)                   # 194 pairs for alpha=0.05 (two-sided), power=0.8

Normal approximation of the binomial test of H0: p = 0.5 against p = p1:
    n = ((z_{1-alpha/2} * sqrt(p0 q0) + z_{power} * sqrt(p1 q1)) / (p1 - p0))^2, rounded up,
with p0 = 0.5 and q = 1 - p. Ties should be excluded (or split half/half, which needs more pairs);
the count is of independent judgements, so raters x pairs only helps when raters disagree.
"""

from __future__ import annotations

import math

from scipy.stats import norm


def pairs_needed(win_rate: float, alpha: float = 0.05, power: float = 0.8, p0: float = 0.5) -> int:
    """Pairs needed to tell `win_rate` from `p0` with a two-sided test at `alpha` with `power`."""
    if not 0 < win_rate < 1 or win_rate == p0:
        raise ValueError("win_rate must be in (0, 1) and differ from p0")
    z_a, z_b = norm.ppf(1 - alpha / 2), norm.ppf(power)
    n = ((z_a * math.sqrt(p0 * (1 - p0)) + z_b * math.sqrt(win_rate * (1 - win_rate))) / (win_rate - p0)) ** 2
    return math.ceil(n)


def guidance(
    win_rates: tuple[float, ...] = (0.55, 0.6, 0.65, 0.7),
    alpha: float = 0.05,
    power: float = 0.8,
    n_pairs: int | None = None,
    raters_per_item: int = 1,
) -> str:
    """A short text table of pairs needed per target win rate (printed by study-export)."""
    lines = [
        f"pairs needed to detect a win rate vs 0.5 (two-sided alpha={alpha}, power={power}, "
        "normal approximation of the binomial; ties excluded):"
    ]
    lines += [f"  win rate {p:.2f}: {pairs_needed(p, alpha, power)} pairs" for p in win_rates]
    if n_pairs is not None:
        lines.append(
            f"  this packet: {n_pairs} pairs x {raters_per_item} rater(s) = {n_pairs * raters_per_item} judgements "
            "(judgements of one pair are not independent)"
        )
    return "\n".join(lines)
