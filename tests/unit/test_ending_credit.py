"""Ending credit (rlcw.rl.grpo.ending_credit): the other terms' advantage on every completion token, the stopping
terms' added on each completion's last; hand-worked."""

from __future__ import annotations

import math

import pytest
import torch

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.rl.grpo.ending_credit import split_advantages, token_advantages

R2 = 1 / math.sqrt(2)


def test_each_kind_is_normalised_on_its_own_within_its_group():
    # two groups of 2; columns: rm (content), length (ending), overlong (ending), weights 1, 1, 2
    rewards = torch.tensor([[1.0, 0.0, 0.0], [3.0, -2.0, 0.0], [2.0, 0.0, -1.0], [2.0, 0.0, 0.0]])
    content, ending = split_advantages(rewards, torch.tensor([1.0, 1.0, 2.0]), [False, True, True], 2, "group")
    # group 1: rm 1, 3 -> mean 2, SD sqrt(2) (Bessel, n=2) -> -1/sqrt2, +1/sqrt2; ending 0, -2 -> +1/sqrt2, -1/sqrt2
    # group 2: rm 2, 2 -> 0, 0 (SD 0: divided by 1e-4, 0 stays 0); ending -2 (weight 2 x -1), 0 -> -1/sqrt2, +1/sqrt2
    sd = math.sqrt(2) + 1e-4
    assert content.tolist() == pytest.approx([-1 / sd, 1 / sd, 0.0, 0.0])
    assert ending.tolist() == pytest.approx([1 / sd, -1 / sd, -1 / sd, 1 / sd])


def test_batch_and_no_scaling_divide_as_trl_does():
    rewards = torch.tensor([[1.0, 0.0], [3.0, -2.0], [2.0, 0.0], [2.0, -4.0]])
    w = torch.tensor([1.0, 1.0])
    content, ending = split_advantages(rewards, w, [False, True], 2, "none")
    assert content.tolist() == pytest.approx([-1.0, 1.0, 0.0, 0.0])
    assert ending.tolist() == pytest.approx([1.0, -1.0, 2.0, -2.0])
    content, ending = split_advantages(rewards, w, [False, True], 2, "batch")
    # batch SD of the ending sums 0, -2, 0, -4: mean -1.5, squares 2.25 + 0.25 + 2.25 + 6.25 = 11 over 3
    assert ending.tolist() == pytest.approx([x / (math.sqrt(11 / 3) + 1e-4) for x in (1.0, -1.0, 2.0, -2.0)])
    assert content.tolist() == pytest.approx([x / (math.sqrt(2 / 3) + 1e-4) for x in (-1.0, 1.0, 0.0, 0.0)])


def test_a_row_whose_terms_of_one_kind_are_all_nan_gets_no_advantage_there():
    nan = float("nan")
    rewards = torch.tensor([[1.0, nan], [3.0, -2.0], [5.0, 0.0]])
    content, ending = split_advantages(rewards, torch.tensor([1.0, 1.0]), [False, True], 3, "none")
    assert content.tolist() == pytest.approx([-2.0, 0.0, 2.0])
    assert ending.tolist() == pytest.approx([0.0, -1.0, 1.0])  # the mean of -2 and 0 only; the NaN row gets 0


def test_the_last_completion_token_adds_the_ending_advantage():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])  # ended at the 3rd token; cut; empty
    adv = token_advantages(torch.tensor([0.5, -1.0, 2.0]), torch.tensor([3.0, 4.0, 5.0]), mask)
    assert adv.tolist() == [[0.5, 0.5, 3.5, 0.5], [-1.0, -1.0, -1.0, 3.0], [2.0, 2.0, 2.0, 2.0]]


def test_both_kinds_are_needed():
    rewards = torch.zeros(2, 2)
    for kinds in ([True, True], [False, False], [True]):
        with pytest.raises(ValueError, match="both kinds"):
            split_advantages(rewards, torch.ones(2), kinds, 2, "group")
    with pytest.raises(ValueError, match="scale_rewards"):
        split_advantages(rewards, torch.ones(2), [False, True], 2, "groups")


@pytest.mark.parametrize(
    ("more", "match"),
    [
        (["train.ending_credit=[lenght]"], r"\['lenght'\] are not reward specs"),
        (["train.ending_credit=[rm,length_range]"], "nothing is left for the content tokens"),
        (["train.ending_credit=[length_range]", "reward.aggregation=normalize_then_sum"], "has no sum"),
        (["train.ending_credit=[length_range]", "agents.variant=e2e"], "Agents' Room"),
    ],
)
def test_the_recipe_refuses_what_ending_credit_cannot_split(more, match):
    from rlcw.recipes.grpo import GRPORecipeConfig, check_ending_credit

    base = ["reward.specs={rm: {type: bt}, length_range: {type: length_range}}"]
    cfg = load_config(GRPORecipeConfig, None, base + more)
    with pytest.raises(RlcwError, match=match) as err:
        check_ending_credit(cfg)
    assert "train.ending_credit" in str(err.value)
    check_ending_credit(load_config(GRPORecipeConfig, None, [*base, "train.ending_credit=[length_range]"]))
