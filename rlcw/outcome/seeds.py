"""Arms read over seeds at matched KL, raw and free of length and ending, with a seed-then-prompt bootstrap.

    cells = Cells.from_words([r["words"] for r in slope], bins=8)
    base = cell_sums(slope, "gold", prompts, cells)                        # the start stories' gold by cell
    runs = {"grpo": [arm_seed("grpo", 0, start, checkpoints0, "gold", prompts, cells), ...], ...}
    reading = SeedReading(runs, base, prompts, n_resamples=1000, seed=0)
    reading.at_d("grpo", 4.0, "residual")     # Estimate: change from the start where the run first reaches d = 4
    reading.peak("grpo", "raw")               # at each seed's peak, chosen on one half of the prompts, tested on the other
    reading.diff("grpo_par", "grpo", 4.0, "residual")

No model code. The inputs are the outcome study's measured records (`scores[gold]`, `words`, `finished`,
`prompt_id`, `sample_index`); every run shares the start's stories and the prompts (CRN).

**Residual (non-parametric).** What the gold pays for length and ending is read off start-policy stories that are
not the start point itself (the rest of the best-of-n pool): words cut into `bins` quantile bins x ended (EOS before
the cap), the gold's mean in each cell. A story's residual is its gold minus its cell's mean. Stories outside the
start stories' range (fewer or more words than any of them, or in a cell holding fewer than `min_count` of them)
have no residual: they are left out and their share is reported (`Estimate.outside`), never extrapolated. The cell
means are refitted inside every bootstrap replicate from the same resampled prompts, so their uncertainty is in the
interval. A story the junk screen marked (`junk: True`, `rlcw.outcome.screen`) is never outside: its residual is its
(floor) gold minus the start stories' overall mean (the extra last cell), so a collapse counts as a failure.

**Matched KL.** A run's checkpoints have d = sqrt(mean KL per story); the reading at a target d is the per-prompt
value interpolated linearly between the two checkpoints around the first crossing of d (the start is d = 0). A run
that never reaches d has no reading there; an arm is read at d only when every seed reaches it.

**Seed-then-prompt bootstrap.** An arm's estimate is the mean over its seeds of the mean over prompts of the
change from the start. A replicate resamples the arm's seeds with replacement and, once for all arms (the prompts
are shared), the prompts with replacement; the 95% interval is the percentile interval. Comparisons between arms
(`diff`) draw each arm's seeds independently and the prompts once. With 3 seeds the interval is wide by design:
seed spread is part of the uncertainty.

**Peak.** Each seed's peak checkpoint is chosen on the selection half of the prompts (`split_prompts`) and its
change from the start is read on the other half, so the selection never sees the prompts it is tested on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlcw.metrics.overopt import split_prompts

KINDS = ("raw", "residual")


@dataclass(frozen=True)
class Cells:
    """Quantile bins of words (edges, ascending) x ended: cell = 2 x bin + ended; -1 outside the edges. A reading
    has one more column after these `n` cells: the junk cell (`PromptTable`, `Baseline.means`)."""

    edges: tuple[float, ...]

    @classmethod
    def from_words(cls, words: Sequence[float], bins: int = 8) -> Cells:
        if not len(words):
            raise ValueError("no start stories to bin")
        edges = np.unique(np.quantile(np.asarray(words, dtype=float), np.linspace(0, 1, bins + 1)))
        return cls(tuple(float(e) for e in edges))

    @property
    def n(self) -> int:
        return 2 * max(len(self.edges) - 1, 1)

    def index(self, words: Sequence[float], ended: Sequence[float]) -> np.ndarray:
        w, e = np.asarray(words, dtype=float), np.asarray(ended, dtype=float)
        edges = np.asarray(self.edges)
        bins = np.clip(np.searchsorted(edges, w, side="right") - 1, 0, max(len(edges) - 2, 0))
        out = 2 * bins + (e > 0.5)
        return np.where((w < edges[0]) | (w > edges[-1]), -1, out)


@dataclass(frozen=True)
class PromptTable:
    """One point's stories summarised per prompt (fixed prompt order) for one gold: the raw mean, and the sums a
    residual needs (gold and counts of the stories inside the cells), so a replicate's cell means apply linearly."""

    raw: np.ndarray  # (P,) mean gold over the prompt's stories
    gold_in: np.ndarray  # (P,) sum of gold over the prompt's stories inside the cells (junk included)
    count_in: np.ndarray  # (P, C + 1) the prompt's stories per cell; the last column: its junk stories
    outside: float  # share of the point's stories outside the cells

    def residual(self, means: np.ndarray) -> np.ndarray:
        """(P,) mean residual per prompt under cell means `means` (C + 1,); NaN for a prompt with no story inside."""
        n = self.count_in.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, (self.gold_in - self.count_in @ np.nan_to_num(means)) / n, np.nan)


def _story_arrays(records: list[dict], gold: str, prompts: Sequence[str]) -> tuple[np.ndarray, ...]:
    index = {p: i for i, p in enumerate(prompts)}
    missing = sorted({r["prompt_id"] for r in records} - set(index))
    if missing:
        raise ValueError(f"{len(missing)} records of prompts outside the reading, e.g. {missing[0]}")
    rows = np.array([index[r["prompt_id"]] for r in records], dtype=int)
    g = np.array([float(r["scores"][gold]) for r in records])
    words = np.array([float(r["words"]) for r in records])
    ended = np.array([float(bool(r["finished"])) for r in records])
    junk = np.array([bool(r.get("junk", False)) for r in records], dtype=bool)
    return rows, g, words, ended, junk


def cell_sums(records: list[dict], gold: str, prompts: Sequence[str], cells: Cells) -> tuple[np.ndarray, np.ndarray]:
    """(gold sums, counts), each (P, C): the baseline stories per prompt and cell (outside and junk stories left
    out: the baseline says what the gold pays for length and ending in real stories)."""
    rows, g, words, ended, junk = _story_arrays(records, gold, prompts)
    cell = np.where(junk, -1, cells.index(words, ended))
    sums, counts = np.zeros((len(prompts), cells.n)), np.zeros((len(prompts), cells.n))
    keep = cell >= 0
    np.add.at(sums, (rows[keep], cell[keep]), g[keep])
    np.add.at(counts, (rows[keep], cell[keep]), 1.0)
    return sums, counts


def prompt_table(
    records: list[dict], gold: str, prompts: Sequence[str], cells: Cells, usable: np.ndarray | None = None
) -> PromptTable:
    """`records` of one point summarised per prompt; `usable` (C,) marks the cells a residual may use; junk stories
    go to the last column (always usable)."""
    rows, g, words, ended, junk = _story_arrays(records, gold, prompts)
    n = np.bincount(rows, minlength=len(prompts)).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        raw = np.bincount(rows, weights=g, minlength=len(prompts)) / n
    cell = cells.index(words, ended)
    if usable is not None:
        cell = np.where((cell >= 0) & usable[np.maximum(cell, 0)], cell, -1)
    cell = np.where(junk, cells.n, cell)
    keep = cell >= 0
    gold_in = np.bincount(rows[keep], weights=g[keep], minlength=len(prompts))
    count_in = np.zeros((len(prompts), cells.n + 1))
    np.add.at(count_in, (rows[keep], cell[keep]), 1.0)
    return PromptTable(raw, gold_in, count_in, float(1.0 - keep.mean()) if len(keep) else 0.0)


@dataclass(frozen=True)
class RunPoints:
    """One seed of one arm: d per point (the start first, d = 0) and each point's PromptTable for one gold."""

    arm: str
    seed: int
    d: tuple[float, ...]
    tables: tuple[PromptTable, ...]


@dataclass(frozen=True)
class Baseline:
    """The start stories' gold per prompt and cell (`cell_sums`), and the cells a residual may use."""

    sums: np.ndarray  # (P, C)
    counts: np.ndarray  # (P, C)
    usable: np.ndarray  # (C,) bool

    @classmethod
    def of(cls, sums: np.ndarray, counts: np.ndarray, min_count: int = 5) -> Baseline:
        return cls(sums, counts, counts.sum(axis=0) >= min_count)

    def means(self, weights: np.ndarray) -> np.ndarray:
        """(C + 1,) cell means under prompt weights (P,), a cell the replicate left empty keeping the full-sample mean;
        last, the junk cell's: the mean over every start story inside the cells."""
        full = self.sums.sum(axis=0) / np.maximum(self.counts.sum(axis=0), 1e-12)
        num, den = weights @ self.sums, weights @ self.counts
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(den > 0, num / den, full)
        overall = num.sum() / den.sum() if den.sum() > 0 else self.sums.sum() / max(self.counts.sum(), 1e-12)
        return np.append(np.where(self.usable, out, np.nan), overall)


def arm_seed(
    arm: str,
    seed: int,
    start: list[dict],
    checkpoints: Sequence[tuple[float, list[dict]]],
    gold: str,
    prompts: Sequence[str],
    cells: Cells,
    baseline: Baseline,
) -> RunPoints:
    """A RunPoints from the start's records and [(d, records)] per checkpoint in training order."""
    tables = [prompt_table(r, gold, prompts, cells, baseline.usable) for r in [start, *(c for _, c in checkpoints)]]
    return RunPoints(arm, seed, (0.0, *(float(d) for d, _ in checkpoints)), tuple(tables))


def crossing(d: Sequence[float], target: float) -> tuple[int, float] | None:
    """(i, t): the first segment i -> i + 1 whose d spans `target`, and the interpolation weight; None if never."""
    for i in range(len(d) - 1):
        lo, hi = d[i], d[i + 1]
        if min(lo, hi) <= target <= max(lo, hi):
            return i, 0.0 if hi == lo else (target - lo) / (hi - lo)
    return None


@dataclass(frozen=True)
class Estimate:
    delta: float
    ci_low: float
    ci_high: float
    seeds: int
    prompts: int
    outside: float  # share of the read stories outside the cells (residual; 0 for raw)
    d: float  # the d read at (the mean over seeds at the peak)

    def text(self) -> str:
        return f"{self.delta:+.2f} [{self.ci_low:+.2f}, {self.ci_high:+.2f}]"


class SeedReading:
    """Every arm's seeds against the start for one gold (see the module docstring)."""

    def __init__(
        self,
        runs: dict[str, list[RunPoints]],
        baseline: Baseline,
        prompts: Sequence[str],
        n_resamples: int = 1000,
        seed: int = 0,
    ):
        self.runs, self.baseline, self.prompts = runs, baseline, list(prompts)
        rng = np.random.default_rng(seed)
        n, self.n_resamples = len(self.prompts), n_resamples
        self._prompt_w = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(float)  # (R, P)
        self._seed_picks = {a: rng.integers(0, len(r), size=(n_resamples, len(r))) for a, r in sorted(runs.items())}
        select, _ = split_prompts(self.prompts, seed=seed)
        self._select = np.isin(self.prompts, select)

    @staticmethod
    def _values(table: PromptTable, kind: str, means: np.ndarray) -> np.ndarray:
        """(P,) per-prompt values of one point; `means`: the replicate's cell means (residual only)."""
        return table.raw if kind == "raw" else table.residual(means)

    @staticmethod
    def _at(run: RunPoints, where, get):
        """`get(table)` at `where`: a checkpoint index, or (i, t) interpolated between checkpoints i and i + 1."""
        if isinstance(where, tuple):
            i, t = where
            return (1 - t) * get(run.tables[i]) + t * get(run.tables[i + 1])
        return get(run.tables[where])

    def _run_change(self, run: RunPoints, where, kind: str, means: np.ndarray) -> np.ndarray:
        """(P,) change from the start at `where`."""
        return self._at(run, where, lambda tb: self._values(tb, kind, means)) - self._values(
            run.tables[0], kind, means
        )

    @staticmethod
    def _mean(change: np.ndarray, weights: np.ndarray) -> float:
        ok = ~np.isnan(change) & (weights > 0)
        return float(np.sum(weights[ok] * change[ok]) / np.sum(weights[ok])) if ok.any() else float("nan")

    def _arm_value(self, arm: str, wheres: list, kind: str, weights: np.ndarray, mask: np.ndarray, picks) -> float:
        """Mean over the picked seeds of the prompt-weighted mean change; the cell means use every resampled prompt,
        the mean only those in `mask`."""
        runs, means = self.runs[arm], self.baseline.means(weights)
        values = [self._mean(self._run_change(runs[s], wheres[s], kind, means), weights * mask) for s in picks]
        finite = [v for v in values if np.isfinite(v)]
        return float(np.mean(finite)) if finite else float("nan")

    def _estimate(self, arms: list[str], wheres: dict, kind: str, mask: np.ndarray, d: float) -> Estimate:
        def value(weights, picks) -> float:
            v = [self._arm_value(a, wheres[a], kind, weights, mask, picks[a]) for a in arms]
            return v[0] if len(v) == 1 else v[0] - v[1]

        full = np.ones(len(self.prompts))
        point = value(full, {a: range(len(self.runs[a])) for a in arms})
        reps = [value(self._prompt_w[r], {a: self._seed_picks[a][r] for a in arms}) for r in range(self.n_resamples)]
        finite = np.asarray(reps)[np.isfinite(reps)]
        low, high = np.percentile(finite, [2.5, 97.5]) if finite.size else (np.nan, np.nan)
        outside = float(np.mean([self._outside(a, wheres[a]) for a in arms])) if kind == "residual" else 0.0
        return Estimate(point, float(low), float(high), len(self.runs[arms[0]]), int(mask.sum()), outside, d)

    def _outside(self, arm: str, wheres: list) -> float:
        runs = zip(self.runs[arm], wheres, strict=True)
        return float(np.mean([self._at(run, where, lambda tb: tb.outside) for run, where in runs]))

    def _wheres_at(self, arm: str, target: float) -> list | None:
        found = [crossing(r.d, target) for r in self.runs[arm]]
        return None if any(w is None for w in found) else found

    def reached(self, arm: str, target: float) -> int:
        """How many of the arm's seeds reach d = target."""
        return sum(crossing(r.d, target) is not None for r in self.runs[arm])

    def at_d(self, arm: str, target: float, kind: str) -> Estimate | None:
        """The arm's change from the start where each seed first reaches d = target; None unless every seed does."""
        wheres = self._wheres_at(arm, target)
        if wheres is None:
            return None
        return self._estimate([arm], {arm: wheres}, kind, np.ones(len(self.prompts)), target)

    def diff(self, arm: str, base: str, target: float, kind: str) -> Estimate | None:
        """arm minus base at d = target (each seed's first crossing); None unless every seed of both reaches it."""
        a, b = self._wheres_at(arm, target), self._wheres_at(base, target)
        if a is None or b is None:
            return None
        return self._estimate([arm, base], {arm: a, base: b}, kind, np.ones(len(self.prompts)), target)

    def peaks(self, arm: str, kind: str) -> list[int]:
        """Each seed's peak checkpoint index (0 = the start), chosen on the selection half of the prompts."""
        cells, select, out = self.baseline.means(np.ones(len(self.prompts))), self._select.astype(float), []
        for run in self.runs[arm]:
            means = [self._mean(self._values(t, kind, cells), select) for t in run.tables]
            out.append(0 if np.all(np.isnan(means)) else int(np.nanargmax(means)))  # no residual anywhere: the start
        return out

    def peak(self, arm: str, kind: str) -> Estimate:
        """The change at each seed's peak, read on the test half (the selection half chose the peak)."""
        picks = self.peaks(arm, kind)
        d = float(np.mean([r.d[k] for r, k in zip(self.runs[arm], picks, strict=True)]))
        return self._estimate([arm], {arm: picks}, kind, (~self._select).astype(float), d)
