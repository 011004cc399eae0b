"""Token log-probs (and entropies) through the LM head without keeping the (N, V) logits: pure torch, for CPUs.

    logp, entropy = token_logprobs(hidden, weight, targets, temperature, entropy=True)   # (N,), (N,)

equals `torch.log_softmax(hidden @ weight.T / temperature, -1).gather(-1, targets[:, None])[:, 0]` and the entropy
of that softmax, values and gradients, up to float rounding (tests/unit/test_fused_logprobs.py).

Rows go through the head in chunks of `chunk`: each chunk's logits and log-softmax (chunk, V) live in two reused
buffers, and the forward keeps per row only what the backward needs, so the backward recomputes no logits in the
common case. The gradient of log p(target) with respect to the logits is (onehot - p) / T, so with respect to the
hidden state it is (W[target] - p @ W) / T: the forward keeps the expected output embedding `p @ W` (N, H), a
matmul the backward would otherwise run on recomputed logits. Per chunk the forward makes these passes over the
(chunk, V) block: the logits' matmul, one fused log-softmax, then a few rows at a time (in the core's L2 cache) the
exp into the logits' buffer and the entropy's dot product of p with log p, then the `p @ W` matmul. (The entropy as
logsumexp - (h / T) . (p @ W) would save the dot product, but where the logsumexp is large and the entropy small
that difference cancels far beyond the float rounding of the direct sum; a test holds the entropy to the plain
path's rounding there.)

Two cases fall back to recomputing each chunk's logits once in the backward, from the saved per-row logsumexp:
a trainable `weight` (full fine-tuning, the head tied or not: its gradient needs the whole (N, V) softmax) and a
gradient through the entropy (TRL's entropy bonus, `entropy_coef` != 0; its metric and high-entropy mask read it
without gradient). Nothing (N, V) is saved in either case.

The head runs in fp32 with autocast off, whatever the inputs' dtype; the gradients come back in the inputs' dtypes.
"""

from __future__ import annotations

import torch

CHUNK = 256  # rows per chunk: two (CHUNK, V) fp32 buffers; fewer rows make the head's matmuls slower on CPU
BLOCK_BYTES = 2**20  # the exp and the entropy's dot product run on blocks of rows this size, which stay in L2


def token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    entropy: bool = False,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(hidden @ weight.T / temperature)[targets] per row, (N,) fp32, and the entropy of that softmax
    (N,) fp32 if `entropy`, else None. `hidden` (N, H), `weight` (V, H) (the LM head, no bias), `targets` (N,)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    # the forward keeps p @ W only when the backward can use it: a gradient wanted for hidden and none for weight
    keep_pw = torch.is_grad_enabled() and hidden.requires_grad and not weight.requires_grad
    logp, ent = _TokenLogprobs.apply(hidden, weight, targets, float(temperature), entropy, keep_pw, chunk)
    return logp, ent


def _chunks(n: int, chunk: int):
    return ((s, min(s + chunk, n)) for s in range(0, n, chunk))


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, want_entropy, keep_pw, chunk):
        ctx.set_materialize_grads(False)  # an entropy used only as a metric sends no gradient
        inv_t = 1.0 / temperature
        n, vocab = hidden.size(0), weight.size(0)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.float()
            logp = hidden.new_empty(n, dtype=torch.float32)
            lse = torch.empty_like(logp)  # (N,) logsumexp of each row's logits
            ent = torch.empty_like(logp) if want_entropy else None
            pw = hidden.new_empty(n, w.size(1), dtype=torch.float32) if keep_pw else None  # (N, H) p @ W
            rows = max(1, BLOCK_BYTES // (4 * vocab))  # (rows, V) fp32
            z_buf = hidden.new_empty(min(n, chunk), vocab, dtype=torch.float32)
            ls_buf = torch.empty_like(z_buf)
            for s, e in _chunks(n, chunk):
                hc = hidden[s:e].float() * inv_t  # (c, H): 1/T folded into the small side of the matmul
                t = targets[s:e, None]
                z = torch.mm(hc, w.t(), out=z_buf[: e - s])  # (c, V)
                zt = z.gather(1, t)[:, 0]
                ls = torch.ops.aten._log_softmax.out(z, -1, False, out=ls_buf[: e - s])  # (c, V)
                logp[s:e] = ls.gather(1, t)[:, 0]
                lse[s:e] = zt - logp[s:e]
                if not (keep_pw or want_entropy):
                    continue
                p = z_buf[: e - s]  # (c, V) softmax, over the logits no longer needed
                for b, f in _chunks(e - s, rows):  # exp and the entropy's dot while a few rows sit in L2
                    torch.exp(ls[b:f], out=p[b:f])
                    if want_entropy:
                        torch.linalg.vecdot(p[b:f], ls[b:f], out=ent[s + b : s + f])
                if want_entropy:
                    ent[s:e].neg_()
                if keep_pw:
                    torch.mm(p, w, out=pw[s:e])
        ctx.save_for_backward(hidden, weight, targets, lse, pw)
        ctx.inv_t, ctx.chunk = inv_t, chunk
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, targets, lse, pw = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[:2]
        if (g_logp is None and g_ent is None) or not (need_h or need_w):
            return None, None, None, None, None, None, None
        if pw is not None and g_ent is None and not need_w:
            # d log p_t / dh = (W[t] - p @ W) / T
            g = g_logp.float()[:, None] * ctx.inv_t
            grad_h = g * (weight[targets].float() - pw)
            return grad_h.to(hidden.dtype), None, None, None, None, None, None
        grad_h, grad_w = _recomputed_grads(hidden, weight, targets, lse, g_logp, g_ent, ctx.inv_t, ctx.chunk)
        return (
            grad_h.to(hidden.dtype) if need_h else None,
            grad_w.to(weight.dtype) if need_w else None,
            None,
            None,
            None,
            None,
            None,
        )


def _recomputed_grads(hidden, weight, targets, lse, g_logp, g_ent, inv_t, chunk):
    """(grad hidden (N, H), grad weight (V, H)) from each chunk's logits recomputed once. With z the logits and
    p = softmax(z): d log p_t / dz = onehot(t) - p, d entropy / dz = -p * (log p + entropy)."""
    n, vocab = hidden.size(0), weight.size(0)
    with torch.autocast(hidden.device.type, enabled=False):
        w = weight.float()
        grad_h = torch.zeros(n, w.size(1), dtype=torch.float32, device=hidden.device)
        grad_w = torch.zeros_like(w) if weight.requires_grad else None
        buf = hidden.new_empty(min(n, chunk), vocab, dtype=torch.float32)
        for s, e in _chunks(n, chunk):
            hc = hidden[s:e].float() * inv_t  # (c, H)
            logp_v = torch.mm(hc, w.t(), out=buf[: e - s]).sub_(lse[s:e, None])  # (c, V) log p
            p = logp_v.exp()  # (c, V)
            if g_ent is None:
                coef = g_logp[s:e, None].float()  # (c, 1)
            else:  # g_logp * 1 + g_ent * (log p + entropy), per vocabulary entry
                ent = -torch.linalg.vecdot(p, logp_v)  # (c,)
                coef = logp_v.add_(ent[:, None]).mul_(g_ent[s:e, None].float())
                if g_logp is not None:
                    coef.add_(g_logp[s:e, None].float())
            g = p.mul_(coef).neg_()  # (c, V) gradient of the loss wrt the logits
            if g_logp is not None:
                g.scatter_add_(1, targets[s:e, None], g_logp[s:e, None].float())
            grad_h[s:e] = torch.mm(g, w).mul_(inv_t)
            if grad_w is not None:
                grad_w.addmm_(g.t(), hc)  # z = hc @ W.T, so dz/dW = hc (already divided by T)
    return grad_h, grad_w
