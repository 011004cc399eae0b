"""ODIN loss terms and head choice on hand-worked numbers (rlcw.rewards.odin)."""

import math

import pytest
import torch

from rlcw.errors import RlcwError
from rlcw.rewards.odin import HEADS, OdinWeights, check_head, odin_loss, pearson, select_head

# Two pairs. Heads [quality, length]: chosen (1, 0) and (0, 1), rejected (0, 0) twice; words 10, 30 | 20, 20.
# Sums: chosen 1, 1; rejected 0, 0 -> BT = -log sigma(1) = log(1 + e^-1) = 0.313262.
# Over the 4 stories, words centred (-10, 10, 0, 0), norm sqrt(200); quality centred (.75, -.25, -.25, -.25),
# norm sqrt(.75): rho_q = -10 / sqrt(150) = -0.816497; the length head is the mirror: rho_l = +0.816497.
# Head weights (1, 2) and (3, -1): dot 3 - 2 = 1.
CHOSEN = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
REJECTED = torch.zeros(2, 2)
CW, RW = torch.tensor([10.0, 30.0]), torch.tensor([20.0, 20.0])
W = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
BT, RHO = math.log1p(math.exp(-1)), 10 / math.sqrt(150)


def test_each_term_enters_with_its_own_weight_and_sign():
    loss, parts = odin_loss(CHOSEN, REJECTED, CW, RW, W, OdinWeights(length=2.0, decorrelation=3.0, orthogonality=0.5))
    assert parts["bt_loss"].item() == pytest.approx(BT, abs=1e-6)
    assert parts["rho_quality"].item() == pytest.approx(-RHO, abs=1e-6)
    assert parts["rho_length"].item() == pytest.approx(RHO, abs=1e-6)
    assert parts["head_dot"].item() == pytest.approx(1.0)
    # BT - 2 rho_l + 3 |rho_q| + 0.5 |dot| = 0.313262 - 1.632993 + 2.449490 + 0.5
    assert loss.item() == pytest.approx(BT - 2 * RHO + 3 * RHO + 0.5, abs=1e-5)


def test_swapping_the_heads_changes_the_loss():
    """The length term rewards the length head's correlation, not the quality head's."""
    right, _ = odin_loss(CHOSEN, REJECTED, CW, RW, W, OdinWeights(length=2.0, decorrelation=3.0))
    swapped, _ = odin_loss(CHOSEN.flip(-1), REJECTED, CW, RW, W, OdinWeights(length=2.0, decorrelation=3.0))
    assert swapped.item() == pytest.approx(BT + 2 * RHO + 3 * RHO + 1.0, abs=1e-5) != pytest.approx(right.item())


def test_zero_weights_leave_plain_bradley_terry_on_the_sum_with_margin():
    none = OdinWeights(length=0.0, decorrelation=0.0, orthogonality=0.0)
    loss, _ = odin_loss(CHOSEN, REJECTED, CW, RW, W, none)
    assert loss.item() == pytest.approx(BT, abs=1e-6)
    with_margin, _ = odin_loss(CHOSEN, REJECTED, CW, RW, W, none, margin=torch.tensor([1.0, 1.0]))
    assert with_margin.item() == pytest.approx(math.log(2), abs=1e-6)  # sigma(1 - 1) = 1/2


def test_gradients_push_the_length_head_toward_length_and_the_quality_head_away():
    chosen = CHOSEN.clone().requires_grad_(True)
    loss, _ = odin_loss(chosen, REJECTED, CW, RW, W, OdinWeights(length=1.0, decorrelation=1.0, orthogonality=0.0))
    loss.backward()
    # story 2 (30 words) is the longest: its length score should rise (negative gradient), and the quality
    # head, anti-correlated with words here (rho_q < 0), is pushed to correlate less, i.e. story 2's quality rises too
    assert chosen.grad[1, 1] < 0 and chosen.grad[1, 0] < 0
    # story 1 (10 words): its length score is pushed down
    assert chosen.grad[0, 1] > 0


def test_pearson_is_zero_for_a_constant_and_matches_numpy():
    assert pearson(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0, 2.0, 3.0])).item() == 0.0
    x, y = torch.tensor([1.0, 2.0, 4.0, 8.0]), torch.tensor([3.0, 1.0, 4.0, 1.0])
    import numpy as np

    assert pearson(x, y).item() == pytest.approx(float(np.corrcoef(x, y)[0, 1]), abs=1e-6)


def test_select_head_picks_the_named_row():
    logits = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert select_head(logits, HEADS, "quality").tolist() == [1.0, 3.0]
    assert select_head(logits, HEADS, "length").tolist() == [2.0, 4.0]
    assert select_head(logits, HEADS, "sum").tolist() == [3.0, 7.0]
    one = torch.tensor([[5.0], [6.0]])
    assert select_head(one, ["score"], "quality").tolist() == [5.0, 6.0] == select_head(one, ["score"], "sum").tolist()


def test_bad_head_choices_are_clear_errors():
    with pytest.raises(RlcwError, match="no length head"):
        check_head("length", ["score"])
    with pytest.raises(RlcwError, match="unknown RM head 'qualty'"):
        check_head("qualty", HEADS)
    with pytest.raises(RlcwError, match="returns 1 scores"):
        select_head(torch.zeros(2, 1), HEADS, "quality")


def test_the_optional_quality_bt_term_ranks_pairs_by_the_quality_head_alone():
    # quality: chosen 1, 0 vs rejected 0, 0 -> -(log sigma(1) + log sigma(0)) / 2 = (0.313262 + 0.693147) / 2
    none = OdinWeights(length=0.0, decorrelation=0.0, orthogonality=0.0)
    base, parts = odin_loss(CHOSEN, REJECTED, CW, RW, W, none)
    q_bt = (math.log1p(math.exp(-1)) + math.log(2)) / 2
    assert parts["quality_bt_loss"].item() == pytest.approx(q_bt, abs=1e-6)
    with_q, _ = odin_loss(CHOSEN, REJECTED, CW, RW, W, OdinWeights(0.0, 0.0, 0.0, quality_bt=2.0))
    assert with_q.item() == pytest.approx(base.item() + 2 * q_bt, abs=1e-6)
    uneven = torch.tensor([[2.0, 0.0], [0.0, 0.5]])  # quality 2, 0; length 0, 0.5
    q_only = OdinWeights(0.0, 0.0, 0.0, quality_bt=1.0)
    right, _ = odin_loss(uneven, REJECTED, CW, RW, W, q_only)
    swapped, _ = odin_loss(uneven.flip(-1), REJECTED, CW, RW, W, q_only)
    bt_sum = (math.log1p(math.exp(-2)) + math.log1p(math.exp(-0.5))) / 2  # BT on the sums 2 and 0.5, both ways
    assert right.item() == pytest.approx(bt_sum + (math.log1p(math.exp(-2)) + math.log(2)) / 2, abs=1e-6)
    assert swapped.item() == pytest.approx(bt_sum + (math.log(2) + math.log1p(math.exp(-0.5))) / 2, abs=1e-6)
