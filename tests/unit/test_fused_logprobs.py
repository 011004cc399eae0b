"""rlcw.rl.fused_logprobs equals the plain log_softmax -> gather path and the softmax's entropy in fp32: values and
gradients wrt the hidden states (and the head's weight when it trains), for chunk sizes that do and do not divide
the rows, at a temperature != 1, with and without a gradient through the entropy."""

from __future__ import annotations

import pytest
import torch

from rlcw.rl import fused_logprobs
from rlcw.rl.fused_logprobs import token_logprobs

N, H, V, TEMP = 50, 24, 300, 0.7
RTOL, ATOL = 1e-5, 1e-6  # ATOL relative to the largest expected value


def data(weight_grad: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=g).requires_grad_()
    weight = (torch.randn(V, H, generator=g) * 0.6).requires_grad_(weight_grad)  # logits with std ~3
    targets = torch.randint(0, V, (N,), generator=g)
    a, b = torch.randn(N, generator=g), torch.randn(N, generator=g)  # loss weights per row
    return hidden, weight, targets, a, b


def plain(hidden, weight, targets, temperature):
    logits = hidden @ weight.T / temperature  # (N, V)
    logp_all = torch.log_softmax(logits, -1)
    return logp_all.gather(-1, targets[:, None])[:, 0], -(logp_all.exp() * logp_all).sum(-1)


def close(actual, expected, msg=""):
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL * expected.abs().max().item(), msg=msg)


@pytest.mark.parametrize("chunk", [7, 16, 50, 256])
@pytest.mark.parametrize("weight_grad", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_values_and_gradients_equal_the_plain_path(chunk, weight_grad, entropy_grad, monkeypatch):
    monkeypatch.setattr(fused_logprobs, "BLOCK_BYTES", 4 * V * 3)  # blocks of 3 rows: a chunk holds several
    hidden, weight, targets, a, b = data(weight_grad)
    ref_lp, ref_ent = plain(hidden, weight, targets, TEMP)
    lp, ent = token_logprobs(hidden, weight, targets, TEMP, entropy=True, chunk=chunk)
    close(lp, ref_lp, "log-probs")
    close(ent, ref_ent, "entropy")
    inputs = (hidden, weight) if weight_grad else (hidden,)
    ref_loss = (ref_lp * a).sum() + ((ref_ent * b).sum() if entropy_grad else 0)
    loss = (lp * a).sum() + ((ent * b).sum() if entropy_grad else 0)
    got, want = torch.autograd.grad(loss, inputs), torch.autograd.grad(ref_loss, inputs)
    for name, g, w in zip(("hidden", "weight"), got, want, strict=False):
        close(g, w, name)
    assert len(got) == len(inputs)


def test_log_probs_alone_and_without_gradient():
    hidden, weight, targets, a, _ = data(False)
    ref_lp, _ = plain(hidden, weight, targets, TEMP)
    lp, ent = token_logprobs(hidden, weight, targets, TEMP, chunk=16)
    assert ent is None
    close(lp, ref_lp)
    close(torch.autograd.grad((lp * a).sum(), hidden)[0], torch.autograd.grad((ref_lp * a).sum(), hidden)[0])
    with torch.no_grad():
        lp, ent = token_logprobs(hidden, weight, targets, TEMP, entropy=True, chunk=16)
    assert not lp.requires_grad and not ent.requires_grad
    close(lp, ref_lp.detach())


def test_errors_are_those_of_the_plain_fp32_path_at_large_logits():
    """Logits of a trained LM's size (logsumexp ~40, some rows nearly certain): against float64, the error of the
    log-probs and entropies is the plain fp32 path's own rounding, not a cancellation of large terms."""
    hidden, weight, targets, *_ = data(False)
    hidden = (hidden * 4).detach().requires_grad_()  # logits with std ~12
    ref_lp, ref_ent = plain(hidden.double(), weight.double(), targets, TEMP)
    fp32_lp, fp32_ent = plain(hidden, weight, targets, TEMP)
    lp, ent = token_logprobs(hidden, weight, targets, TEMP, entropy=True, chunk=16)
    assert ref_lp.min() < -20 and ref_ent.min() < 0.1  # large logits, peaked rows
    for got, fp32, ref in ((lp, fp32_lp, ref_lp), (ent, fp32_ent, ref_ent)):
        assert (got.double() - ref).abs().max() <= 3 * (fp32.double() - ref).abs().max() + 1e-6


def test_the_temperature_matters():
    """The comparison above has teeth: at T = 1 the same data give other log-probs."""
    hidden, weight, targets, *_ = data(False)
    lp_t, _ = token_logprobs(hidden, weight, targets, TEMP)
    lp_1, _ = token_logprobs(hidden, weight, targets, 1.0)
    assert (lp_t - lp_1).abs().max() > 0.1


def test_the_common_case_recomputes_no_logits(monkeypatch):
    """A frozen head and an entropy read without gradient (GRPO with LoRA): the backward uses the kept p @ W."""

    def fail(*args, **kwargs):
        raise AssertionError("recomputed the logits")

    hidden, weight, targets, a, _ = data(False)
    lp, ent = token_logprobs(hidden, weight, targets, TEMP, entropy=True, chunk=16)
    monkeypatch.setattr(fused_logprobs, "_recomputed_grads", fail)
    (lp * a).sum().backward()
    assert hidden.grad is not None and ent.requires_grad


def test_no_rows_and_a_bad_temperature():
    hidden, weight, targets, *_ = data(False)
    lp, ent = token_logprobs(hidden[:0], weight, targets[:0], TEMP, entropy=True)
    assert lp.shape == ent.shape == (0,)
    lp.sum().backward()
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(hidden, weight, targets, 0.0)
