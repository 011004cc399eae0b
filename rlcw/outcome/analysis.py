"""Outcome-study curves on Gao et al.'s axis, their statistics and the verdicts (no model code).

    curve = rl_curve("grpo", "proxy_large", start_records, [(8, recs8), (16, recs16)])
    curve = bon_curve("best_of_n/proxy_large", "proxy_large", pool_records, sizes=[1, 2, 4, 8, 16, 32])
    summary = summarise(curve)           # split-half peak test, rise at the peak, Gao fit + CI, surface share
    lines = run_verdict(summary)         # the conclusion's sentences

A curve is a list of points, the first at the start (d = 0). Every story value is keyed
(prompt_id, sample_index) and every CI is `rlcw.metrics.overopt.paired_prompt_bootstrap` (whole prompts
resampled). An RL point is a checkpoint's own samples (the same prompts and sample indices as the start,
CRN), d = sqrt(mean k3 KL per story on the sampled ids). A best-of-n point is Gao et al.'s unbiased
estimate from ONE pool of N samples per prompt (`rlcw.rewards.best_of_n.best_of_weights`): one value per
prompt (sample index 0), d = sqrt(log n - (n - 1) / n); its start is n = 1 (the pool mean). Diversity of
a point is distinct-3 across one story per prompt, averaged over sample indices (best-of-n: the story
best-of-n picks among the first n candidates), so every point counts trigrams over the same number of
stories.

Verdict rules (printed with the report): the peak is chosen on the selection half of the prompts and
both the rise (peak - start) and the fall (final - peak) are tested on the other half
(`split_half_peak`); the proxy rose when the final point's proxy change CI is above 0; length and
repetition explain the proxy gain when their start-policy slopes predict at least half of it
(`rlcw.metrics.proxy_gain`).

Residual gold (length- and ending-free): the gold is regressed on words and on whether the story ended
(EOS before the cap) over start-policy stories that are NOT the curve's start point (`slope_records`: the
rest of the best-of-n pool; best-of-n curves use the whole pool, whose stories every point mixes anyway),
gold ~ c + b_words words + b_ended ended. A story's residual is gold - b_words words - b_ended ended; a
point's explained change is b_words Δwords + b_ended Δended, its residual change (with a prompt-level CI)
is the rest: Δgold = explained + Δresidual exactly. A residual gain is a gold gain that neither writing
longer/shorter nor ending more often buys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlcw.metrics.overopt import (
    FitInterval,
    GaoFit,
    PairedDiff,
    PeakTest,
    fit_gao,
    fit_gao_ci,
    paired_prompt_bootstrap,
    split_half_peak,
    split_prompts,
)
from rlcw.metrics.proxy_gain import SurfaceExplanation, explain_proxy_gain, surface_slopes
from rlcw.metrics.text import distinct_n
from rlcw.rewards.best_of_n import best_index, best_of_weights, kl_best_of

KL_TARGET = 2.0  # nats per story the study tries to reach
StoryKey = tuple[str, int]


@dataclass
class Point:
    x: int  # step (RL) or n (best-of-n); 0 / 1 = the start
    kl: float  # mean KL per story (k3 for RL; analytic for best-of-n)
    kl_k1: float | None  # RL only
    values: dict[str, dict[StoryKey, float]]  # "gold", "proxy", "words", "rep", "ended" per story key
    distinct: float

    @property
    def d(self) -> float:
        return math.sqrt(max(self.kl, 0.0))

    def mean(self, key: str) -> float:
        return float(np.mean(list(self.values[key].values())))


@dataclass
class Curve:
    run: str
    proxy: str  # the scorer the run optimised
    form: str  # "rl" | "bon"
    points: list[Point]
    start_features: dict[str, list[float]] = field(default_factory=dict)  # words, rep of the start's stories
    start_proxy: list[float] = field(default_factory=list)
    start_gold: list[float] = field(default_factory=list)  # the same stories' gold scores
    gold_slopes: dict[str, float] = field(default_factory=dict)  # gold per word / for ending (`slope_records`)


def _values(records: list[dict], proxy: str, key_of=lambda r: (r["prompt_id"], r["sample_index"])) -> dict:
    out: dict[str, dict] = {key: {} for key in _keys(records)}
    for r in records:
        k = key_of(r)
        out["gold"][k], out["proxy"][k] = r["scores"]["gold"], r["scores"][proxy]
        out["words"][k], out["rep"][k], out["ended"][k] = float(r["words"]), float(r["rep"]), _ended(r)
        if "slop" in out:
            out["slop"][k] = float(r["slop"])
    return out


def _keys(records: list[dict]) -> tuple[str, ...]:
    """VALUES, plus `slop` when every record carries a slop score (the study adds one; `rlcw.metrics.slop`)."""
    return (*VALUES, "slop") if records and all("slop" in r for r in records) else VALUES


VALUES = ("gold", "proxy", "words", "rep", "ended")
NUISANCE = ("words", "ended")  # what the residual gold is free of


def _ended(record: dict) -> float:
    """1.0 when the story ended (EOS before the cap), else 0.0 (records without the flag: `finished` missing)."""
    if "finished" not in record:
        raise ValueError(f"record {record.get('prompt_id')}/{record.get('sample_index')} has no 'finished' flag")
    return float(bool(record["finished"]))


def gold_slopes(records: list[dict]) -> dict[str, float]:
    """Least-squares gold ~ c + b_words words + b_ended ended over `records` (start-policy stories)."""
    feats = {"words": [float(r["words"]) for r in records], "ended": [_ended(r) for r in records]}
    return surface_slopes(feats, [r["scores"]["gold"] for r in records])


def residuals(values: dict[str, dict[StoryKey, float]], slopes: dict[str, float]) -> dict[StoryKey, float]:
    """gold - sum_f slope_f x feature_f per story key (the intercept cancels in every change)."""
    return {k: g - sum(slopes[f] * values[f][k] for f in NUISANCE) for k, g in values["gold"].items()}


def diversity(records: list[dict]) -> float:
    """distinct-3 across one story per prompt, averaged over sample indices."""
    by_k: dict[int, list[str]] = {}
    for r in records:
        by_k.setdefault(r["sample_index"], []).append(r["story"])
    return float(np.mean([distinct_n(texts, 3) for texts in by_k.values()]))


def _mean_kl(records: list[dict], estimator: str) -> float:
    return float(np.mean([r[f"kl_{estimator}"] for r in records]))


def rl_curve(
    run: str,
    proxy: str,
    start: list[dict],
    checkpoints: Sequence[tuple[int, list[dict]]],
    slope_records: list[dict] | None = None,
) -> Curve:
    """Start (step 0, KL 0) then each checkpoint's measured samples (records with kl_k3 / kl_k1); the gold's
    length/ending slopes from `slope_records` (other start-policy stories; default: the start's own)."""
    points = [Point(0, 0.0, 0.0, _values(start, proxy), diversity(start))]
    for step, recs in checkpoints:
        points.append(Point(step, _mean_kl(recs, "k3"), _mean_kl(recs, "k1"), _values(recs, proxy), diversity(recs)))
    slopes = gold_slopes(slope_records or start)
    return Curve(run, proxy, "rl", points, *_start_regression(start, proxy), gold_slopes=slopes)


def _start_regression(records: list[dict], proxy: str) -> tuple[dict[str, list[float]], list[float], list[float]]:
    feats = {"words": [float(r["words"]) for r in records], "rep": [float(r["rep"]) for r in records]}
    return feats, [r["scores"][proxy] for r in records], [r["scores"]["gold"] for r in records]


def bon_curve(run: str, proxy: str, pool: list[dict], sizes: Sequence[int]) -> Curve:
    """Best-of-n for each n in `sizes` from one pool (every prompt holds the same N samples)."""
    by_prompt: dict[str, list[dict]] = {}
    for r in sorted(pool, key=lambda r: r["sample_index"]):
        by_prompt.setdefault(r["prompt_id"], []).append(r)
    sizes_n = {len(c) for c in by_prompt.values()}
    if len(sizes_n) != 1 or max(sizes) > min(sizes_n):
        raise ValueError(f"every prompt needs the same pool of >= {max(sizes)} samples, got sizes {sorted(sizes_n)}")
    points = []
    for n in sorted(sizes):
        values: dict[str, dict] = {key: {} for key in _keys(pool)}
        picked = []
        for p, cands in by_prompt.items():
            sel = [c["scores"][proxy] for c in cands]
            w = np.asarray(best_of_weights(sel, n))
            values["gold"][(p, 0)] = float(w @ [c["scores"]["gold"] for c in cands])
            values["proxy"][(p, 0)] = float(w @ sel)
            values["words"][(p, 0)] = float(w @ [float(c["words"]) for c in cands])
            values["rep"][(p, 0)] = float(w @ [float(c["rep"]) for c in cands])
            values["ended"][(p, 0)] = float(w @ [_ended(c) for c in cands])
            if "slop" in values:
                values["slop"][(p, 0)] = float(w @ [float(c["slop"]) for c in cands])
            picked.append({**cands[best_index(sel, n)], "sample_index": 0})
        points.append(Point(n, kl_best_of(n), None, values, diversity(picked)))
    return Curve(run, proxy, "bon", points, *_start_regression(pool, proxy), gold_slopes=gold_slopes(pool))


@dataclass(frozen=True)
class AfterPeak:
    """One checkpoint after the gold peak, against the peak on the test half of the prompts: gold and proxy
    changes with Bonferroni CIs (alpha / the number of checkpoints after the peak). `kind`:
    "overoptimised" (gold fell while the proxy rose: Gao et al.'s signature), "collapsed" (both fell: the
    policy degenerated, the proxy was not being optimised any more), "gold_fell" (gold fell, the proxy did
    not change measurably) or "no_fall"."""

    x: int
    gold: PairedDiff
    proxy: PairedDiff
    kind: str


@dataclass
class Summary:
    curve: Curve
    deltas: dict[int, dict[str, PairedDiff]]  # x -> {"gold", "proxy", "words", "rep", "ended"}: change from the start
    peak: PeakTest
    rise: PairedDiff | None  # peak - start on the test half; None when the peak is the start
    fit: GaoFit
    fit_ci: FitInterval | None
    surface: SurfaceExplanation
    gold_surface: SurfaceExplanation | None = None  # the same rule for the gold rise at the peak (None: no rise)
    after_peak: list[AfterPeak] = field(default_factory=list)
    residual: dict[int, PairedDiff] = field(default_factory=dict)  # x -> residual gold change from the start
    explained: dict[int, float] = field(default_factory=dict)  # x -> the gold change words and ending predict
    residual_rise: PairedDiff | None = None  # residual at the peak - start on the test half (None: peak = start)

    @property
    def final(self) -> Point:
        return self.curve.points[-1]

    def point(self, x: int) -> Point:
        return next(p for p in self.curve.points if p.x == x)


def summarise(curve: Curve, n_resamples: int = 1000, fit_resamples: int = 300, seed: int = 0) -> Summary:
    """Prompt-level CIs of every point's change, the split-half peak test, the Gao fit and the surface share."""
    start, pts = curve.points[0], curve.points
    deltas = {
        p.x: {
            k: paired_prompt_bootstrap(p.values[k], start.values[k], n_resamples=n_resamples, seed=seed)
            for k in start.values
            if k in p.values
        }
        for p in pts[1:]
    }
    gold = {p.x: p.values["gold"] for p in pts}
    order = [p.x for p in pts]
    peak = split_half_peak(gold, order, seed=seed, n_resamples=n_resamples)
    _, test = split_prompts([k[0] for k in start.values["gold"]], seed=seed)
    half = PromptHalf(set(test), n_resamples, seed)
    rise = half.diff(gold[peak.peak], gold[order[0]]) if peak.peak != order[0] else None
    d = [p.d for p in pts]
    fit = fit_gao(curve.form, d, [p.mean("gold") - start.mean("gold") for p in pts])
    fit_ci = (
        fit_gao_ci(curve.form, d, [p.values["gold"] for p in pts], start.values["gold"], fit_resamples, seed=seed)
        if fit.a is not None
        else None
    )
    final = deltas[pts[-1].x] if len(pts) > 1 else None
    changes = {k: final[k].delta if final else 0.0 for k in ("words", "rep")}
    surface = explain_proxy_gain(
        curve.start_features, curve.start_proxy, changes, final["proxy"].delta if final else 0.0
    )
    gold_surface = None
    if peak.peak != order[0]:
        at_peak = deltas[peak.peak]
        gold_surface = explain_proxy_gain(
            curve.start_features,
            curve.start_gold,
            {k: at_peak[k].delta for k in ("words", "rep")},
            at_peak["gold"].delta,
        )
    after = after_peak(curve, order.index(peak.peak), half)
    res = {p.x: residuals(p.values, curve.gold_slopes) for p in pts}
    residual = {
        p.x: paired_prompt_bootstrap(res[p.x], res[order[0]], n_resamples=n_resamples, seed=seed) for p in pts[1:]
    }
    explained = {x: deltas[x]["gold"].delta - residual[x].delta for x in residual}
    res_rise = half.diff(res[peak.peak], res[order[0]]) if peak.peak != order[0] else None
    return Summary(curve, deltas, peak, rise, fit, fit_ci, surface, gold_surface, after, residual, explained, res_rise)


@dataclass(frozen=True)
class PromptHalf:
    """Paired differences restricted to the test half of the prompts (the peak is chosen on the other half)."""

    prompts: set[str]
    n_resamples: int
    seed: int

    def diff(self, a: dict[StoryKey, float], b: dict[StoryKey, float], alpha: float = 0.05) -> PairedDiff:
        a = {k: v for k, v in a.items() if k[0] in self.prompts}
        b = {k: v for k, v in b.items() if k[0] in self.prompts}
        return paired_prompt_bootstrap(a, b, n_resamples=self.n_resamples, alpha=alpha, seed=self.seed)


def after_peak(curve: Curve, peak_index: int, half: PromptHalf, alpha: float = 0.05) -> list[AfterPeak]:
    """Every point after curve.points[peak_index] against it, gold and proxy, on the test half of the
    prompts; Bonferroni over the points tested."""
    peak_pt, later = curve.points[peak_index], curve.points[peak_index + 1 :]
    out = []
    for p in later:
        g, pr = (half.diff(p.values[k], peak_pt.values[k], alpha / len(later)) for k in ("gold", "proxy"))
        if g.ci_high >= 0:
            kind = "no_fall"
        elif pr.ci_low > 0:
            kind = "overoptimised"
        elif pr.ci_high < 0:
            kind = "collapsed"
        else:
            kind = "gold_fell"
        out.append(AfterPeak(p.x, g, pr, kind))
    return out


def ci_text(diff: PairedDiff | None) -> str:
    return "-" if diff is None else f"{diff.delta:+.3f} [{diff.ci_low:+.3f}, {diff.ci_high:+.3f}]"


def _x_name(s: Summary) -> str:
    return "n" if s.curve.form == "bon" else "step"


def run_verdict(s: Summary) -> list[str]:
    """Sentences for one run: proxy gain, gold rise, peak, fall, surface share, KL reached. Nulls said as null."""
    c, x = s.curve, _x_name(s)
    if len(c.points) < 2:
        return [f"**{c.run}**: no point beyond the start was measured: nothing to conclude (null)."]
    dp = s.deltas[s.final.x]["proxy"]
    out = [f"**{c.run}** (optimises `{c.proxy}`; final {x} {s.final.x}, d = {s.final.d:.2f}):"]
    if dp.ci_low > 0:
        out.append(f"the proxy rose ({ci_text(dp)}).")
    else:
        out.append(f"no measurable proxy gain ({ci_text(dp)}): the run did not push its proxy (null).")
    peak_pt = s.point(s.peak.peak)
    if s.rise is None:
        out.append("Gold never beat the start on the selection half of the prompts: gold did not rise (null).")
    else:
        verdict = "rose" if s.rise.ci_low > 0 else "fell" if s.rise.ci_high < 0 else "did not change measurably"
        out.append(
            f"Gold peaked at {x} {peak_pt.x} (d = {peak_pt.d:.2f}, chosen on half the prompts); on the other half "
            f"it {verdict} from the start to the peak ({ci_text(s.rise)})."
        )
    gs = s.gold_surface
    if gs is not None and gs.share is not None:
        how = "explain" if gs.explains else "do not explain"
        out.append(
            f"Length and repetition {how} the gold rise at the peak: the gold's own start-policy slopes predict "
            f"{gs.total_predicted:+.3f} of {gs.actual:+.3f} ({gs.share:.0%}; words {gs.predicted['words']:+.3f}, "
            f"repetition {gs.predicted['rep']:+.3f})."
        )
    out.extend(_residual_sentence(s))
    if s.peak.verdict == "peak_is_final":
        out.append("The peak is the last point: no fall to test.")
    else:
        word = {"fell": "fell", "rose": "rose further", "no_fall": "did not fall measurably"}[s.peak.verdict]
        out.append(f"After the peak gold {word} (final - peak on the test half {ci_text(s.peak.fall)}).")
    out.extend(_after_peak_sentence(s, x))
    sf = s.surface
    if sf.share is None:
        out.append("No proxy gain for length or repetition to explain.")
    else:
        how = "explain" if sf.explains else "do not explain"
        out.append(
            f"Length and repetition {how} the proxy gain: their start-policy slopes predict {sf.total_predicted:+.3f} "
            f"of {sf.actual:+.3f} ({sf.share:.0%}; words {sf.predicted['words']:+.3f}, repetition {sf.predicted['rep']:+.3f})."
        )
    if c.form == "rl":
        top = max(p.kl for p in c.points)
        reach = "reached" if top >= KL_TARGET else "not reached: the budget ended first"
        out.append(f"Largest KL {top:.2f} nats/story (target {KL_TARGET:g}: {reach}).")
    return [" ".join(out)]


def residual_verdict(s: Summary) -> str:
    """rose | fell | no change | - (no rise to test): the residual gold at the peak on the test half."""
    r = s.residual_rise
    if r is None:
        return "-"
    tol = 1e-9  # a residual that is zero up to rounding must not read as a change
    return "rose" if r.ci_low > tol else "fell" if r.ci_high < -tol else "no change"


def _residual_sentence(s: Summary) -> list[str]:
    """The length- and ending-free part of the gold change at the peak (test half)."""
    if s.residual_rise is None:
        return []
    b = s.curve.gold_slopes
    word = {"rose": "rose", "fell": "fell", "no change": "did not change measurably"}[residual_verdict(s)]
    return [
        f"Free of length and ending (the gold pays {b['words']:+.4f} per word and {b['ended']:+.3f} for ending on "
        f"start stories), the gold {word} from the start to the peak ({ci_text(s.residual_rise)}, test half)."
    ]


def _after_peak_sentence(s: Summary, x: str) -> list[str]:
    """Over-optimisation (gold down, proxy up) told apart from a collapse (both down) after the peak."""
    over = [a for a in s.after_peak if a.kind == "overoptimised"]
    down = [a for a in s.after_peak if a.kind == "collapsed"]
    if not (over or down):
        return []
    parts = []
    if over:
        a = over[0]
        parts.append(
            f"Over-optimisation shown: at {x} {a.x} gold was below the peak ({ci_text(a.gold)}) while the proxy "
            f"was above it ({ci_text(a.proxy)}; test half, Bonferroni over {len(s.after_peak)} checkpoints)."
        )
    if down:
        where = ", ".join(str(a.x) for a in down)
        parts.append(
            f"At {x} {where} the proxy fell below the peak too: the policy degenerated rather than over-optimised "
            "its proxy there."
        )
    return parts


def proxy_verdict(proxy: str, summaries: list[Summary]) -> str:
    """How far each run optimising `proxy` pushed before gold fell (split-half) and where the fit peaks."""
    parts = []
    for s in summaries:
        peak = s.point(s.peak.peak)
        if s.peak.verdict == "fell":
            text = f"gold fell after d = {peak.d:.2f}"
        else:
            text = f"gold did not fall up to d = {max(p.d for p in s.curve.points):.2f}"
        if s.fit.d_star is not None:
            where = "inside" if s.fit.peak_in_range else "outside"
            text += f"; fitted peak d* = {s.fit.d_star:.2f} ({where} the measured range)"
        parts.append(f"{s.curve.run}: {text}")
    return f"- `{proxy}`: " + "; ".join(parts) + "." if parts else f"- `{proxy}`: no run optimised it."


@dataclass(frozen=True)
class AggregateChoice:
    """Best-of-n under several aggregates of one ensemble: the label whose gold at the largest n is highest on the
    selection half of the prompts, and that aggregate's gold change from n = 1 on the test half."""

    selection_gold: dict[str, float]  # label -> mean gold at the largest n, selection half
    chosen: str
    test: PairedDiff  # the chosen curve's gold, largest n - n = 1, test half


def choose_aggregate(curves: dict[str, Curve], n_resamples: int = 1000, seed: int = 0) -> AggregateChoice:
    """Pick an aggregate (e.g. uwo's lambda) by best-of-n gold on one half of the prompts, test it on the other:
    the selection never sees the prompts the reported change is measured on."""
    if not curves:
        raise ValueError("no best-of-n curve to choose from")
    first = next(iter(curves.values()))
    select, test = split_prompts([k[0] for k in first.points[0].values["gold"]], seed=seed)
    chosen_set = set(select)

    def selection_mean(c: Curve) -> float:
        gold = c.points[-1].values["gold"]
        return float(np.mean([v for k, v in gold.items() if k[0] in chosen_set]))

    means = {label: selection_mean(c) for label, c in curves.items()}
    best = max(means, key=lambda label: means[label])
    c = curves[best]
    diff = PromptHalf(set(test), n_resamples, seed).diff(c.points[-1].values["gold"], c.points[0].values["gold"])
    return AggregateChoice(means, best, diff)
