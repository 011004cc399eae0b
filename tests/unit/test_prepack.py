"""rlcw.prepack: a Linear whose weight is packed once for oneDNN gives F.linear's product (bf16 exactly)."""

from __future__ import annotations

import pytest
import torch

from rlcw.prepack import PackedLinear, can_prepack, prepack_linears

pytestmark = pytest.mark.skipif(not can_prepack(torch.nn.Linear(2, 2)), reason="no oneDNN in this torch build")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_matches_f_linear(dtype, bias):
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("no oneDNN bf16 on this CPU")
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 80, bias=bias).to(dtype)
    packed = PackedLinear(lin)
    assert packed.weight is lin.weight  # shared, not copied
    for x in (torch.randn(3, 7, 48), torch.randn(16, 48), torch.randn(5, 9, 48)[:, -1]):  # 3-D, 2-D, strided
        x = x.to(dtype)
        with torch.inference_mode():
            got, want = packed(x), lin(x)
        assert got.shape == want.shape and got.dtype == dtype
        if dtype == torch.bfloat16:
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_repack_follows_the_weight_and_nothing_before():
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 16, bias=False)
    packed = PackedLinear(lin)
    x = torch.randn(4, 32)
    before = packed(x)
    with torch.no_grad():
        lin.weight.mul_(2.0)
    torch.testing.assert_close(packed(x), before)  # the packed copy is a snapshot...
    packed.repack()
    torch.testing.assert_close(packed(x), 2 * before, atol=1e-5, rtol=1e-5)  # ...until repacked


def test_prepack_linears_replaces_every_plain_linear_in_place():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(12, 4)))
    x = torch.randn(5, 8)
    want = model(x)
    packed = prepack_linears(model)
    assert len(packed) == 2 and not any(type(m) is torch.nn.Linear for m in model.modules())
    with torch.inference_mode():
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)


def test_refuses_what_it_cannot_pack():
    assert not can_prepack(torch.nn.ReLU())  # no parameters
    assert not can_prepack(torch.nn.Linear(2, 2).half())
    with pytest.raises(ValueError, match="oneDNN"):
        prepack_linears(torch.nn.Linear(2, 2).half())


class _Attention(torch.nn.Module):
    """q/k/v and o as in Llama's attention (no softmax: the products are what is checked)."""

    def __init__(self, bias: bool):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (torch.nn.Linear(16, n, bias=bias) for n in (16, 8, 8))
        self.o_proj = torch.nn.Linear(32, 16, bias=bias)

    def forward(self, x):
        return self.o_proj(torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], -1))


@pytest.mark.parametrize("bias", [False, True])
def test_fused_projections_match_and_follow_repack(bias):
    from rlcw.prepack import fuse_projections

    torch.manual_seed(0)
    model = _Attention(bias)
    x = torch.randn(3, 5, 16)
    want = model(x)
    packed = prepack_linears(model)
    groups = fuse_projections(model)
    assert len(groups) == 1 and groups[0].sizes == [16, 8, 8]
    assert model.o_proj.fused is None and model.q_proj.packed is None  # the group computes q, k and v
    with torch.inference_mode():
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)
        y = torch.randn(2, 16)  # a new input object is computed afresh, not served from the last one
        want_k = torch.nn.functional.linear(y, model.k_proj.weight, model.k_proj.bias)
        torch.testing.assert_close(model.k_proj(y), want_k, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        model.v_proj.weight.mul_(3.0)
    for layer in [*packed, *groups]:
        layer.repack()
    with torch.inference_mode():
        alone = model.v_proj(x)  # called alone (no q first): still its own slice of a fresh product
        got = model.q_proj(x), model.k_proj(x), model.v_proj(x)
    for g, lin in zip(got, (model.q_proj, model.k_proj, model.v_proj), strict=True):
        torch.testing.assert_close(g, torch.nn.functional.linear(x, lin.weight, lin.bias), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone, got[2])
