"""ODIN loss terms and head choice on hand-worked numbers (rlcw.rm.odin)."""

import math

import pytest
import torch

from rlcw.errors import RlcwError
from rlcw.rm.odin import HEADS, OdinWeights, check_head, odin_loss, pearson, select_head

# Two pairs. Heads [quality, length]: chosen (1, 0) and (0, 1), rejected (0, 0) twice; words 10, 30 | 20, 20.
# Sums: chosen 1, 1; rejected 0, 0 -> BT = -log sigma(1) = log(1 + e^-1) = 0.313262.
# Over the 4 stories, words centred (-10, 10, 0, 0), norm sqrt(200); quality centred (.75, -.25, -.25, -.25),
# norm sqrt(.75): rho_q = -10 / sqrt(150) = -0.816497; the length head is the mirror: rho_l = +0.816497.
# Head weights (1, 2) and (3, -1): dot 3 - 2 = 1; norms sqrt(5), sqrt(10): cosine 1 / sqrt(50) = 0.141421.
CHOSEN = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
REJECTED = torch.zeros(2, 2)
CW, RW = torch.tensor([10.0, 30.0]), torch.tensor([20.0, 20.0])
W = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
BT, RHO, COS = math.log1p(math.exp(-1)), 10 / math.sqrt(150), 1 / math.sqrt(50)


def test_each_term_enters_with_its_own_weight_and_sign():
    loss, parts = odin_loss(CHOSEN, REJECTED, CW, RW, W, OdinWeights(length=2.0, decorrelation=3.0, orthogonality=0.5))
    assert parts["bt_loss"].item() == pytest.approx(BT, abs=1e-6)
    assert parts["rho_quality"].item() == pytest.approx(-RHO, abs=1e-6)
    assert parts["rho_length"].item() == pytest.approx(RHO, abs=1e-6)
    assert parts["head_dot"].item() == pytest.approx(1.0) and parts["head_cos"].item() == pytest.approx(COS)
    # BT - 2 rho_l + 3 |rho_q| + 0.5 |cos| = 0.313262 - 1.632993 + 2.449490 + 0.070711
    assert loss.item() == pytest.approx(BT - 2 * RHO + 3 * RHO + 0.5 * COS, abs=1e-5)


def test_orthogonality_is_normalised_so_shrinking_the_heads_cannot_satisfy_it():
    heads = OdinWeights(length=0.0, decorrelation=0.0, orthogonality=1.0)
    full, _ = odin_loss(CHOSEN, REJECTED, CW, RW, W, heads)
    shrunk, _ = odin_loss(CHOSEN, REJECTED, CW, RW, W * 1e-3, heads)
    assert full.item() == pytest.approx(BT + COS, abs=1e-6) and shrunk.item() == pytest.approx(full.item(), abs=1e-6)
    w = W.clone().requires_grad_(True)
    odin_loss(CHOSEN, REJECTED, CW, RW, w, heads)[0].backward()
    assert abs(float((w.grad * w).sum())) < 1e-6  # scale-free: no gradient along the weights' own direction


def test_correlations_read_the_window_of_earlier_stories_without_their_gradient():
    import numpy as np

    past_scores = torch.tensor([[0.5, 2.0], [-1.0, 0.0], [2.0, 1.0]], requires_grad=True)
    past_words = torch.tensor([40.0, 5.0, 25.0])
    chosen = CHOSEN.clone().requires_grad_(True)
    _, parts = odin_loss(chosen, REJECTED, CW, RW, W, OdinWeights(), past=(past_scores, past_words))
    every = torch.cat([CHOSEN, REJECTED, past_scores.detach()]).numpy()
    words = np.concatenate([CW.numpy(), RW.numpy(), past_words.numpy()])
    assert parts["rho_quality"].item() == pytest.approx(float(np.corrcoef(every[:, 0], words)[0, 1]), abs=1e-6)
    assert parts["rho_length"].item() == pytest.approx(float(np.corrcoef(every[:, 1], words)[0, 1]), abs=1e-6)
    parts["rho_length"].backward()
    assert chosen.grad is not None and past_scores.grad is None  # the window is read, not trained


def test_score_window_keeps_the_newest_stories():
    from rlcw.rm.odin import ScoreWindow

    win = ScoreWindow(3)
    assert win.past is None
    win.add(torch.tensor([[1.0, 1.0], [2.0, 2.0]]), torch.tensor([1.0, 2.0]))
    win.add(torch.tensor([[3.0, 3.0], [4.0, 4.0]]), torch.tensor([3.0, 4.0]))
    scores, words = win.past
    assert words.tolist() == [3.0, 4.0, 1.0] and scores[:, 0].tolist() == [3.0, 4.0, 1.0]
    off = ScoreWindow(0)
    off.add(torch.ones(2, 2), torch.ones(2))
    assert off.past is None


def _train_heads(weights: OdinWeights, steps: int = 300, seed: int = 0) -> dict[str, float]:
    """Two linear heads on synthetic story features [quality, length, noise x 6], trained with the ODIN loss in
    batches of 8 pairs on preferences that LENGTH drives (chosen = the higher quality + 2 x length z-score). Returns
    the trained quality head's Pearson with length and its accuracy on quality alone, on fresh stories."""
    g = torch.Generator().manual_seed(seed)

    def stories(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, z = torch.randn(n, generator=g), torch.randn(n, generator=g)
        feats = torch.cat([q[:, None], z[:, None], torch.randn(n, 6, generator=g)], dim=1)  # (n, 8)
        return feats, q, 40 + 10 * z  # words

    torch.manual_seed(seed)
    head = torch.nn.Linear(8, 2, bias=False)
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    from rlcw.rm.odin import ScoreWindow

    window = ScoreWindow(weights.window)
    for _ in range(steps):
        (fa, qa, wa), (fb, qb, wb) = stories(8), stories(8)
        a_wins = (qa + 2 * (wa - 40) / 10) > (qb + 2 * (wb - 40) / 10)
        fc, fr = torch.where(a_wins[:, None], fa, fb), torch.where(a_wins[:, None], fb, fa)
        wc, wr = torch.where(a_wins, wa, wb), torch.where(a_wins, wb, wa)
        c, r = head(fc), head(fr)
        loss, _ = odin_loss(c, r, wc, wr, head.weight, weights, past=window.past)
        opt.zero_grad(), loss.backward(), opt.step()
        window.add(torch.cat([c, r]), torch.cat([wc, wr]))
    feats, q, words = stories(2000)
    with torch.no_grad():
        out = head(feats)
    half = len(q) // 2
    acc = ((out[:half, 0] > out[half:, 0]) == (q[:half] > q[half:])).float().mean().item()
    return {"rho_q": pearson(out[:, 0], words).item(), "rho_l": pearson(out[:, 1], words).item(), "acc": acc}


def test_trained_on_length_driven_preferences_the_quality_head_ends_free_of_length():
    full = _train_heads(OdinWeights())
    assert abs(full["rho_q"]) < 0.15 and full["rho_l"] > 0.8 and full["acc"] > 0.7
    no_decorrelation = _train_heads(OdinWeights(decorrelation=0.0))
    assert abs(no_decorrelation["rho_q"]) > 0.3  # without the term, the quality head carries length too
    no_orthogonality = _train_heads(OdinWeights(orthogonality=0.0))
    assert abs(no_orthogonality["rho_q"]) > 0.3 and no_orthogonality["acc"] < full["acc"] - 0.05
    no_length = _train_heads(OdinWeights(length=0.0, decorrelation=0.0))
    assert no_length["rho_l"] < full["rho_l"] - 0.1  # without the tie, the length head is not length


def test_swapping_the_heads_changes_the_loss():
    """The length term rewards the length head's correlation, not the quality head's."""
    right, _ = odin_loss(CHOSEN, REJECTED, CW, RW, W, OdinWeights(length=2.0, decorrelation=3.0))
    swapped, _ = odin_loss(CHOSEN.flip(-1), REJECTED, CW, RW, W, OdinWeights(length=2.0, decorrelation=3.0))
    assert swapped.item() == pytest.approx(BT + 2 * RHO + 3 * RHO + COS, abs=1e-5) != pytest.approx(right.item())


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
