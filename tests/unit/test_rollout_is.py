"""Truncated importance-sampling weights of off-policy rollouts (rlcw.rl.grpo.is_correction), hand-worked."""

from __future__ import annotations

import math

import pytest
import torch

from rlcw.errors import RlcwError
from rlcw.rl.grpo.is_correction import is_stats, truncated_is_weights


def test_weights_hand_worked():
    # row 0: gaps ln2, 0, ln(1/2); row 1: gap ln4 (clipped at 3), then padding with a junk sampler value
    logp = torch.log(torch.tensor([[0.4, 0.5, 0.1], [0.8, 0.3, 0.3]]))
    sampler = torch.log(torch.tensor([[0.2, 0.5, 0.2], [0.2, 0.9, 0.9]]))
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    w, sums = truncated_is_weights(logp, sampler, mask, cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 1.0, 0.5], [3.0, 1.0, 1.0]]))
    ln2 = math.log(2)
    # |gaps| ln2 + 0 + ln2 + 2 ln2 = 4 ln2; weights 2 + 1 + 0.5 + 3 = 6.5; one clipped of 4 tokens
    torch.testing.assert_close(sums, torch.tensor([4 * ln2, 6.5, 1.0, 4.0]))
    stats = is_stats(sums)
    assert stats == pytest.approx({"mean_abs_gap": ln2, "mean_weight": 1.625, "clipped_share": 0.25})


def test_weights_carry_no_gradient_and_on_policy_is_one():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    w, _ = truncated_is_weights(logp, logp.detach().clone(), torch.ones(1, 2), cap=2.0)
    assert not w.requires_grad
    assert w.tolist() == [[1.0, 1.0]]


def test_bad_cap_and_shapes_are_errors():
    x = torch.zeros(1, 2)
    with pytest.raises(RlcwError, match="cap must be > 0"):
        truncated_is_weights(x, x, x, cap=0.0)
    with pytest.raises(RlcwError, match="shapes differ"):
        truncated_is_weights(x, torch.zeros(1, 3), x, cap=2.0)
