"""The joint ensemble trainer's pure parts (rlcw.rm.ensemble_trainer, rlcw.recipes.rm_ensemble): the
weighted BT loss on hand-worked numbers, bootstrap counts as weights, the shared data order, the joint switch."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from rlcw.errors import RlcwError
from rlcw.recipes.rm_ensemble import bootstrap_counts, bootstrap_indices, bootstrap_pairs, use_joint
from rlcw.rm.ensemble_trainer import batch_indices, weighted_bt_loss


def _nll(d: float) -> float:
    return math.log1p(math.exp(-d))  # -log sigmoid(d)


def test_weighted_bt_loss_on_a_three_pair_batch_with_counts_0_1_2():
    chosen = torch.tensor([1.0, 0.0, 2.0], requires_grad=True)
    rejected = torch.tensor([0.0, 1.0, 0.0])
    w = torch.tensor([0.0, 1.0, 2.0])
    # differences 1, -1, 2: losses 0.31326, 1.31326, 0.12693; (0 * 0.31326 + 1.31326 + 2 * 0.12693) / 3
    loss = weighted_bt_loss(chosen, rejected, w)
    assert loss.item() == pytest.approx(0.5223726, abs=1e-6)
    assert loss.item() == pytest.approx((_nll(-1) + 2 * _nll(2)) / 3, abs=1e-7)
    loss.backward()
    assert chosen.grad[0].item() == 0.0  # a pair drawn 0 times gives the member no gradient
    # d/dc of w * -log sigmoid(c - r) / B = -w * sigmoid(-(c - r)) / B: drawn twice counts double
    assert chosen.grad[2].item() == pytest.approx(-2 * torch.sigmoid(torch.tensor(-2.0)).item() / 3, abs=1e-7)
    assert chosen.grad[1].item() == pytest.approx(-torch.sigmoid(torch.tensor(1.0)).item() / 3, abs=1e-7)


def test_weights_of_one_are_trls_mean_loss_and_margin_and_centering_are_weighted():
    c, r = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 1.0, 0.0])
    ones = torch.ones(3)
    assert weighted_bt_loss(c, r, ones).item() == pytest.approx(-torch.nn.functional.logsigmoid(c - r).mean().item())
    w = torch.tensor([0.0, 1.0, 2.0])
    margin = torch.tensor([0.0, 0.0, 1.0])  # the third pair's difference drops from 2 to 1
    assert weighted_bt_loss(c, r, w, margin).item() == pytest.approx((_nll(-1) + 2 * _nll(1)) / 3, abs=1e-7)
    # centering: 0.1 * (0 * 1 + 1 * 1 + 2 * 4) / 3 = 0.3 on top
    centred = weighted_bt_loss(c, r, w, center_coef=0.1).item()
    assert centred == pytest.approx(0.5223726 + 0.3, abs=1e-6)


def test_bootstrap_counts_are_the_sequential_resample_counted():
    pairs = [{"i": i} for i in range(50)]
    for seed in (0, 1, 7):
        counts = bootstrap_counts(50, seed)
        drawn = Counter(p["i"] for p in bootstrap_pairs(pairs, seed))  # what the sequential path trains on
        assert counts == [drawn[i] for i in range(50)]
        assert sum(counts) == 50 and 0 in counts and max(counts) >= 2
    assert bootstrap_counts(50, 0) != bootstrap_counts(50, 1)
    assert bootstrap_indices(50, 3) == bootstrap_indices(50, 3)
    # about 1/e of the pairs are left out of a resample
    zeros = sum(c == 0 for s in range(20) for c in bootstrap_counts(200, s)) / (20 * 200)
    assert zeros == pytest.approx(math.exp(-1), abs=0.03)


def test_batch_order_covers_each_epoch_once_and_is_a_function_of_its_arguments():
    n, b = 10, 4  # 3 micro-batches per epoch, the last one short
    epoch0 = [batch_indices(n, b, 0, m) for m in range(3)]
    assert [len(x) for x in epoch0] == [4, 4, 2]
    assert sorted(i for x in epoch0 for i in x) == list(range(n))
    epoch1 = [batch_indices(n, b, 0, m) for m in range(3, 6)]
    assert sorted(i for x in epoch1 for i in x) == list(range(n)) and epoch1 != epoch0
    assert batch_indices(n, b, 0, 4) == epoch1[1]  # recomputed, not remembered: resume replays the order
    assert batch_indices(n, b, 1, 0) != epoch0[0]


def test_use_joint_modes():
    assert use_joint("auto", 22, False) and use_joint("true", 22, False)
    assert not use_joint("auto", 0, False)  # whole members stay sequential
    assert not use_joint("auto", 22, True)  # DeepSpeed / torchrun: the sequential trainer's path
    assert not use_joint("false", 22, False) and not use_joint(False, 22, False)
    with pytest.raises(RlcwError, match="rm.ensemble.joint=true needs members that share a trunk"):
        use_joint("true", 0, False)
    with pytest.raises(RlcwError, match="one process"):
        use_joint(True, 22, True)
