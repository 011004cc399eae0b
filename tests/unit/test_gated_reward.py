"""gate: in_range / not_short: a reward kept for stories that ended inside their word range (or not short of it),
the batch's floor elsewhere."""

from types import SimpleNamespace

import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.factory import build_reward_set, build_rewards
from rlcw.rewards.gated import Gate


def fixed(values):
    """A reward that returns `values` whatever it is given, and records the keyword arguments it got."""

    def reward(prompts, completions, **kwargs):
        reward.kwargs = kwargs
        return list(values)

    return reward


def words(n: int) -> str:
    return " ".join(["word"] * n)


def six_rows(kind: str) -> tuple[list, dict]:
    """(gated values, logged metrics) of one batch: range 4-8 words, cap 10 ids. Rows: inside and ended; 2 words,
    ended (too short); 6 words but cut at the cap; 9 words, ended (too long); inside and ended again, with the
    batch's lowest value; a row without a range. The floor is min(3.0, 2.5, 2.0, 1.5, 0.5, 4.0) = 0.5."""
    gate = Gate(fixed([3.0, 2.5, 2.0, 1.5, 0.5, 4.0]), max_tokens=10, kind=kind)
    logged = {}
    out = gate(
        ["p"] * 6,
        [words(5), words(2), words(6), words(9), words(8), words(1)],
        min_words=[4, 4, 4, 4, 4, None],
        max_words=[8, 8, 8, 8, 8, None],
        completion_ids=[[1] * 6, [1] * 3, [1] * 10, [1] * 9, [1] * 9, [1] * 2],
        log_metric=logged.__setitem__,
    )
    return out, logged


def test_stories_outside_the_range_or_cut_get_the_batch_floor():
    out, logged = six_rows("in_range")  # rows 2-4 take the floor, rows 1, 5 and 6 keep theirs
    assert out == [3.0, 0.5, 0.5, 0.5, 0.5, 4.0]
    assert logged == {"gate/reward/kept": 3 / 6}


def test_not_short_floors_only_stories_that_ended_below_the_range():
    out, logged = six_rows("not_short")  # only the 2-word story that ended: cut, too long and inside keep theirs
    assert out == [3.0, 0.5, 2.0, 1.5, 0.5, 4.0]
    assert logged == {"gate/reward/kept": 5 / 6}
    # a 2-word story cut at the cap did not end short: it keeps its value
    cut = Gate(fixed([1.0, 0.0]), max_tokens=3, kind="not_short")
    assert cut(
        ["p"] * 2, [words(2), words(5)], min_words=[4] * 2, max_words=[8] * 2, completion_ids=[[1] * 3, [1] * 2]
    ) == [1.0, 0.0]


def test_the_wrapped_reward_sees_every_argument_and_nan_is_not_the_floor():
    inner = fixed([float("nan"), 1.0, -2.0])
    gate = Gate(inner, max_tokens=10)
    out = gate(
        ["p"] * 3,
        [words(5), words(1), words(5)],
        min_words=[4] * 3,
        max_words=[8] * 3,
        completion_ids=[[1] * 5] * 3,
        source=["tmas"] * 3,
    )
    assert out[1:] == [-2.0, -2.0] and out[0] != out[0]  # a NaN inside stays NaN (TRL's "no score")
    assert inner.kwargs["min_words"] == [4] * 3 and inner.kwargs["source"] == ["tmas"] * 3
    nothing = Gate(fixed([float("nan")] * 2), max_tokens=10)
    assert all(
        v != v
        for v in nothing(["p"] * 2, [words(1)] * 2, min_words=[4] * 2, max_words=[8] * 2, completion_ids=[[1]] * 2)
    )


def test_a_gate_needs_completion_ids_and_a_cap():
    with pytest.raises(ValueError, match="completion_ids"):
        Gate(fixed([1.0]), max_tokens=10)(["p"], ["c"], min_words=[1], max_words=[2])
    with pytest.raises(ValueError, match="max_tokens"):
        Gate(fixed([1.0]), max_tokens=0)
    with pytest.raises(ValueError, match="unknown gate 'short'"):
        Gate(fixed([1.0]), max_tokens=10, kind="short")


def test_a_spec_with_a_gate_is_wrapped_with_the_recipes_cap():
    funcs, _ = build_rewards({"len": {"type": "length_range", "gate": "in_range"}}, defaults={"max_tokens": 10})
    assert isinstance(funcs[0], Gate) and funcs[0].max_tokens == 10 and funcs[0].__name__ == "len"
    assert funcs[0].kind == "in_range"
    funcs, _ = build_rewards({"len": {"type": "length_range", "gate": "not_short"}}, defaults={"max_tokens": 10})
    assert funcs[0].kind == "not_short"


@pytest.mark.parametrize(
    ("spec", "defaults", "match"),
    [
        ({"type": "length_range", "gate": "in_rnage"}, {"max_tokens": 10}, "unknown gate 'in_rnage'"),
        ({"type": "length_range", "gate": "in_range"}, {}, "needs the completion cap"),
        (
            {"type": "ended_short", "gate": "in_range", "constrain": {"limit": "start"}},
            {"max_tokens": 10},
            "gate and constrain do not go together",
        ),
    ],
)
def test_a_bad_gate_names_its_key(spec, defaults, match):
    with pytest.raises(RlcwError, match=match) as err:
        build_rewards({"x": spec}, defaults=defaults, key="reward.specs")
    assert "reward.specs.x.gate" in str(err.value)


def test_a_gated_rm_still_lends_its_scorer_to_the_recipe(monkeypatch):
    import rlcw.rm.scoring as scoring

    monkeypatch.setattr(
        scoring, "load_rm", lambda rm_dir, batch_size=8: SimpleNamespace(rm_dir=rm_dir, precision="fp32")
    )
    built = build_reward_set({"rm": {"type": "bt", "gate": "in_range"}}, {"rm_path": "runs/rm", "max_tokens": 10})
    assert isinstance(built.funcs[0], Gate) and built.scorer.rm_dir == "runs/rm"


def test_the_report_names_the_gate_and_the_gated_rms_length_control():
    from rlcw.rewards.bt import BTScorer
    from rlcw.rl.grpo import report

    specs = {"rm": {"type": "bt", "gate": "in_range"}, "len": {"type": "length_range"}}
    assert report.reward_summary(specs) == "rm (bt, weight 1.0, gated in_range), len (length_range, weight 1.0)"
    rm = BTScorer.__new__(BTScorer)  # the attributes the report reads, no model
    rm.__name__, rm.scorer = "rm_train_rm", SimpleNamespace(length_fit=None)
    assert report.length_control_lines([Gate(rm, max_tokens=10)]) == [
        "- length control of `rm_train_rm`: off (raw scores)"
    ]
