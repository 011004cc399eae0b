"""Reward-model ensembles: k Bradley-Terry members in ONE RM folder, loaded like a single RM.

`rlcw train-rm rm.ensemble.size=k` writes the folder; `rlcw.rm.scoring.load_rm(folder)` (and so every reward spec of
`type: bt`, `serve-rm`, `eval-rm`, best-of-n, grpo and ppo) scores with the ensemble's aggregate
(`rlcw.rm.aggregate`: mean | wco | uwo) when the folder holds a manifest.

Folder layout (`<run>/model`):

    rlcw_rm.json          the render spec, as for any BT RM
    rlcw_ensemble.json    the manifest: members (file, seed, offset), shared_layers, aggregate, uwo_lambda
    config.json, model.safetensors, tokenizer files
                          member 0 whole: the trunk every member shares, and what a tool that reads ONE
                          model sees (e.g. PPO's value model starts from member 0)
    members/<j>.safetensors
                          member j's own tensors: decoder layers >= shared_layers, the final norm and the
                          score head (every tensor when shared_layers is 0)

Scoring cost: members that adapt only the top layers (LoRA on `lora.top_layers`) leave the embeddings
and the lower `shared_layers` decoder layers bit-identical, so a batch runs that trunk ONCE and branches
into each member's top layers + norm + head. Full fine-tuned members (shared_layers 0) are whole models,
scored one after another (k forwards).

Offsets: a BT model is defined up to a constant, so each member's mean score over a sample of its
training stories (`offset`) is subtracted before aggregating; otherwise `wco` would follow whichever
member happens to sit lowest and `uwo`'s variance would mix in the members' arbitrary shifts.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rlcw.errors import RlcwError, location
from rlcw.io import atomic_write_json, read_json
from rlcw.rm.aggregate import AGGREGATES, aggregate

MANIFEST_FILE = "rlcw_ensemble.json"
MEMBERS_DIR = "members"


@dataclass
class Member:
    file: str  # relative to the RM folder
    seed: int = 0
    offset: float = 0.0  # subtracted from the member's raw score (its mean on training stories)


@dataclass
class EnsembleManifest:
    members: list[Member]
    shared_layers: int  # decoder layers (and the embeddings) shared by every member; 0 = whole members
    aggregate: str = "mean"  # mean | wco | uwo
    uwo_lambda: float = 0.5
    bootstrap: bool = True  # members trained on bootstrap resamples of the pairs (provenance only)


def is_ensemble(rm_dir: str | Path) -> bool:
    return (Path(rm_dir) / MANIFEST_FILE).is_file()


def _bad(path: Path, key: str, message: str, hint: str):
    return RlcwError(message, where=location(path, None, key), hint=hint)


def _number(raw: dict, key: str, path: Path, default=None, integer: bool = False, minimum: float | None = None):
    v = raw.get(key, default)
    ok = isinstance(v, int) if integer else isinstance(v, (int, float)) and math.isfinite(v)
    if isinstance(v, bool) or not ok or (minimum is not None and v < minimum):
        kind = "an integer" if integer else "a finite number"
        bound = f" >= {minimum}" if minimum is not None else ""
        raise _bad(path, key, f"expected {kind}{bound}, got {v!r}", f"fix '{key}' in {path.name} or re-run train-rm")
    return v


def load_manifest(rm_dir: str | Path) -> EnsembleManifest:
    """The folder's manifest, checked: every error names the file and the key to fix."""
    rm_dir = Path(rm_dir)
    path = rm_dir / MANIFEST_FILE
    if not path.is_file():
        raise RlcwError(f"not an RM ensemble: {MANIFEST_FILE} is missing", where=str(rm_dir))
    raw = read_json(path, MANIFEST_FILE, hint="re-save with `rlcw train-rm`")
    if not isinstance(raw, dict):
        raise RlcwError("the manifest must be a JSON object", where=str(path))
    members = raw.get("members")
    if not isinstance(members, list) or not members:
        raise _bad(path, "members", "expected a non-empty list of members", "re-save with `rlcw train-rm`")
    out = []
    for j, m in enumerate(members):
        key = f"members[{j}]"
        if not isinstance(m, dict) or not isinstance(m.get("file"), str):
            raise _bad(path, f"{key}.file", "each member needs a 'file' (a path inside the RM folder)", "re-save")
        if not (rm_dir / m["file"]).is_file():
            raise _bad(path, f"{key}.file", f"member file {m['file']} does not exist", "copy the whole RM folder")
        seed = _number(m, "seed", path, 0, integer=True)
        offset = _number(m, "offset", path, 0.0)
        out.append(Member(m["file"], seed, float(offset)))
    agg = raw.get("aggregate", "mean")
    if agg not in AGGREGATES:
        raise _bad(path, "aggregate", f"unknown aggregate {agg!r}", f"use one of {', '.join(AGGREGATES)}")
    return EnsembleManifest(
        members=out,
        shared_layers=_number(raw, "shared_layers", path, None, integer=True, minimum=0),
        aggregate=agg,
        uwo_lambda=float(_number(raw, "uwo_lambda", path, 0.5, minimum=0)),
        bootstrap=bool(raw.get("bootstrap", True)),
    )


def save_manifest(manifest: EnsembleManifest, rm_dir: str | Path) -> Path:
    return atomic_write_json(Path(rm_dir) / MANIFEST_FILE, dataclasses.asdict(manifest))


# --- member tensors ---


def layer_index(name: str, prefix: str) -> int | None:
    """`model.layers.12.mlp.up_proj.weight` -> 12 (prefix `model`); None for a tensor outside the layers."""
    head = f"{prefix}.layers."
    if not name.startswith(head):
        return None
    return int(name[len(head) :].split(".", 1)[0])


def is_trunk_key(name: str, prefix: str, shared_layers: int) -> bool:
    """True for the tensors every member shares: the embeddings (and the rest of the backbone outside its
    layers and final norm) and decoder layers below `shared_layers`. Nothing is shared when it is 0."""
    if shared_layers == 0 or not name.startswith(prefix + "."):
        return False
    i = layer_index(name, prefix)
    return i < shared_layers if i is not None else not name.startswith(f"{prefix}.norm.")


def member_tensors(state: dict[str, torch.Tensor], prefix: str, shared_layers: int) -> dict[str, torch.Tensor]:
    """A member's own tensors (what `members/<j>.safetensors` holds), contiguous on the CPU."""
    return {
        k: v.detach().to("cpu").contiguous() for k, v in state.items() if not is_trunk_key(k, prefix, shared_layers)
    }


def trunk_digest(state: dict[str, torch.Tensor], prefix: str, shared_layers: int) -> str:
    """A hash of the trunk tensors: members that share a trunk have the same digest."""
    import hashlib

    h = hashlib.sha256()
    for k in sorted(state):
        if is_trunk_key(k, prefix, shared_layers):
            h.update(k.encode())
            h.update(state[k].detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# --- scoring ---


def _view(backbone: nn.Module, layers: list[nn.Module], norm: nn.Module, start: int) -> nn.Module:
    """The backbone's own forward over `layers` only, ending in `norm`; shares every tensor with `backbone`.

    A shallow copy with its own submodule table and a config whose num_hidden_layers (and per-layer types)
    match, so the model's code builds masks and positions exactly as in a full forward."""
    view = copy.copy(backbone)
    view._modules = dict(backbone._modules)
    view.layers = nn.ModuleList(layers)
    view.norm = norm
    view.config = copy.copy(backbone.config)
    view.config.num_hidden_layers = len(layers)
    if isinstance(getattr(view.config, "layer_types", None), list):
        view.config.layer_types = view.config.layer_types[start : start + len(layers)]
    return view


@torch.no_grad()
def passes_hidden_through(backbone: nn.Module) -> bool:
    """Does the backbone's forward hand `inputs_embeds` to its first layer unchanged? A shared trunk feeds its hidden
    states to each member's top layers as `inputs_embeds`; a family that rescales or adds to them in its forward
    (Granite multiplies them by its embedding_multiplier; absolute position embeddings add) would score wrong. Checked on the
    model itself: its forward over no layers and no final norm must return the input exactly."""
    view = _view(backbone, [], nn.Identity(), 0)
    width = backbone.config.hidden_size
    param = next(backbone.parameters())
    x = torch.randn(1, 3, width, generator=torch.Generator().manual_seed(0)).to(param.device, param.dtype)
    try:
        out = view(
            inputs_embeds=x, attention_mask=torch.ones(1, 3, dtype=torch.long, device=x.device), use_cache=False
        )
    except Exception:  # a forward that cannot run over no layers is not one a shared trunk can use either
        return False
    return torch.equal(out.last_hidden_state, x)


def average_members(members: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """WARM's weight average: every tensor the members hold, averaged elementwise in float64 and cast back to its
    dtype. Every member must hold the same tensor names and shapes (one `rlcw train-rm` run's members)."""
    if not members:
        raise ValueError("no member to average")
    names = set(members[0])
    for j, m in enumerate(members[1:], start=1):
        if set(m) != names or any(m[k].shape != members[0][k].shape for k in names):
            raise ValueError(f"member {j} holds other tensors than member 0: they are not one run's members")
    return {k: (sum(m[k].double() for m in members) / len(members)).to(members[0][k].dtype) for k in sorted(names)}


def last_token_scores(logits: torch.Tensor, input_ids: torch.Tensor, pad_id: int | None) -> torch.Tensor:
    """(B, T, 1) per-token scores -> (B,) at the rightmost non-pad token (transformers' sequence-classification rule)."""
    if pad_id is None:
        return logits[:, -1, 0]
    non_pad = (input_ids != pad_id).to(torch.int32)
    last = (torch.arange(input_ids.shape[-1], device=input_ids.device, dtype=torch.int32) * non_pad).argmax(-1)
    return logits[torch.arange(input_ids.shape[0], device=logits.device), last.to(logits.device), 0]


class _Branch(nn.Module):
    """One member's top: decoder layers >= shared_layers, final norm, score head."""

    def __init__(self, layers: nn.ModuleList, norm: nn.Module, score: nn.Module):
        super().__init__()
        self.layers, self.norm, self.score = layers, norm, score


class EnsembleRM(nn.Module):
    """k members from an ensemble folder; forward(input_ids, attention_mask) -> (B, k) centred member scores."""

    def __init__(self, rm_dir: str | Path, dtype: torch.dtype | None = None):
        super().__init__()
        from safetensors.torch import load_file
        from transformers import AutoModelForSequenceClassification

        self.rm_dir = Path(rm_dir)
        self.manifest = load_manifest(self.rm_dir)
        self.full = AutoModelForSequenceClassification.from_pretrained(
            self.rm_dir, **({"dtype": dtype} if dtype else {})
        )
        self.prefix = self.full.base_model_prefix
        self.pad_id = self.full.config.pad_token_id
        s = self.manifest.shared_layers
        backbone = getattr(self.full, self.prefix)
        if s and not (hasattr(backbone, "layers") and hasattr(backbone, "norm") and hasattr(self.full, "score")):
            raise RlcwError(
                f"a shared-trunk ensemble needs a decoder with .layers, .norm and a .score head ({type(self.full).__name__})",
                where=str(self.rm_dir / MANIFEST_FILE),
                hint="Llama/Qwen/Mistral-style RMs; or train whole members (shared_layers 0)",
            )
        if s and s >= len(backbone.layers):
            raise _bad(
                self.rm_dir / MANIFEST_FILE,
                "shared_layers",
                f"{s} >= the model's {len(backbone.layers)} layers",
                "re-save",
            )
        # a family whose forward changes inputs_embeds cannot take a trunk's hidden states: whole members instead
        self.whole = s == 0 or not passes_hidden_through(backbone)
        self.members = nn.ModuleList()
        for j, m in enumerate(self.manifest.members):
            tensors = load_file(str(self.rm_dir / m.file))
            self.members.append(self._member(tensors, s, self.rm_dir / MANIFEST_FILE, j))
        self.offsets = [m.offset for m in self.manifest.members]
        if s and not self.whole:
            self._trunk = _view(backbone, list(backbone.layers[:s]), nn.Identity(), 0)
            self._tops = [_view(backbone, list(b.layers), b.norm, s) for b in self.members]

    def _member(self, tensors: dict, s: int, where: Path, j: int) -> nn.Module:
        if self.whole:  # a whole model (a shared-trunk member's file holds its top: the trunk is the base's own)
            model = copy.deepcopy(self.full)
            missing, unexpected = model.load_state_dict(tensors, strict=False)
            missing = [k for k in missing if not is_trunk_key(k, self.prefix, s)]
        else:
            backbone = getattr(self.full, self.prefix)
            model = _Branch(
                copy.deepcopy(backbone.layers[s:]), copy.deepcopy(backbone.norm), copy.deepcopy(self.full.score)
            )
            renamed = {}
            for k, v in tensors.items():
                i = layer_index(k, self.prefix)
                norm = f"{self.prefix}.norm."
                if i is not None:  # model.layers.22.mlp.up_proj.weight -> layers.<22 - s>.mlp.up_proj.weight
                    k = f"layers.{i - s}." + k[len(f"{self.prefix}.layers.{i}.") :]
                elif k.startswith(norm):
                    k = "norm." + k[len(norm) :]
                renamed[k] = v
            missing, unexpected = model.load_state_dict(renamed, strict=False)
        missing = [k for k in missing if "rotary_emb" not in k]  # a buffer computed at init, never saved
        if missing or unexpected:
            raise _bad(
                where,
                f"members[{j}].file",
                f"member tensors do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})",
                "the member file and the folder's model must come from the same `rlcw train-rm` run",
            )
        return model

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def device(self) -> torch.device:
        return next(self.full.parameters()).device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.whole:  # whole members, one after another
            cols = [
                m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, 0]
                for m in self.members
            ]
        else:
            hidden = self._trunk(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state  # (B, T, H)
            cols = []
            for top, branch in zip(self._tops, self.members, strict=True):
                h = top(
                    inputs_embeds=hidden, attention_mask=attention_mask, use_cache=False
                ).last_hidden_state  # (B, T, H)
                cols.append(last_token_scores(branch.score(h), input_ids, self.pad_id))
        offsets = torch.tensor(self.offsets, dtype=cols[0].dtype, device=cols[0].device)
        return torch.stack(cols, dim=-1) - offsets  # (B, k)


def aggregate_rows(rows: list[list[float]], how: str, lam: float) -> list[float]:
    """rows[i] = the k member scores of item i -> one aggregate score per item."""
    if not rows:
        return []
    members = [list(col) for col in zip(*rows, strict=True)]
    return aggregate(members, how, lam)
