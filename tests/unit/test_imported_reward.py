"""`python` reward specs: rewards by import path, with clear errors for bad targets."""

import pytest

from rlcw.errors import RlcwError
from rlcw.measure.probe import did_not_move, logp_change
from rlcw.rewards.factory import build_rewards
from rlcw.rewards.length import length_penalty


def count_letter(prompts, completions, letter="a", **kwargs):
    return [float(c.count(letter)) for c in completions]


class Scaled:
    def __init__(self, factor: float):
        self.factor = factor

    def __call__(self, prompts, completions, **kwargs):
        return [self.factor * len(c) for c in completions]


def strict_reward(prompts, completions):
    return [0.0 for _ in completions]


def not_a_reward(x):
    return x


def test_python_spec_calls_the_target_with_its_options():
    funcs, weights = build_rewards(
        {
            "as": {"type": "python", "target": f"{__name__}:count_letter", "letter": "b", "weight": 2.0},
            "len": {"type": "python", "target": f"{__name__}:Scaled", "factor": 0.5},
        }
    )
    assert weights == [2.0, 1.0] and [f.__name__ for f in funcs] == ["as", "len"]
    assert funcs[0](["p", "p"], ["abba", "a"]) == [2.0, 0.0]
    assert funcs[1](["p"], ["abcd"]) == [2.0]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", "is not 'package.module:function'"),
        ("rlcw_no_such_module:f", "cannot import module"),
        (f"{__name__}:missing", "has no attribute"),
        (f"{__name__}:not_a_reward", "does not take"),
        ("math:pi", "is not callable"),
    ],
)
def test_bad_targets_are_clear_errors(target, message):
    with pytest.raises(RlcwError, match=message):
        build_rewards({"x": {"type": "python", "target": target}})


def test_unknown_option_and_bad_return_are_errors():
    with pytest.raises(RlcwError, match="takes no option 'colour'"):
        build_rewards({"x": {"type": "python", "target": f"{__name__}:strict_reward", "colour": 1}})
    funcs, _ = build_rewards({"x": {"type": "python", "target": f"{__name__}:count_letter"}})
    funcs[0].fn = lambda p, c, **k: [1.0]
    with pytest.raises(RlcwError, match="returned list of length 1 for 2 completions"):
        funcs[0](["p", "q"], ["a", "b"])


def test_length_penalty_miss_is_a_flat_price_outside_the_range():
    assert length_penalty(35, 40, 60) == pytest.approx(-0.25)
    assert length_penalty(35, 40, 60, miss=1.0) == pytest.approx(-1.25)
    assert length_penalty(50, 40, 60, miss=1.0) == 0.0
    assert length_penalty(200, 40, 60, clip=2.0, miss=1.0) == pytest.approx(-3.0)


def test_probe_logp_change_pools_tokens():
    import torch

    start = [torch.tensor([-1.0, -2.0]), torch.tensor([-3.0])]
    now = [torch.tensor([-1.5, -1.0]), torch.tensor([-3.0])]
    signed, size = logp_change(now, start)  # changes -0.5, +1.0, 0 over 3 tokens
    assert signed == pytest.approx(0.5 / 3) and size == pytest.approx(1.5 / 3)
    assert did_not_move([{"probe/abs_logp_change": 0.005}]) and not did_not_move([{"probe/abs_logp_change": 0.5}])
    assert did_not_move([])
