"""Periodic evaluation: the evaluator interface, the built-in evaluators and their registry.

An evaluator has a `name` and `evaluate(candidates, baseline, out_dir) -> dict[str, float]`,
where both lists are story records for the same prompts (baseline = the starting model,
generated once). RL stages call every evaluator every `eval.every_steps` on rank 0 (other
ranks wait) and log the results as `eval/<evaluator>/<metric>`.

Evaluators are built by name from config (`eval.evaluators`: name -> options):

    evaluators = build_evaluators({"rm": {}, "length": {}, "judge": {"judge": "dummy"}},
                                  {"rm_path": "runs/train_rm/model", "run_dir": run.path})

`EVALUATORS` maps a name to a factory "module:function" with the signature
`make(options: dict, context: dict) -> Evaluator`; context keys: `rm_path`, `run_dir`, `seed`,
`scorer` (an already loaded BT scorer, optional). Options `enabled: false` drops an evaluator
and `factory: "pkg.mod:fn"` plugs in one that is not registered. Factories are imported only
when used, so `judge` (rlcw.judges) and `study` (rlcw.study) cost nothing unless asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

from rlcw.errors import RlcwError
from rlcw.metrics.stories import in_range_share, mean, repetition_stats
from rlcw.metrics.text import count_words
from rlcw.rewards.length import length_penalty


class Evaluator(Protocol):
    name: str

    def evaluate(self, candidates: list[dict], baseline: list[dict], out_dir: Path) -> dict[str, float]: ...


_mean = mean  # rlcw.metrics.stories.mean


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
            out["win_rate_vs_baseline"] = _mean(
                [1.0 if c > b else 0.5 if c == b else 0.0 for c, b in zip(cand, base, strict=False)]
            )
        return out


class LengthEvaluator:
    """Words per story, the share inside the prompt's range, and the mean range penalty."""

    name = "length"

    def evaluate(self, candidates, baseline, out_dir):
        words = [count_words(c["story"]) for c in candidates]
        ranged = [(w, c) for w, c in zip(words, candidates, strict=False) if c.get("min_words") is not None]
        out = {"mean_words": _mean([float(w) for w in words])}
        if ranged:
            out["in_range"] = in_range_share(
                [w for w, _ in ranged], [(c["min_words"], c["max_words"]) for _, c in ranged]
            )
            out["range_penalty"] = _mean([length_penalty(w, c["min_words"], c["max_words"]) for w, c in ranged])
        if baseline:
            out["baseline_mean_words"] = _mean([float(count_words(b["story"])) for b in baseline])
        return out


class RepetitionEvaluator:
    """Trigram repetition within stories and distinct trigrams across them."""

    name = "repetition"

    def evaluate(self, candidates, baseline, out_dir):
        return repetition_stats([c["story"] for c in candidates], 3)


def run_evaluators(evaluators: list, candidates: list[dict], baseline: list[dict], out_dir: Path) -> dict[str, float]:
    """All evaluators' metrics, keyed `eval/<evaluator>/<metric>`."""
    out: dict[str, float] = {}
    for ev in evaluators:
        for key, value in ev.evaluate(candidates, baseline, out_dir).items():
            out[f"eval/{ev.name}/{key}"] = float(value)
    return out


def make_rm_evaluator(options: dict, context: dict) -> RMScoreEvaluator:
    """Options: `rm_path` (default: the run's RM), `batch_size`, `length_control`."""
    opts = dict(options)
    path = opts.pop("rm_path", None) or context.get("rm_path")
    if path is None and context.get("scorer") is None:
        raise RlcwError(
            "the 'rm' evaluator needs a reward model",
            where="eval.evaluators.rm",
            hint="set eval.evaluators.rm.rm_path",
        )
    if context.get("scorer") is not None and (path is None or str(path) == str(context.get("rm_path"))) and not opts:
        return RMScoreEvaluator(context["scorer"])
    from rlcw.rm.scoring import load_rm

    return RMScoreEvaluator(load_rm(path, **opts))


def make_length_evaluator(options: dict, context: dict) -> LengthEvaluator:
    return LengthEvaluator()


def make_repetition_evaluator(options: dict, context: dict) -> RepetitionEvaluator:
    return RepetitionEvaluator()


EVALUATORS: dict[str, str] = {
    "rm": "rlcw.measure.evaluation:make_rm_evaluator",
    "length": "rlcw.measure.evaluation:make_length_evaluator",
    "repetition": "rlcw.measure.evaluation:make_repetition_evaluator",
    "judge": "rlcw.judges.evaluator:make_judge_evaluator",
    "study": "rlcw.study.evaluator:make_study_evaluator",
}


def _load_factory(target: str, where: str):
    module_name, _, attr = target.partition(":")
    if not attr:
        raise RlcwError(f"factory '{target}' is not 'module:function'", where=where)
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RlcwError(f"cannot load evaluator factory '{target}': {exc}", where=where) from None


def build_evaluators(specs: dict[str, dict[str, Any]], context: dict[str, Any]) -> list:
    """Evaluators from `name -> options` (see the module docstring); unknown names are an error."""
    out = []
    for name, options in (specs or {}).items():
        where = f"eval.evaluators.{name}"
        opts = dict(options or {})
        if not opts.pop("enabled", True):
            continue
        target = opts.pop("factory", None) or EVALUATORS.get(name)
        if target is None:
            raise RlcwError(
                f"unknown evaluator '{name}'",
                where=where,
                hint=f"known: {', '.join(EVALUATORS)}; or give options.factory='module:function'",
            )
        evaluator = _load_factory(target, where)(opts, context)
        if getattr(evaluator, "name", None) != name:
            try:
                evaluator.name = name  # metrics are keyed by the configured name
            except AttributeError:
                pass
        out.append(evaluator)
    return out
