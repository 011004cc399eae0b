"""`rlcw train-rm rm.ensemble.size=k`: k Bradley-Terry members saved as one RM folder (`rlcw.rm.ensemble`).

Members differ by SEED and by a BOOTSTRAP resample of the training pairs (`rm.ensemble.bootstrap`, default on):
- the seed sets member j's score-head and LoRA initialisation (and, trained sequentially, its data order;
  seed = `seed` + j). Coste et
  al. 2023 varied only the seed, but their members were whole RMs; here members adapt only the top layers of ONE
  pretrained base, so seed-only members stay close to each other (their errors correlate through the shared base);
- the bootstrap (n pairs drawn with replacement from the n training pairs) leaves each member without ~37% of the
  pairs and weights the rest differently: the classic way to make ensemble members disagree where the data are
  thin, which is where a policy goes looking for reward it does not deserve.
Every member uses the same base model, pad row and render spec, and the same `train.*` budget.

Cost (`rm.ensemble.joint`, default auto): LoRA on the top layers (`lora.top_layers` < the model's layers) leaves
the embeddings and the lower `shared_layers` decoder layers frozen and identical in every member, so
- joint (auto's choice for such members; `rlcw.rm.ensemble_trainer`): ONE pass over the batches; per batch
  the trunk runs once without grad, then each member's top (its LoRA'd layers, final norm, score head) runs
  forward + backward on those hidden states, each member with its own AdamW and schedule (the same `train.*`
  budget: learning rate, warm-up, steps, batch size, grad_accum; gradient clipping at 1.0 as HF's Trainer).
  What differs from the sequential path: the data ORDER is shared (one order from `seed`, not one per member),
  and the bootstrap is applied as per-pair loss WEIGHTS (member j's count of each pair in the same draws the
  sequential path resamples: 0 = no gradient from that pair, 2 = counts double) instead of a resampled list. The
  members' diversity is what it was: each still starts from its own head and LoRA initialisation (seed + j) and
  fits its own bootstrap; the shared order removes only the disagreement that came from meeting the pairs in
  different sequences. Cost of the weights: each batch gives a member gradient from ~63% of its pairs (the rest
  weigh 0), so within less than an epoch it meets fewer distinct pairs than a sequential member in the same steps.
  So a joint member is not the sequential member bit for bit;
  each one's held-out accuracy is recorded either way. One process only (auto falls back to sequential under
  DeepSpeed or torchrun); resume: `<run>/checkpoints/checkpoint-<step>` holds every member's trainable tensors,
  optimizers, schedulers and RNG, and a resumed run equals an uninterrupted one.
- sequential (`rm.ensemble.joint=false`, and always for whole fine-tuned members: no LoRA, or LoRA on every
  layer, share nothing): one member after another with TRL's RewardTrainer (k x a single RM's training time);
  each member checkpoints under `<run>/checkpoints/member_<j>` and `train.resume=auto|true` skips a finished one.
Scoring shares the trunk the same way: the folder stores it once and the scorer runs it once per batch
(`rlcw.rm.ensemble`); whole members are saved whole and scored one after another.

Either way a finished member leaves `<run>/members/<j>.json` + `.safetensors`. Metrics are logged as
`member_<j>/...` in metrics.jsonl and the trackers.

    rlcw train-rm --config configs/train_rm/cpu.yaml rm.ensemble.size=4 rm.ensemble.aggregate=wco
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcw.config import check_at_least, check_choice
from rlcw.errors import RlcwError
from rlcw.io import atomic_folder, atomic_save_tensors, atomic_write_json
from rlcw.rm.aggregate import AGGREGATES, agreement
from rlcw.rm.ensemble import (
    MEMBERS_DIR,
    EnsembleManifest,
    Member,
    member_tensors,
    save_manifest,
    trunk_digest,
)
from rlcw.rm.pair_eval import evaluate_rm
from rlcw.rm.render import save_rm


@dataclass
class EnsembleSection:
    """train-rm's `rm.ensemble.*`."""

    size: int = 1  # bt: k > 1 trains k members into one RM folder (rlcw.recipes.rm_ensemble)
    aggregate: str = "mean"  # mean | wco (min over members) | uwo (mean - uwo_lambda * variance): the folder's default
    uwo_lambda: float = 0.5  # variance weight of aggregate=uwo (>= 0)
    bootstrap: bool = True  # each member trains on its own bootstrap resample of the training pairs
    offset_stories: int = 128  # training stories that set each member's offset (its mean score, subtracted)
    # auto: members that share a frozen trunk (LoRA on lora.top_layers) train jointly, the trunk run once per
    # batch; whole members one after another. true | false force it (rlcw.recipes.rm_ensemble)
    joint: str = "auto"
    # WARM (Rame et al. 2024): one RM whose weights are the mean of the members' (a plain RM folder, one model's
    # scoring cost) instead of an ensemble folder; the members share the base, so their weights average
    average: bool = False


def validate_ensemble(rm, lora) -> None:
    """The `rm.ensemble.*` checks (called by train_rm.validate when size > 1)."""
    e = rm.ensemble
    if rm.type != "bt":
        raise RlcwError(
            "ensembles are Bradley-Terry RMs", where="rm.ensemble.size", hint="use rm.type=bt or rm.ensemble.size=1"
        )
    if getattr(rm, "length_head", False):
        raise RlcwError(
            "an RM ensemble has one head per member", where="rm.length_head", hint="use rm.length_head=false"
        )
    check_at_least("rm.ensemble.size", e.size, 2)
    check_choice("rm.ensemble.aggregate", e.aggregate, AGGREGATES)
    check_at_least("rm.ensemble.uwo_lambda", e.uwo_lambda, 0.0)
    check_at_least("rm.ensemble.offset_stories", e.offset_stories, 1)
    check_choice("rm.ensemble.joint", str(e.joint).lower(), ("auto", "true", "false"))
    if str(e.joint).lower() == "true" and not (lora.enabled and lora.top_layers):
        use_joint("true", 0, False)  # whole members share nothing: the error names the key and the fix


def bootstrap_indices(n: int, seed: int) -> list[int]:
    """n draws with replacement from range(n) (a bootstrap resample), reproducible from `seed`."""
    rng = random.Random(seed)
    return [rng.randrange(n) for _ in range(n)]


def bootstrap_pairs(pairs: list[dict], seed: int) -> list[dict]:
    """The resampled list the sequential path trains member `seed` on."""
    return [pairs[i] for i in bootstrap_indices(len(pairs), seed)]


def bootstrap_counts(n: int, seed: int) -> list[int]:
    """How often each of the n pairs is drawn into the same resample: the joint path's per-pair loss weights
    (multinomial counts that sum to n; about 37% of them are 0)."""
    counts = [0] * n
    for i in bootstrap_indices(n, seed):
        counts[i] += 1
    return counts


def use_joint(setting: str | bool, s: int, distributed: bool) -> bool:
    """`rm.ensemble.joint` (true | false | auto) -> train the members jointly on their shared trunk?"""
    mode = str(setting).lower()
    if mode == "false":
        return False
    if mode == "auto":
        return s > 0 and not distributed
    if s == 0:
        raise RlcwError(
            "rm.ensemble.joint=true needs members that share a trunk (LoRA on the top layers only)",
            where="rm.ensemble.joint",
            hint="set lora.top_layers below the model's layer count, or rm.ensemble.joint=auto|false for whole members",
        )
    if distributed:
        raise RlcwError(
            "rm.ensemble.joint=true trains in one process (no DeepSpeed, no torchrun)",
            where="rm.ensemble.joint",
            hint="drop train.deepspeed and launch without torchrun, or use rm.ensemble.joint=false",
        )
    return True


def shared_layers(lora, num_layers: int) -> int:
    """Decoder layers every member leaves untouched: those below LoRA's top layers; 0 for whole members."""
    if not lora.enabled or not lora.top_layers or lora.top_layers >= num_layers:
        return 0
    return num_layers - lora.top_layers


class _MemberRun:
    """What `train_bt` needs of a run folder, for member j: its own checkpoints, metrics under `member_<j>/`."""

    def __init__(self, run, j: int):
        self.run, self.j, self.path = run, j, run.path

    @property
    def checkpoints(self) -> Path:
        return self.run.checkpoints / f"member_{self.j}"

    def log(self, step: int, metrics: dict) -> None:
        self.run.log(step, {f"member_{self.j}/{k}": v for k, v in metrics.items()})


class _MemberTracker:
    def __init__(self, tracker, j: int):
        self.tracker, self.j = tracker, j

    def log(self, metrics: dict, step: int) -> None:
        self.tracker.log({f"member_{self.j}/{k}": v for k, v in metrics.items()}, step)


@dataclass(frozen=True)
class SingleRM:
    """What `rlcw train-rm` does for one BT RM (rlcw.recipes.train_rm's train_bt and report), handed in by
    train_rm so this module never imports it back."""

    train: Callable
    report: Callable
    parts: Callable  # train_rm.bt_parts: tokenizer, spec, base model, TRL rows, peft config (the joint path)


def train_member(cfg, run, j: int, train_pairs, eval_pairs, tracker, staging: Path, s: int, one: SingleRM) -> dict:
    """Train member j, write its tensors (and, for member 0, the whole model) into `staging`; its record."""
    from transformers import set_seed

    seed = cfg.seed + j
    pairs = bootstrap_pairs(train_pairs, seed) if cfg.rm.ensemble.bootstrap else train_pairs
    set_seed(cfg.seed)  # the base model and any resized embedding row: the same for every member
    trainer, tokenizer, spec = one.train(
        dataclasses.replace(cfg, seed=seed),
        _MemberRun(run, j),
        pairs,
        eval_pairs,
        _MemberTracker(tracker, j) if tracker is not None else None,
        member_seed=seed,
    )
    model = trainer.model.merge_and_unload() if hasattr(trainer.model, "merge_and_unload") else trainer.model
    state = model.state_dict()
    prefix = model.base_model_prefix
    atomic_save_tensors(member_tensors(state, prefix, s), staging / f"{j}.safetensors")
    if j == 0:
        save_rm(model, tokenizer, spec, staging / "trunk")
    record = {
        "member": j,
        "seed": seed,
        "pairs": len(pairs),
        "unique_pairs": len({id(p) for p in pairs}),
        "steps": trainer.state.global_step,
        "trunk_digest": trunk_digest(state, prefix, s),
    }
    atomic_write_json(staging / f"{j}.json", record)
    return record


def _member_record(j: int, seed: int, counts: list[int], steps: int, digest: str) -> dict:
    return {
        "member": j,
        "seed": seed,
        "pairs": sum(counts),
        "unique_pairs": sum(1 for c in counts if c),
        "steps": steps,
        "trunk_digest": digest,
    }


def train_joint_members(cfg, run, train_pairs, eval_pairs, tracker, staging: Path, s: int, one: SingleRM) -> list:
    """Every member at once on the shared trunk (`rlcw.rm.ensemble_trainer`); writes what `train_member`
    writes for each member into `staging`; their records."""
    from transformers import set_seed
    from transformers.integrations.integration_utils import rewrite_logs
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from rlcw.rm.ensemble_trainer import JointSettings, member_model, train_joint
    from rlcw.runs import resume_checkpoint

    k, t = cfg.rm.ensemble.size, cfg.train
    start = resume_checkpoint(t.resume, run.checkpoints)
    if start is not None:
        print(f"[train-rm] resume: joint ensemble from {start}")
    set_seed(cfg.seed)  # the base model and any resized embedding row, as for a single RM
    parts = one.parts(cfg, train_pairs, eval_pairs)
    base = parts.model.to("cuda" if torch.cuda.is_available() else "cpu")
    n = len(parts.rows)
    counts = [bootstrap_counts(n, cfg.seed + j) if cfg.rm.ensemble.bootstrap else [1] * n for j in range(k)]
    members = [member_model(base, s, cfg.seed + j, parts.peft_config) for j in range(k)]
    settings = JointSettings(
        learning_rate=t.learning_rate,
        max_steps=t.max_steps,
        batch_size=t.batch_size,
        grad_accum=t.grad_accum,
        warmup_ratio=t.warmup_ratio,
        weight_decay=t.weight_decay,
        logging_steps=t.logging_steps,
        eval_steps=t.eval_steps,
        eval_batch_size=t.eval_batch_size,
        save_steps=t.save_steps,
        center_rewards_coefficient=cfg.rm.center_rewards_coefficient,
        bf16=t.bf16,
        seed=cfg.seed,
    )

    def log(step: int, j: int, metrics: dict) -> None:
        _MemberRun(run, j).log(step, metrics)
        if tracker is not None:
            _MemberTracker(tracker, j).log(rewrite_logs(metrics), step)

    collate = DataCollatorForPreference(pad_token_id=parts.tokenizer.pad_token_id)
    weights = torch.tensor(counts, dtype=torch.float32)  # (k, n)
    steps = train_joint(
        base, members, s, parts.rows, weights, settings, collate, run.checkpoints, log, parts.eval_rows, start
    )
    records = []
    for j, member in enumerate(members):
        model = member.merge_and_unload()
        state = model.state_dict()
        atomic_save_tensors(member_tensors(state, model.base_model_prefix, s), staging / f"{j}.safetensors")
        if j == 0:
            save_rm(model, parts.tokenizer, parts.spec, staging / "trunk")
        record = _member_record(j, cfg.seed + j, counts[j], steps, trunk_digest(state, model.base_model_prefix, s))
        atomic_write_json(staging / f"{j}.json", record)
        records.append(record)
    return records


def member_offsets(model_dir: Path, pairs: list[dict], n: int, batch_size: int) -> list[float]:
    """Each member's mean raw score over the first n training stories (chosen and rejected sides)."""
    from rlcw.rm.scoring import load_rm

    stories = [(p["prompt"], side) for p in pairs for side in (p["chosen"], p["rejected"])][:n]
    scorer = load_rm(model_dir, batch_size=batch_size, length_control=False)
    members = scorer.score_members([p for p, _ in stories], [s for _, s in stories])
    return [sum(m) / len(m) for m in members]


def assemble(cfg, run, staging: Path, records: list[dict], s: int, train_pairs: list[dict]) -> Path:
    """The ensemble folder `<run>/model`: member 0 whole, every member's tensors, the manifest with offsets."""
    digests = {r["trunk_digest"] for r in records}
    if len(digests) != 1:
        raise RlcwError(
            "ensemble members do not share their trunk (the frozen layers differ between members)",
            where=str(staging),
            hint="a bug or a changed base model between members: re-run train-rm with train.resume=false",
        )
    e = cfg.rm.ensemble
    if e.average:
        return assemble_average(run, staging, records)
    with atomic_folder(run.path / "model") as tmp:
        shutil.copytree(staging / "trunk", tmp, dirs_exist_ok=True)
        members = []
        for r in records:
            rel = f"{MEMBERS_DIR}/{r['member']}.safetensors"
            (tmp / MEMBERS_DIR).mkdir(exist_ok=True)
            shutil.copyfile(staging / f"{r['member']}.safetensors", tmp / rel)
            members.append(Member(rel, r["seed"], 0.0))
        manifest = EnsembleManifest(members, s, e.aggregate, e.uwo_lambda, e.bootstrap)
        save_manifest(manifest, tmp)
        offsets = member_offsets(tmp, train_pairs, e.offset_stories, cfg.train.eval_batch_size)
        for m, off in zip(manifest.members, offsets, strict=True):
            m.offset = off
        save_manifest(manifest, tmp)
    return run.path / "model"


def assemble_average(run, staging: Path, records: list[dict]) -> Path:
    """`<run>/model` as ONE plain RM (WARM): the trunk folder's model with every member tensor replaced by the
    members' mean (`rlcw.rm.ensemble.average_members`)."""
    from safetensors.torch import load_file, save_file

    from rlcw.rm.ensemble import average_members

    mean = average_members([load_file(str(staging / f"{r['member']}.safetensors")) for r in records])
    with atomic_folder(run.path / "model") as tmp:
        shutil.copytree(staging / "trunk", tmp, dirs_exist_ok=True)
        weights = sorted(tmp.glob("*.safetensors"))
        if len(weights) != 1:
            raise RlcwError(f"expected one weights file in the trunk folder, found {len(weights)}", where=str(staging))
        state = load_file(str(weights[0]))
        unknown = sorted(set(mean) - set(state))
        if unknown:
            raise RlcwError(f"member tensors not in the model: {unknown[:3]}", where=str(staging / "trunk"))
        state.update({k: v.to(state[k].dtype) for k, v in mean.items()})
        save_file(state, str(weights[0]), metadata={"format": "pt"})
    return run.path / "model"


def evaluate_ensemble(model_dir: Path, pairs: list[dict]) -> dict[str, float]:
    """Held-out accuracy of the aggregate (`rlcw.rm.pair_eval.evaluate_rm`'s keys: train_rm's), of each member, and member agreement."""
    from rlcw.metrics.pairwise import pairwise_accuracy
    from rlcw.rm.scoring import load_rm

    scorer = load_rm(model_dir)
    out = evaluate_rm(scorer, pairs)
    prompts = [p["prompt"] for p in pairs]
    chosen = scorer.score_members(prompts, [p["chosen"] for p in pairs])
    rejected = scorer.score_members(prompts, [p["rejected"] for p in pairs])
    for j, (c, r) in enumerate(zip(chosen, rejected, strict=True)):
        out[f"eval/member_{j}/accuracy"] = pairwise_accuracy(c, r)
    out["eval/member_agreement"] = agreement(chosen, rejected)
    return out


def _train_sequential(cfg, run, train_pairs, eval_pairs, tracker, staging: Path, s: int, one: SingleRM) -> list:
    """One member after another with TRL's RewardTrainer; a member finished in an earlier run is kept."""
    from rlcw.runs import resume_mode

    records = []
    for j in range(cfg.rm.ensemble.size):
        done = staging / f"{j}.json"
        if resume_mode(cfg.train.resume) != "false" and done.is_file() and (staging / f"{j}.safetensors").is_file():
            print(f"[train-rm] ensemble member {j}: finished in an earlier run, kept")
            records.append(_read_json(done))
            continue
        print(f"[train-rm] ensemble member {j + 1}/{cfg.rm.ensemble.size} (seed {cfg.seed + j})")
        records.append(train_member(cfg, run, j, train_pairs, eval_pairs, tracker, staging, s, one))
    return records


def train_bt_ensemble(cfg, run, train_pairs: list[dict], eval_pairs: list[dict], tracker, one: SingleRM) -> dict:
    """Train `rm.ensemble.size` members, assemble the folder, evaluate; the run's summary (see module docstring)."""
    from transformers import AutoConfig

    from rlcw.models import resolve
    from rlcw.runs import is_main_process, resume_mode

    t0 = time.time()
    num_layers = AutoConfig.from_pretrained(resolve(cfg.model.name)).num_hidden_layers
    s = shared_layers(cfg.lora, num_layers)
    staging = run.path / MEMBERS_DIR
    joint = use_joint(
        cfg.rm.ensemble.joint, s, bool(cfg.train.deepspeed) or int(os.environ.get("WORLD_SIZE", "1")) > 1
    )
    k = cfg.rm.ensemble.size
    finished = [staging / f"{j}.json" for j in range(k)]
    if joint and resume_mode(cfg.train.resume) != "false" and all(f.is_file() for f in finished):
        print("[train-rm] ensemble: every member finished in an earlier run, kept")
        records = [_read_json(f) for f in finished]
    elif joint:
        print(f"[train-rm] ensemble of {k} trained jointly on the shared trunk ({s} layers)")
        records = train_joint_members(cfg, run, train_pairs, eval_pairs, tracker, staging, s, one)
    else:
        records = _train_sequential(cfg, run, train_pairs, eval_pairs, tracker, staging, s, one)
    metrics = {
        "train/members": float(len(records)),
        "train/joint": float(joint),
        "train/weight_averaged": float(cfg.rm.ensemble.average),
        "train/shared_layers": float(s),
        "train/steps": float(max(r["steps"] for r in records)),  # each member's steps (train.max_steps)
        "train/pairs": float(len(train_pairs)),
        "train/mean_unique_pairs": sum(r["unique_pairs"] for r in records) / len(records),
        "time/train_s": round(time.time() - t0, 1),
    }
    if not is_main_process():
        return run.write_summary("completed", metrics)
    model_dir = assemble(cfg, run, staging, records, s, train_pairs)
    if eval_pairs:
        t1 = time.time()
        if cfg.rm.ensemble.average:  # one plain RM (WARM)
            from rlcw.rm.scoring import load_rm

            metrics.update(evaluate_rm(load_rm(model_dir), eval_pairs))
        else:
            metrics.update(evaluate_ensemble(model_dir, eval_pairs))
        metrics["time/eval_s"] = round(time.time() - t1, 1)
        run.log(max(r["steps"] for r in records), metrics)
        if tracker is not None:
            tracker.log(metrics, max(r["steps"] for r in records))
    summary = run.write_summary("completed", metrics, {"model": model_dir, "metrics": run.path / "metrics.jsonl"})
    run.write_report(one.report(cfg, metrics, model_dir))
    return summary


def _read_json(path: Path) -> dict:
    import json

    return json.loads(path.read_text(encoding="utf-8"))
