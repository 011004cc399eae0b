"""Benchmark RM-ensemble training: one BT RM vs an ensemble of K trained one after another vs the same K trained
jointly on their shared trunk (`rm.ensemble.joint`, rlcw.rm.ensemble_trainer), in the same run.

Every phase is a real `rlcw train-rm` (recipes.train_rm.main) on the same corruption pairs (build-pairs with the
quickstart's settings) at the quickstart RM's sizes: the embedded model (`rlcw prepare-model` cache), LoRA r16 on
the top 8 of 30 layers, stories without prompts, max_length 256, batch 8, `--steps` optimizer steps, no held-out
evaluation. Timed:
- `step_s` / `step_cpu_s`: wall / process CPU seconds per optimizer step once training runs (steps 2..N, from
  timestamps taken as each step's loss row is logged: every step is logged; for the sequential ensemble the K
  members' step times are summed). The training cost itself, without the fixed costs below; `step_cpu_s` is the
  headline figure on a shared machine (other jobs' time on the core does not count);
- `train_s`: the command's `time/train_s` (model loading + training; the ensembles also merge and save members
  inside it, the single RM saves after it);
- `cpu_s`: the process CPU time of the whole command (all threads; includes saving and the ensembles' offset
  scoring). With more threads than free cores, OpenMP's waiting inflates it: run with OMP_NUM_THREADS=1 on a
  shared machine.
The single RM runs first and last; ratios are against the mean of the two (the drift between them says how steady
the machine was). Naive: sequential K x; joint ~(trunk forward + K x top forward and backward) / (full forward + top
backward) of a single RM's step.

The end-to-end runs draw different batches (the single RM and each sequential member have their own data order,
the joint members share one), and a batch's cost follows its padded length. `--same-batches N` therefore also
times, in this process, N identical batches through one LoRA RM (full forward, BT loss, backward, AdamW step: what
TRL's RewardTrainer computes) and through K joint members (`micro_step` + `optimizer_step` of
rlcw.rm.ensemble_trainer), alternating single and joint batch by batch; the ratio of CPU seconds is the cost
of the joint step itself.

    python scripts/bench_rm_train.py                       # K=4, 4 steps (the quickstart's sizes)
    OMP_NUM_THREADS=1 python scripts/bench_rm_train.py --steps 6 --json bench_rm_train.json   # on a shared machine
    OMP_NUM_THREADS=1 python scripts/bench_rm_train.py --no-end-to-end --same-batches 6     # the step alone
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

from rlcw.config import load_config
from rlcw.io import atomic_write_json, jsonl_lines
from rlcw.models import EMBEDDED_ALIAS


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=4, help="ensemble size K")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps of every run (>= 2: step_s skips the first)")
    ap.add_argument("--batch-size", type=int, default=8, help="pairs per step")
    ap.add_argument("--max-length", type=int, default=256, help="RM truncation in tokens")
    ap.add_argument("--top-layers", type=int, default=8, help="LoRA on the top N layers (the members' own)")
    ap.add_argument("--model", default=EMBEDDED_ALIAS, help="base model (default: the embedded SmolLM2-135M)")
    ap.add_argument("--out", default=None, help="keep the run folders here (default: a temporary folder, removed)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument(
        "--end-to-end", action=argparse.BooleanOptionalAction, default=True, help="the three train-rm commands"
    )
    ap.add_argument("--same-batches", type=int, default=0, help="N > 0: also time N identical batches (see above)")
    return ap.parse_args(argv)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build_pairs(root: Path) -> dict:
    from rlcw.recipes.build_pairs import BuildPairsConfig, main

    overrides = [
        f"output_dir={root}",
        "run_name=pairs",
        "data.kinds=[shuffle,splice,substitute,repeat]",
        "data.chunk_sentences=4",
        "data.eval_fraction=0.3",
    ]
    return main(load_config(BuildPairsConfig, None, overrides))


CPU_KEY = "bench/cpu_s"  # the process CPU time when a row was logged (added by `_stamp_cpu`)


def _is_loss(key: str) -> bool:
    return key == "loss" or (key.startswith("member_") and key.endswith("/loss"))


def _stamp_cpu() -> None:
    """Every training-loss row of the runs in this process also records the process CPU time (all threads)."""
    from rlcw.runs import RunDir

    log = RunDir.log

    def stamped(self, step: int, metrics: dict) -> None:
        log(self, step, {**metrics, CPU_KEY: time.process_time()} if any(map(_is_loss, metrics)) else metrics)

    RunDir.log = stamped


def step_seconds(metrics: Path, clock: str = "time") -> float:
    """Seconds per step after the first, from the `clock` stamps (`time`: wall; CPU_KEY: process CPU) of the rows
    that log a training loss (`loss`, or `member_<j>/loss`): each series' (last - first) / (steps - 1), summed over
    series (members trained one after another add up; a joint run's members are logged together: one series)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line in jsonl_lines(metrics.read_text(encoding="utf-8")):
        row = json.loads(line)
        for key in filter(_is_loss, row):
            series.setdefault(key, []).append((row["step"], row[clock]))
    if any(k.startswith("member_") for k in series) and not _sequential(series):
        series = {"member_0/loss": series["member_0/loss"]}
    return sum((s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0]) for s in map(sorted, series.values()))


def _sequential(series: dict[str, list[tuple[int, float]]]) -> bool:
    """True when the members' series follow one another in time (member 1 starts after member 0 ends)."""
    a, b = sorted(series["member_0/loss"]), sorted(series["member_1/loss"])
    return b[0][1] > a[-1][1]


def train(root: Path, pairs: dict, args, name: str, *extra: str) -> dict:
    """One `rlcw train-rm`; its timings."""
    from rlcw.recipes.train_rm import TrainRMConfig, main

    overrides = [
        f"output_dir={root}",
        f"run_name={name}",
        f"model.name={args.model}",
        f"data.train_file={pairs['artifacts']['train']}",
        "data.eval_file=null",
        "rm.include_prompt=false",
        f"rm.max_length={args.max_length}",
        "lora.r=16",
        "lora.alpha=32",
        f"lora.top_layers={args.top_layers}",
        "train.learning_rate=5e-4",
        f"train.batch_size={args.batch_size}",
        f"train.max_steps={args.steps}",
        "train.eval_steps=0",
        "train.logging_steps=1",
        "train.report_to=[none]",
        *extra,
    ]
    cpu = _cpu_s()
    summary = main(load_config(TrainRMConfig, None, overrides))
    out = {
        "step_s": round(step_seconds(root / name / "metrics.jsonl"), 2),
        "step_cpu_s": round(step_seconds(root / name / "metrics.jsonl", CPU_KEY), 2),
        "train_s": summary["metrics"]["time/train_s"],
        "cpu_s": round(_cpu_s() - cpu, 1),
    }
    print(f"[bench] {name}: {out}", flush=True)
    return out


def same_batches(pairs: dict, args) -> dict:
    """CPU seconds of N identical batches: one LoRA RM's training step vs K joint members' (module docstring)."""
    import copy

    import torch
    from peft import get_peft_model
    from transformers import set_seed
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from rlcw.data.preferences import load_preferences
    from rlcw.recipes.train_rm import TrainRMConfig, bt_parts
    from rlcw.rm.ensemble_trainer import (
        JointSettings,
        SharedTrunk,
        make_optimizer,
        member_model,
        micro_step,
        optimizer_step,
        weighted_bt_loss,
    )

    overrides = [
        f"model.name={args.model}",
        "rm.include_prompt=false",
        f"rm.max_length={args.max_length}",
        "lora.r=16",
        "lora.alpha=32",
        f"lora.top_layers={args.top_layers}",
    ]
    cfg = load_config(TrainRMConfig, None, overrides)
    set_seed(0)
    parts = bt_parts(cfg, load_preferences(pairs["artifacts"]["train"], "train"), [])
    base, s = parts.model, parts.model.config.num_hidden_layers - args.top_layers
    collate = DataCollatorForPreference(pad_token_id=parts.tokenizer.pad_token_id)
    b = args.batch_size
    batches = [collate(parts.rows[i * b : (i + 1) * b]) for i in range(args.same_batches + 1)]  # +1: warm-up
    settings = JointSettings(learning_rate=5e-4, max_steps=len(batches), batch_size=b)
    single = get_peft_model(copy.deepcopy(base), parts.peft_config).train()
    single_opt = [make_optimizer(single, settings)]
    members = [member_model(base, s, j, parts.peft_config).train() for j in range(args.members)]
    trunk, optim = SharedTrunk(base, members, s), [make_optimizer(m, settings) for m in members]
    base.eval()

    def single_step(batch):
        c, r = torch.chunk(single(**batch, use_cache=False).logits.squeeze(-1), 2)
        weighted_bt_loss(c, r, torch.ones(len(c))).backward()  # weights 1: TRL's mean BT loss
        optimizer_step([single], single_opt)

    def joint_step(batch):
        micro_step(trunk, batch, torch.ones(len(members), len(batch["input_ids"]) // 2))
        optimizer_step(members, optim)

    cpu = {"single": 0.0, "joint": 0.0}
    for n, batch in enumerate(batches):
        for name, step in (("single", single_step), ("joint", joint_step)):
            t0 = time.process_time()
            step(batch)
            if n:  # the first batch warms both up
                cpu[name] += time.process_time() - t0
    tokens = [int(x["input_ids"].shape[1]) for x in batches[1:]]
    out = {f"{k}_cpu_s_per_step": round(v / args.same_batches, 2) for k, v in cpu.items()}
    out["joint_over_single"] = round(cpu["joint"] / cpu["single"], 3)
    out["padded_lengths"] = tokens
    print(f"[bench] same batches: {out}", flush=True)
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    root = Path(args.out or tempfile.mkdtemp(prefix="bench_rm_train."))
    try:
        pairs = build_pairs(root)
        result: dict = {"members": args.members, "steps": args.steps, "batch_size": args.batch_size}
        if args.same_batches:
            result["same_batches"] = same_batches(pairs, args)
        if args.end_to_end:
            result.update(end_to_end(root, pairs, args))
    finally:
        if not args.out:  # five run folders of ~1 GB each (model copies): kept only under --out
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        atomic_write_json(args.json, result)
    return result


def end_to_end(root: Path, pairs: dict, args) -> dict:
    """The three `rlcw train-rm` commands (single before and after), their timings and ratios."""
    _stamp_cpu()
    k = args.members
    ens = [f"rm.ensemble.size={k}", "rm.ensemble.offset_stories=16"]
    phases = {
        "single_a": train(root, pairs, args, "single_a"),
        "sequential": train(root, pairs, args, "sequential", *ens, "rm.ensemble.joint=false"),
        "joint": train(root, pairs, args, "joint", *ens, "rm.ensemble.joint=true"),
        "single_b": train(root, pairs, args, "single_b"),
    }
    result: dict = {"phases": phases}
    for key in ("step_cpu_s", "step_s", "train_s", "cpu_s"):
        one = (phases["single_a"][key] + phases["single_b"][key]) / 2
        result[f"{key}/single_drift"] = round(phases["single_b"][key] / phases["single_a"][key], 3)
        result[f"{key}/sequential_over_single"] = round(phases["sequential"][key] / one, 3)
        result[f"{key}/joint_over_single"] = round(phases["joint"][key] / one, 3)
        result[f"{key}/sequential_over_joint"] = round(phases["sequential"][key] / phases["joint"][key], 3)
    return result


if __name__ == "__main__":
    main()
