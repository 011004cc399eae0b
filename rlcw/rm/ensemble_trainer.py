"""Joint training of Bradley-Terry ensemble members that share a frozen trunk (`rlcw train-rm rm.ensemble.joint`).

Members that adapt only the top layers (LoRA on layers >= shared_layers) leave the embeddings and the lower
layers frozen and identical, so each batch runs that trunk ONCE without grad and then, member by member, the
member's own top (its LoRA'd layers, the final norm, its score head) forward + backward on those hidden states.
Each member keeps its own optimizer and schedule; peak memory is the trunk's hidden states plus one member's
activations.

    members = [member_model(base, s, seed + j, peft_config) for j in range(k)]
    train_joint(base, members, s, rows, weights, JointSettings(...), checkpoints, log)

Per-pair weights: member j's loss on a batch of B pairs is sum_i w_ji * bt_i / B (`weighted_bt_loss`), with w_ji
the number of times pair i was drawn into member j's bootstrap; a pair drawn 0 times gives that member no
gradient, one drawn twice counts double. Over an epoch that is the gradient of the resampled list a member
would train on alone.

Checkpoints: `<checkpoints>/checkpoint-<step>/` (member_<j>.safetensors: the trainable tensors; optimizers.pt,
schedulers.pt, rng.pt; trainer_state.json written last) through `rlcw.io.atomic_folder`, so a killed run never
leaves one that looks complete. A resumed run replays the same data order (a function of seed and epoch) and
RNG, and equals an uninterrupted one.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlcw.io import atomic_folder, atomic_write_json
from rlcw.rm.ensemble import _view, last_token_scores
from rlcw.training_state import rng_state, set_rng_state, trainable_state

STATE_FILE = "trainer_state.json"  # written last: rlcw.runs.last_checkpoint's mark of a complete checkpoint
MAX_GRAD_NORM = 1.0  # HF Trainer's default clipping, as the sequential path has it


@dataclass(frozen=True)
class JointSettings:
    """The `train.*` budget every member gets (the sequential path's TrainingArguments, by name)."""

    learning_rate: float
    max_steps: int  # optimizer steps
    batch_size: int  # pairs per micro-batch
    grad_accum: int = 1
    warmup_ratio: float = 0.0  # < 1: a share of max_steps; >= 1: steps (transformers' warmup_steps rule)
    weight_decay: float = 0.0
    logging_steps: int = 1
    eval_steps: int = 0  # 0: no evaluation inside the loop
    eval_batch_size: int = 16
    save_steps: int = 0  # 0: no checkpoints
    center_rewards_coefficient: float | None = None
    bf16: bool = False
    seed: int = 0  # the shared data order


def weighted_bt_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    weights: torch.Tensor,
    margin: torch.Tensor | None = None,
    center_coef: float | None = None,
) -> torch.Tensor:
    """sum_i w_i * -log sigmoid(c_i - r_i - m_i) / B over a batch of B pairs (TRL's BT loss with weights 1);
    TRL's reward centering adds center_coef * sum_i w_i (c_i + r_i)^2 / B."""
    diff = chosen - rejected - (margin if margin is not None else 0.0)
    loss = (weights * -F.logsigmoid(diff)).sum() / len(weights)
    if center_coef is not None:
        loss = loss + center_coef * (weights * (chosen + rejected) ** 2).sum() / len(weights)
    return loss


def batch_indices(n: int, batch_size: int, seed: int, micro: int) -> list[int]:
    """Pair indices of micro-batch `micro` (0-based, counted over the whole run): epochs of a permutation drawn
    from (seed, epoch), cut into batches, the last one short (HF's sampler without drop_last). A function of
    its arguments only, so a resumed run replays the order without any saved sampler state."""
    per_epoch = math.ceil(n / batch_size)
    epoch, b = divmod(micro, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[b * batch_size : (b + 1) * batch_size].tolist()


def shared_modules(model: nn.Module, shared_layers: int) -> list[nn.Module]:
    """The trunk's modules: the backbone's children outside its layers and final norm, and layers below s."""
    backbone = getattr(model, model.base_model_prefix)
    outside = [m for name, m in backbone.named_children() if name not in ("layers", "norm", "rotary_emb")]
    return outside + list(backbone.layers[:shared_layers])


def member_model(base: nn.Module, shared_layers: int, seed: int, peft_config) -> nn.Module:
    """Member `seed`: a copy of `base` that holds the SAME trunk modules (no copy), its own top layers, norm and
    score head; the head re-drawn and LoRA initialised from `seed` (as the sequential path seeds a member)."""
    from peft import get_peft_model
    from transformers import set_seed

    memo = {id(m): m for m in shared_modules(base, shared_layers)}
    model = copy.deepcopy(base, memo)
    set_seed(seed)
    nn.init.normal_(model.score.weight, std=model.config.initializer_range)
    return get_peft_model(model, peft_config)


def _inner(member: nn.Module) -> nn.Module:
    """The sequence-classification model inside a peft wrapper (LoRA injected into its modules)."""
    return member.get_base_model() if hasattr(member, "get_base_model") else member


class SharedTrunk:
    """trunk(ids, mask) -> (B, T, H) hidden states after layer s-1; top(j, hidden, ids, mask) -> (B,) scores."""

    def __init__(self, base: nn.Module, members: list[nn.Module], shared_layers: int):
        from rlcw.errors import RlcwError
        from rlcw.rm.ensemble import passes_hidden_through

        backbone = getattr(base, base.base_model_prefix)
        if not passes_hidden_through(backbone):
            raise RlcwError(
                f"{type(base).__name__} changes inputs_embeds in its forward (e.g. Granite multiplies them by its "
                "embedding_multiplier), so members cannot share a trunk's hidden states",
                where="rm.ensemble.joint",
                hint="rm.ensemble.joint=false trains whole members one after another (scoring handles them)",
            )
        self.trunk = _view(backbone, list(backbone.layers[:shared_layers]), nn.Identity(), 0)
        self.members = members
        self.pad_id = base.config.pad_token_id
        self.tops = []
        for m in members:
            b = getattr(_inner(m), base.base_model_prefix)
            self.tops.append(_view(b, list(b.layers[shared_layers:]), b.norm, shared_layers))

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.trunk(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state

    def scores(self, j: int, hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        h = self.tops[j](inputs_embeds=hidden, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return last_token_scores(_inner(self.members[j]).score(h), input_ids, self.pad_id)  # (B,)


def make_optimizer(member: nn.Module, s: JointSettings):
    """AdamW over the member's trainable tensors and HF's linear schedule with warm-up: (optimizer, scheduler)."""
    from transformers import get_linear_schedule_with_warmup

    params = [p for p in member.parameters() if p.requires_grad]  # LoRA A/B and the head: no bias, no norm
    opt = torch.optim.AdamW(params, lr=s.learning_rate, weight_decay=s.weight_decay)
    warmup = int(s.warmup_ratio) if s.warmup_ratio >= 1 else math.ceil(s.max_steps * s.warmup_ratio)
    return opt, get_linear_schedule_with_warmup(opt, warmup, s.max_steps)


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def _split(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.chunk(scores, 2)  # the collator puts the B chosen rows first, then the B rejected rows


@torch.no_grad()
def evaluate_members(trunk: SharedTrunk, rows: list[dict], collate, batch_size: int, device) -> list[dict]:
    """Each member's held-out loss, accuracy and mean margin (TRL's eval_* keys), one trunk pass per batch."""
    k = len(trunk.members)
    loss, correct, margin = [0.0] * k, [0.0] * k, [0.0] * k
    for start in range(0, len(rows), batch_size):
        batch = _to(collate(rows[start : start + batch_size]), device)
        hidden = trunk.hidden(batch["input_ids"], batch["attention_mask"])
        for j in range(k):
            c, r = _split(trunk.scores(j, hidden, batch["input_ids"], batch["attention_mask"]))
            loss[j] += -F.logsigmoid(c - r).sum().item()
            correct[j] += (c > r).float().sum().item()
            margin[j] += (c - r).sum().item()
    n = len(rows)
    return [
        {"eval_loss": loss[j] / n, "eval_accuracy": correct[j] / n, "eval_margin": margin[j] / n} for j in range(k)
    ]


def train_joint(
    base: nn.Module,
    members: list[nn.Module],
    shared_layers: int,
    rows: list[dict],
    weights: torch.Tensor,
    s: JointSettings,
    collate: Callable[[list[dict]], dict],
    checkpoints: Path,
    log: Callable[[int, int, dict], None],
    eval_rows: list[dict] | None = None,
    resume_from: Path | None = None,
) -> int:
    """Train every member for `s.max_steps` optimizer steps in one shared data order; the last step.

    rows: the training pairs as TRL's preference rows (chosen_ids, rejected_ids[, margin]) for `collate`
    (TRL's DataCollatorForPreference); weights: (k, n) bootstrap counts; log(step, j, metrics) gets TRL's keys."""
    device = next(base.parameters()).device
    trunk = SharedTrunk(base, members, shared_layers)
    base.eval()  # the frozen trunk: no dropout noise in the hidden states every member reads
    for m in members:
        m.train()
    optim = [make_optimizer(m, s) for m in members]
    step = load_checkpoint(resume_from, members, optim) if resume_from else 0
    weights = weights.to(device)
    if step == 0 and eval_rows and s.eval_steps:
        _log_eval(trunk, eval_rows, collate, s, device, 0, log)  # step-0 accuracy for the curve
    window = [_Window() for _ in members]
    while step < s.max_steps:
        t0 = time.time()
        for a in range(s.grad_accum):
            idx = batch_indices(len(rows), s.batch_size, s.seed, step * s.grad_accum + a)
            batch = _to(collate([rows[i] for i in idx]), device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=s.bf16):
                out = micro_step(trunk, batch, weights[:, idx], s.grad_accum, s.center_rewards_coefficient)
            for j, (loss, c, r) in enumerate(out):
                window[j].add(loss, c, r, weights[j, idx])
        for j, norm in enumerate(optimizer_step(members, optim)):
            window[j].grad_norm(norm)
        step += 1
        epoch = step * s.grad_accum * s.batch_size / len(rows)
        if step % s.logging_steps == 0 or step == s.max_steps:
            for j, (opt, _) in enumerate(optim):
                log(step, j, window[j].flush(opt.param_groups[0]["lr"], epoch))
            print(f"[train-rm] joint step {step}/{s.max_steps} ({time.time() - t0:.1f}s/step)", flush=True)
        if eval_rows and s.eval_steps and step % s.eval_steps == 0:
            _log_eval(trunk, eval_rows, collate, s, device, step, log)
        if s.save_steps and (step % s.save_steps == 0 or step == s.max_steps):
            save_checkpoint(checkpoints / f"checkpoint-{step}", step, members, optim, s)
    return step


def micro_step(trunk: SharedTrunk, batch: dict, weights: torch.Tensor, grad_accum: int = 1, center_coef=None) -> list:
    """One micro-batch: the trunk once without grad, then each member's top forward + backward with its weights
    (k, B); per member (its loss / grad_accum, chosen scores, rejected scores)."""
    hidden = trunk.hidden(batch["input_ids"], batch["attention_mask"])  # (2B, T, H), once for every member
    out = []
    for j in range(len(trunk.members)):
        c, r = _split(trunk.scores(j, hidden, batch["input_ids"], batch["attention_mask"]))
        loss = weighted_bt_loss(c.float(), r.float(), weights[j], batch.get("margin"), center_coef) / grad_accum
        loss.backward()
        out.append((loss.item(), c.detach().float(), r.detach().float()))
    return out


def optimizer_step(members: list[nn.Module], optim: list) -> list[float]:
    """Clip each member's gradient (HF's max_grad_norm), step its optimizer and schedule; the norms before clipping."""
    norms = []
    for member, (opt, sched) in zip(members, optim, strict=True):
        params = [p for p in member.parameters() if p.requires_grad]
        norms.append(torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM).item())
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return norms


def _log_eval(trunk, eval_rows, collate, s: JointSettings, device, step: int, log) -> None:
    for m in trunk.members:
        m.eval()  # no LoRA dropout while measuring, as HF's evaluate
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=s.bf16):
        results = evaluate_members(trunk, eval_rows, collate, s.eval_batch_size, device)
    for j, m in enumerate(trunk.members):
        m.train()
        log(step, j, results[j])


class _Window:
    """A member's training metrics between two logged steps (TRL's keys: loss, accuracy, margin, grad_norm)."""

    def __init__(self):
        self.loss, self.acc, self.margin, self.norms, self.micro = 0.0, [], [], [], 0

    def add(self, loss: float, c: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> None:
        self.loss += loss
        total = w.sum().clamp_min(1e-12)  # accuracy and margin over the pairs the member trains on, as drawn
        self.acc.append(((c > r).float() * w).sum().item() / total.item())
        self.margin.append(((c - r) * w).sum().item() / total.item())
        self.micro += 1

    def grad_norm(self, value: float) -> None:
        self.norms.append(value)

    def flush(self, lr: float, epoch: float) -> dict:
        steps = max(len(self.norms), 1)
        out = {
            "loss": self.loss / steps,
            "grad_norm": sum(self.norms) / steps,
            "learning_rate": lr,
            "accuracy": sum(self.acc) / max(len(self.acc), 1),
            "margin": sum(self.margin) / max(len(self.margin), 1),
            "epoch": epoch,
        }
        self.__init__()
        return out


# --- checkpoints ---


def save_checkpoint(path: Path, step: int, members: list[nn.Module], optim: list, s: JointSettings) -> Path:
    """Every member's trainable tensors, optimizers, schedulers and the RNG, as one folder written atomically."""
    from safetensors.torch import save_file

    with atomic_folder(path) as tmp:
        for j, m in enumerate(members):
            save_file(trainable_state(m), str(tmp / f"member_{j}.safetensors"))
        torch.save([o.state_dict() for o, _ in optim], tmp / "optimizers.pt")
        torch.save([sc.state_dict() for _, sc in optim], tmp / "schedulers.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        atomic_write_json(tmp / STATE_FILE, {"step": step, "members": len(members), "settings": asdict(s)})
    return path


def load_checkpoint(path: Path, members: list[nn.Module], optim: list) -> int:
    """Restore what `save_checkpoint` wrote; the step it was written at. A checkpoint of another ensemble size
    or LoRA layout is an error naming the folder."""
    from safetensors.torch import load_file

    from rlcw.errors import RlcwError

    state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    if state.get("members") != len(members):
        raise RlcwError(
            f"the checkpoint holds {state.get('members')} ensemble members, this run trains {len(members)}",
            where=str(path / STATE_FILE),
            hint="resume with the rm.ensemble.size that wrote it, or train.resume=false in a new run folder",
        )
    for j, m in enumerate(members):
        tensors = load_file(str(path / f"member_{j}.safetensors"))
        expected = set(trainable_state(m))
        if set(tensors) != expected:
            raise RlcwError(
                f"member {j}'s checkpointed tensors do not fit the model "
                f"(missing {sorted(expected - set(tensors))[:2]}, unexpected {sorted(set(tensors) - expected)[:2]})",
                where=str(path / f"member_{j}.safetensors"),
                hint="resume with the lora.* and model settings of the run that wrote it",
            )
        m.load_state_dict(tensors, strict=False)
    for (opt, sched), o, sc in zip(
        optim, torch.load(path / "optimizers.pt"), torch.load(path / "schedulers.pt"), strict=True
    ):
        opt.load_state_dict(o)
        sched.load_state_dict(sc)
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return int(state["step"])
