"""Linear layers whose weights are packed once for oneDNN: for sampling copies on CPU.

    from rlcw.prepack import prepack_linears, can_prepack
    packed = prepack_linears(sampling_copy)      # every nn.Linear becomes a PackedLinear, in place
    ...                                          # after the copy's weights change:
    for layer in packed: layer.repack()

On CPU `torch.nn.functional.linear` hands oneDNN (bf16) or MKL (fp32) the weight in its plain (out, in) layout
on every call. Packed once into oneDNN's blocked layout with `torch.ops.mkldnn._reorder_linear_weight` (what
torch.compile's freezing pass does for CPU linears) and run with `torch.ops.mkldnn._linear_pointwise`, the same
product costs less at a decode step's few rows (`scripts/bench_rollout.py`, samplers named `... packed`; figures in
docs/results/speed.md; at the loss's and the reward's ~1600 rows, the loss's and the reward's sizes, fp32
matmuls already run at that CPU's peak, so this is for sampling). The results equal `F.linear`'s in bf16 and
differ by float rounding in fp32 (another kernel), so a seeded fp32 sampler's stories may differ.

Inference only: the packed copy is not differentiable and does not follow the source weight until `repack()`.
"""

from __future__ import annotations

import torch


def can_prepack(model) -> bool:
    """True when `model` lives on the CPU in fp32 or bf16 and this torch build runs oneDNN linears for it."""
    try:
        param = next(model.parameters())
    except StopIteration:
        return False
    if param.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if param.dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return param.dtype == torch.float32


class PackedLinear(torch.nn.Module):
    """`y = x W^T + b` from a packed copy of `linear.weight` (which stays this module's `weight`, shared)."""

    def __init__(self, linear: torch.nn.Linear, batch_hint: int = 16):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # the source: whoever refreshes the copy writes here, then calls repack()
        self.bias = linear.bias
        self.batch_hint = batch_hint
        self.packed: torch.Tensor | None = None
        self.fused: FusedProjections | None = None  # set by fuse_projections: the group computes this layer
        self.fused_index = 0
        self.repack()

    @torch.no_grad()
    def repack(self) -> None:
        """Pack the current weight (a fused layer's group repacks instead: its own product is never used)."""
        if self.fused is None:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), self.batch_hint)

    def sources(self) -> list[torch.Tensor]:
        """The tensors its packed product is made from (none once a fused group computes it)."""
        return [] if self.fused is not None else [t for t in (self.weight, self.bias) if t is not None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused is not None:
            return self.fused.part(x, self.fused_index)
        bias = None if self.bias is None else self.bias.detach()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed={self.weight.dtype}"


class FusedProjections:
    """Sibling projections of one input (attention's q/k/v, the MLP's gate/up) as one packed product: the first
    member called with an input computes all of them, the others return their slice of it (same input object)."""

    def __init__(self, members: list[PackedLinear]):
        self.members = members
        self.sizes = [m.out_features for m in members]
        self.packed: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self._input, self._parts = None, ()
        for i, m in enumerate(members):
            m.fused, m.fused_index, m.packed = self, i, None  # the member's own packed copy is not needed

    @torch.no_grad()
    def repack(self) -> None:
        m0 = self.members[0]
        weight = torch.cat([m.weight.detach() for m in self.members])
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, m0.batch_hint)
        biases = [m.bias for m in self.members]
        self.bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        self._input, self._parts = None, ()

    def sources(self) -> list[torch.Tensor]:
        return [t for m in self.members for t in (m.weight, m.bias) if t is not None]

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if self._input is not x:
            out = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
            self._input, self._parts = x, out.split(self.sizes, -1)
        part = self._parts[index]
        if index == len(self.members) - 1:  # the last member: let go of the input and the product
            self._input, self._parts = None, ()
        return part


FUSABLE = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # Llama-family names (SmolLM2, Qwen, Mistral)


def fuse_projections(model: torch.nn.Module, groups=FUSABLE) -> list[FusedProjections]:
    """Join each module's PackedLinear children named in one of `groups` (same input size, all with or all
    without bias) into one FusedProjections; returns them, to `repack()` after the weights change."""
    fused = []
    for module in model.modules():
        for names in groups:
            members = [getattr(module, n, None) for n in names]
            if not all(isinstance(m, PackedLinear) for m in members):
                continue
            if len({m.in_features for m in members}) > 1 or len({m.bias is None for m in members}) > 1:
                continue
            group = FusedProjections(members)
            group.repack()
            fused.append(group)
    return fused


def prepack_linears(model: torch.nn.Module, batch_hint: int = 16) -> list[PackedLinear]:
    """Replace every `nn.Linear` of `model` (a sampling copy: changed in place) by a PackedLinear sharing its
    weight; returns them, to `repack()` after the weights change. Raises ValueError where `can_prepack` is False."""
    if not can_prepack(model):
        raise ValueError("prepacked linears need a CPU model in fp32 or bf16 and a torch build with oneDNN")
    packed = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                layer = PackedLinear(child, batch_hint)
                setattr(parent, name, layer)
                packed.append(layer)
    return packed
