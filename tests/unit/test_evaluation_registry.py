"""Evaluator registry: names -> factories, options, custom factories, and clear errors."""

import pytest

from rlcw.errors import RlcwError
from rlcw.measure.evaluation import EVALUATORS, LengthEvaluator, RMScoreEvaluator, build_evaluators, run_evaluators


class FakeScorer:
    def score(self, prompts, stories):
        return [float(len(s.split())) for s in stories]


def make_echo(options, context):
    """A custom evaluator factory (used through options.factory)."""

    class Echo:
        name = "echo"

        def evaluate(self, candidates, baseline, out_dir):
            return {"n": float(len(candidates)), "k": float(options["k"]), "seed": float(context["seed"])}

    return Echo()


def test_builtins_by_name_share_the_loaded_scorer():
    evs = build_evaluators(
        {"rm": {}, "length": {}, "repetition": {}, "judge": {"enabled": False}},
        {"rm_path": "rm", "scorer": FakeScorer(), "run_dir": "x", "seed": 0},
    )
    assert [e.name for e in evs] == ["rm", "length", "repetition"]
    assert isinstance(evs[0], RMScoreEvaluator) and isinstance(evs[1], LengthEvaluator)
    cands = [{"id": "a", "prompt": "p", "story": "one two three", "min_words": 2, "max_words": 4}]
    base = [{"id": "a", "prompt": "p", "story": "one", "min_words": 2, "max_words": 4}]
    out = run_evaluators(evs, cands, base, None)
    assert (
        out["eval/rm/score"] == 3.0
        and out["eval/rm/baseline_score"] == 1.0
        and out["eval/rm/win_rate_vs_baseline"] == 1.0
    )
    assert out["eval/length/in_range"] == 1.0


def test_custom_factory_and_context():
    evs = build_evaluators({"mine": {"factory": f"{__name__}:make_echo", "k": 7}}, {"seed": 3})
    assert run_evaluators(evs, [{}, {}], [], None) == {"eval/mine/n": 2.0, "eval/mine/k": 7.0, "eval/mine/seed": 3.0}


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(RlcwError) as info:
        build_evaluators({"bleu": {}}, {})
    msg = str(info.value)
    assert "unknown evaluator 'bleu'" in msg and "eval.evaluators.bleu" in msg
    assert all(name in msg for name in EVALUATORS)


def test_bad_factory_is_a_clear_error():
    with pytest.raises(RlcwError, match="cannot load evaluator factory 'no.such.module:make'"):
        build_evaluators({"x": {"factory": "no.such.module:make"}}, {})
    with pytest.raises(RlcwError, match="not 'module:function'"):
        build_evaluators({"x": {"factory": "nocolon"}}, {})


def test_rm_evaluator_needs_a_reward_model():
    with pytest.raises(RlcwError, match="needs a reward model"):
        build_evaluators({"rm": {}}, {})


def test_registry_names_the_planned_judge_and_study_factories():
    assert EVALUATORS["judge"] == "rlcw.judges.evaluator:make_judge_evaluator"
    assert EVALUATORS["study"] == "rlcw.study.evaluator:make_study_evaluator"
