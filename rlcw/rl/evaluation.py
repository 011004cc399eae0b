"""Periodic evaluation: the evaluator interface and the evaluators that exist now.

An evaluator has a `name` and `evaluate(candidates, baseline, out_dir) -> dict[str, float]`,
where both lists are story records for the same prompts (baseline = the starting model,
generated once). RL stages call every evaluator every `eval.every_steps` on rank 0 (other
ranks wait) and log the results as `eval/<evaluator>/<metric>`. Later issues add judges and
study export behind the same interface.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from rlcw.metrics.text import count_words, distinct_n, repetition_rate
from rlcw.rewards.length import length_penalty


class Evaluator(Protocol):
    name: str

    def evaluate(self, candidates: list[dict], baseline: list[dict], out_dir: Path) -> dict[str, float]: ...


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


class RMScoreEvaluator:
    """Mean reward-model score of candidates and baseline, and the candidates' win rate."""

    name = "rm"

    def __init__(self, scorer):
        self.scorer = scorer

    def evaluate(self, candidates, baseline, out_dir):
        cand = self.scorer.score([c["prompt"] for c in candidates], [c["story"] for c in candidates])
        out = {"score": _mean(cand)}
        if baseline:
            base = self.scorer.score([b["prompt"] for b in baseline], [b["story"] for b in baseline])
            out["baseline_score"] = _mean(base)
            out["win_rate_vs_baseline"] = _mean([1.0 if c > b else 0.5 if c == b else 0.0 for c, b in zip(cand, base)])
        return out


class LengthEvaluator:
    """Words per story, the share inside the prompt's range, and the mean range penalty."""

    name = "length"

    def evaluate(self, candidates, baseline, out_dir):
        words = [count_words(c["story"]) for c in candidates]
        ranged = [(w, c) for w, c in zip(words, candidates) if c.get("min_words") is not None]
        out = {"mean_words": _mean([float(w) for w in words])}
        if ranged:
            out["in_range"] = _mean([1.0 if c["min_words"] <= w <= c["max_words"] else 0.0 for w, c in ranged])
            out["range_penalty"] = _mean([length_penalty(w, c["min_words"], c["max_words"]) for w, c in ranged])
        if baseline:
            out["baseline_mean_words"] = _mean([float(count_words(b["story"])) for b in baseline])
        return out


class RepetitionEvaluator:
    """Trigram repetition within stories and distinct trigrams across them."""

    name = "repetition"

    def evaluate(self, candidates, baseline, out_dir):
        stories = [c["story"] for c in candidates]
        return {"intra_trigram_rep": _mean([repetition_rate(s, 3) for s in stories]), "distinct_3": distinct_n(stories, 3)}


def run_evaluators(evaluators: list, candidates: list[dict], baseline: list[dict], out_dir: Path) -> dict[str, float]:
    """All evaluators' metrics, keyed `eval/<evaluator>/<metric>`."""
    out: dict[str, float] = {}
    for ev in evaluators:
        for key, value in ev.evaluate(candidates, baseline, out_dir).items():
            out[f"eval/{ev.name}/{key}"] = float(value)
    return out
