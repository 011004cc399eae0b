"""Every quickstart stage's core work against this machine's roofline, in one process, at the quickstart's sizes.

    OMP_NUM_THREADS=1 taskset -c 0 python scripts/bench_stages.py --json stages.json
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 OMP_NUM_THREADS=1 taskset -c 0 \\
        python scripts/bench_stages.py --json stages_avx2.json      # the AVX2 path of an AVX-512 box
    python scripts/bench_stages.py --stages rm_train heldout --before   # also each stage as it ran before
    python scripts/bench_stages.py --stages --rm-runs 0 1 2             # real train-rm runs: before vs now

It first prints which kernels torch runs here (rlcw.cpu_isa: the ISA path `torch.backends.cpu.get_cpu_capability()`
reports, AVX512-BF16 and AMX, whether AMX runs bf16 matmuls, the ISA limits set), then measures the roofline
(scripts/roofline.py: triad bandwidth, fp32 and bf16 matmul rates, wall and per CPU second) and each stage's core
work as configs/quickstart/cpu.yaml sets it:

- `rm_train`: one BT RM training step (forward, BT loss, backward to LoRA r16 on the top 8 layers and the score
  head, AdamW) on 8 corruption pairs from build-pairs with the quickstart's settings, stories alone, 256 tokens, in
  `train.cpu_precision`'s precision (auto here) with the batch in length buckets (rlcw.rm.bt_trainer);
- `generation`: GRPO's rollout, 2 prompts x 8 completions of <= 88 tokens at temperature 0.9 by rlcw.sampling on
  the merged copy (`rollout.precision=auto`, packed weights, inverse-CDF draw, ended rows leaving the batch);
- `loss`: GRPO's log-prob forward with entropies + backward to the LoRA weights (scripts/bench_loss.py's batch:
  16 rows x 88 tokens after the shared prompt; the LM head the CPU default takes), in the precision
  `grpo.train.cpu_precision=auto` takes here (bf16 autocast, the LM head in fp32, or fp32);
- `reward`: the BT scorer (rlcw.rm.scoring, a stand-in head on the embedded model: the same compute) on the 16
  stories the generation stage wrote, in the precision `reward.specs.rm.precision=auto` takes here;
- `heldout`: the held-out measurement's sampling of one policy: the 32 `heldout` prompts x 4 samples in one batch
  of 128, temperature 1, inverse-CDF draw, `heldout.precision` (rlcw.measure.heldout).

Each stage's variants run interleaved, `--repeats` times after a warm-up (held-out: `--heldout-repeats`, no
warm-up). For each: wall and CPU seconds (time.process_time; with one thread on a shared core it leaves out other
jobs' time, wall time does not), medians; the work: matmul GFLOP (torch's FlopCounterMode on one step, scaled by
padded tokens for the other RM batches) or completion tokens; the rate per CPU second and its share of the
roofline: GFLOP/s against the matmul rate (per CPU second) in the precision the stage runs in, tokens/s against
the decode bound of scripts/roofline.py at the stage's batch (optimistic: leaves out attention, the KV cache and
the draw; the triad is the fastest of a few wall-clock passes). `--before` adds each stage's previous default where it
changed (rm_train: fp32 and TRL's padded batch, and on an AMX box the steps between; heldout: fp32, compacting at
every ending; loss and reward: fp32 where auto takes bf16), and the CPU-second ratios; `--heldout-extra` adds held-out candidates ("bf16", "fp32 packed").
`--rm-runs SEED ...` runs the quickstart's build-pairs and train-rm itself for each seed twice, before (fp32,
padded) and now, and prints the held-out pair accuracy and the seconds per step of each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import roofline  # scripts/ is on sys.path (this script's folder)
import torch
from bench_loss import counted, cpu_name

from rlcw.cpu_isa import amx_bf16, describe, native_bf16, resolve_cpu_precision

QUICKSTART = "configs/quickstart/cpu.yaml"
STAGES = ("rm_train", "generation", "loss", "reward", "heldout")


def cpu_seconds() -> float:
    return time.process_time()


def machine() -> dict:
    name, avx512 = cpu_name()
    amx, why = amx_bf16()
    return {
        "cpu": name,
        "avx512f": avx512,
        "isa_path": torch.backends.cpu.get_cpu_capability(),
        "describe": describe(),
        "amx_in_use": amx,
        "amx_why": why,
        "threads": torch.get_num_threads(),
        "cores": sorted(os.sched_getaffinity(0)),
        "torch": torch.__version__,
    }


def matmul_rate_cpu(dtype: torch.dtype, repeats: int) -> float:
    """GFLOP per CPU second of roofline.py's matmul shape, the fastest of `repeats` after a warm-up."""
    x, w = torch.randn(1024, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):
        start = cpu_seconds()
        torch.mm(x, w)
        best = min(best, cpu_seconds() - start)
    return 2 * 1024 * 576 * 1536 / best / 1e9


def measure_roofline(slow_bf16: bool) -> dict:
    out = roofline.measure()
    out["fp32_gflops_cpu"] = matmul_rate_cpu(torch.float32, 20)
    out["bf16_gflops_cpu"] = matmul_rate_cpu(torch.bfloat16, 2 if slow_bf16 else 20)
    print(
        f"roofline: triad {out['bandwidth_gbs']:.1f} GB/s, matmul fp32 {out['fp32_gflops']:.0f} "
        f"({out['fp32_gflops_cpu']:.0f} per CPU s), bf16 {out['bf16_gflops']:.0f} ({out['bf16_gflops_cpu']:.0f} "
        f"per CPU s) GFLOP/s",
        flush=True,
    )
    return out


def interleaved(variants: dict, repeats: int, warm_up: bool = True, contexts: dict | None = None) -> dict:
    """{name: {"wall": [...], "cpu": [...], "outs": [...]}}: one call of each variant per pass, in turn, each inside
    its context from `contexts` (name -> a context manager factory, entered outside the timing)."""
    runs = {k: {"wall": [], "cpu": [], "outs": []} for k in variants}
    for r in range(repeats + warm_up):
        for name, fn in variants.items():
            with (contexts or {}).get(name, contextlib.nullcontext)():
                wall, cpu = time.perf_counter(), cpu_seconds()
                out = fn(r)
                wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
            if r or not warm_up:
                runs[name]["wall"].append(wall)
                runs[name]["cpu"].append(cpu)
                runs[name]["outs"].append(out)
            print(f"  pass {r} {name}: {wall:.2f} s, {cpu:.2f} CPU s", flush=True)
    return runs


def quickstart_config(root: Path, seed: int = 0):
    """configs/quickstart/cpu.yaml, its stages wired into `root` as `rlcw quickstart` wires them."""
    from rlcw.config import load_config
    from rlcw.recipes.quickstart import QuickstartConfig, wire

    cfg = load_config(QuickstartConfig, QUICKSTART, [f"output_dir={root.parent}", f"run_name={root.name}"])
    cfg.seed = seed
    wire(cfg, str(root))
    cfg.train_rm.train.report_to = ["none"]
    return cfg


# --- rm_train ---


def rm_variants(args) -> dict[str, tuple[str, bool, bool]]:
    """name -> (precision, length buckets, frozen linears held in bf16): now (train.cpu_precision=auto, as
    BucketedRewardTrainer runs it), and with --before: before (fp32, padded) and the steps between; where bf16 is
    native but auto keeps fp32 (AVX512-BF16 without AMX), also bf16 as it runs on an AMX box, bucketed."""
    now, _ = resolve_cpu_precision("auto")
    out = {"now": (now, True, now == "bf16")}
    if args.before:
        out = {"before": ("fp32", False, False), **out, "fp32 buckets": ("fp32", True, False)}
        if now == "bf16":  # train.bf16's autocast alone, then with the frozen linears held in bf16
            out.update({"bf16 autocast": ("bf16", False, False), "bf16 held": ("bf16", False, True)})
    if now == "fp32" and native_bf16()[0]:
        out["bf16 buckets held"] = ("bf16", True, True)
    return out


def rm_train(args, root: Path) -> dict:
    from peft import get_peft_model
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from rlcw.data.preferences import load_preferences
    from rlcw.recipes import build_pairs
    from rlcw.recipes.train_rm import bt_parts
    from rlcw.rm.bt_trainer import bf16_frozen_linears
    from rlcw.rm.scoring import length_batches

    cfg = quickstart_config(root)
    pairs = build_pairs.main(cfg.build_pairs)["artifacts"]
    t = cfg.train_rm
    parts = bt_parts(t, load_preferences(pairs["train"], "train"), [])
    rows = random.Random(0).sample(parts.rows, len(parts.rows))
    size = t.train.batch_size
    collate = DataCollatorForPreference(pad_token_id=parts.tokenizer.pad_token_id)
    batches = [collate(rows[i * size : (i + 1) * size]) for i in range(args.repeats + 1)]
    model = get_peft_model(parts.model, parts.peft_config).train()
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=t.train.learning_rate)
    padding = 0.1  # rlcw.rm.bt_trainer.BucketedRewardTrainer.max_padding

    def padded_tokens(batch, buckets: bool) -> int:
        lengths = batch["attention_mask"].sum(1).tolist()
        groups = length_batches(lengths, len(lengths), None, padding) if buckets else [range(len(lengths))]
        return sum(len(g) * max(lengths[i] for i in g) for g in groups)

    def step(batch, precision: str, buckets: bool) -> float:
        loss = rm_loss(model, batch, precision, buckets, padding)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        return float(loss.detach())

    variants = rm_variants(args)

    def held(hold: bool):
        return lambda: bf16_frozen_linears(model) if hold else contextlib.nullcontext()

    contexts = {k: held(v[2]) for k, v in variants.items()}
    losses = {}
    for k, (precision, buckets, _) in variants.items():  # the first batch's loss, before any step
        with contexts[k](), torch.no_grad():
            losses[k] = float(rm_loss(model, batches[0], precision, buckets, padding))
    print(f"rm_train: the first batch's loss by variant {losses}", flush=True)
    flop = {}  # matmul GFLOP per padded token, counted on the warm-up step

    def counted_step(r: int, name: str, precision: str, buckets: bool) -> float:
        if r:
            return step(batches[r], precision, buckets)
        value, gflop = counted(lambda: step(batches[0], precision, buckets))
        flop[name] = gflop / padded_tokens(batches[0], buckets)
        return value

    steps = {k: (lambda r, k=k, v=v: counted_step(r, k, *v[:2])) for k, v in variants.items()}
    runs = interleaved(steps, args.repeats, contexts=contexts)
    out = {}
    for name, (precision, buckets, _) in variants.items():
        gflop = sum(flop[name] * padded_tokens(batches[r + 1], buckets) for r in range(args.repeats))
        real = sum(int(b["attention_mask"].sum()) for b in batches[1:])
        padded = sum(padded_tokens(b, buckets) for b in batches[1:])
        out[name] = summary(runs[name], precision, gflop=gflop / args.repeats)
        out[name].update(padded_over_real=padded / real, first_batch_loss=losses[name])
    return out


def rm_loss(model, batch, precision: str, buckets: bool, padding: float) -> torch.Tensor:
    """TRL's BT loss of a collated batch, the forward as train-rm runs it: in length buckets or padded, under bf16
    autocast for bf16 (what accelerate wraps the model's forward in), the scores back in fp32."""
    from rlcw.rm.bt_trainer import bucketed_logits

    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
        if buckets:
            logits = bucketed_logits(model, ids, mask, padding, use_cache=False)
        else:
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    chosen, rejected = torch.chunk(logits.squeeze(-1).float(), 2)
    return -torch.nn.functional.logsigmoid(chosen - rejected).mean()


# --- generation, reward ---


def generation(args, state: dict) -> dict:
    import bench_rollout
    from transformers import GenerationConfig

    from rlcw.rl.grpo.rollout import resolve_precision

    precision, why = resolve_precision("auto")
    print(f"generation: rollout.precision=auto -> {precision} ({why})", flush=True)
    name = f"fast {precision} dynamic cdf packed"  # the quickstart's sampler (bench_rollout.py's names)
    ns = SimpleNamespace(model=args.model, random_weights=None, samplers=[name])
    tok, models = bench_rollout.load(ns)
    ids = bench_rollout.prompts(tok, 16, 8)
    cfg = GenerationConfig(
        max_new_tokens=88, do_sample=True, temperature=0.9, top_p=1.0, top_k=0,
        pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id], disable_compile=True,
    )  # fmt: skip
    runs = interleaved(
        {"now": lambda r: bench_rollout.run_sampler(name, models, ids, cfg, tok, seed=100 + r)}, args.repeats
    )
    state["stories"] = [tok.decode(c, skip_special_tokens=True) for c in runs["now"]["outs"][0]["comps"]]
    state["params"] = sum(t.numel() for t in models["fp32"].parameters())
    tokens = statistics.median(o["tokens"] for o in runs["now"]["outs"])
    return {"now": summary(runs["now"], precision, tokens=tokens, batch=16, params=state["params"])}


def reward(args, state: dict) -> dict:
    import bench_reward

    precision, why = resolve_cpu_precision("auto")  # the quickstart's reward.specs.rm.precision
    print(f"reward: precision=auto -> {precision} ({why})", flush=True)
    ns = SimpleNamespace(
        rm=None, device=None, dtype="float32", batch_size=16, seed=0, max_length=256, no_prompt=True,
        token_budget=None, max_padding=None,
    )  # fmt: skip
    stories = state.get("stories") or bench_reward.synthetic_stories(60, 16, random.Random(0))[1]  # no generation
    prompts = [""] * len(stories)
    scorers = {"now": (precision, bench_reward.build_scorer(ns, precision))}
    if args.before and precision != "fp32":
        scorers = {"before": ("fp32", bench_reward.build_scorer(ns)), **scorers}
    flops = {k: counted(lambda s=s: s.score(prompts, stories))[1] for k, (_, s) in scorers.items()}
    runs = interleaved({k: lambda r, s=s: s.score(prompts, stories) for k, (_, s) in scorers.items()}, args.repeats)
    return {k: summary(runs[k], p, gflop=flops[k]) for k, (p, _) in scorers.items()}


# --- loss ---


def loss(args) -> dict:
    import bench_loss

    from rlcw.rl.grpo.shared_prefix import own_head_applies

    precision, why = resolve_cpu_precision("auto")  # the quickstart's grpo.train.cpu_precision
    ns = SimpleNamespace(
        model=args.model, batch=16, num_generations=8, completion_tokens=88, temperature=0.9, top_layers=8,
        trl_rows=False, bf16=precision == "bf16",
    )  # fmt: skip
    model, ids, mask, cmask = bench_loss.build(ns)
    own = own_head_applies(model, ids.device)
    name = "shared-own-head" if own else "shared-trl-head"  # the path GRPO takes on this device
    print(f"loss: {name} (the CPU default), train.cpu_precision=auto -> {precision} ({why})", flush=True)
    fns = bench_loss.loss_steps(ns, model, ids, mask, cmask)
    paths = {"now": (f"{name}-bf16" if ns.bf16 else name, precision)}
    if args.before and ns.bf16:
        paths = {"before": (name, "fp32"), **paths}
    flops = {k: counted(fns[path])[1] for k, (path, _) in paths.items()}
    runs = interleaved({k: lambda r, f=fns[path]: f() for k, (path, _) in paths.items()}, args.repeats)
    return {k: {**summary(runs[k], p, gflop=flops[k]), "path": path} for k, (path, p) in paths.items()}


# --- heldout ---


def heldout(args, root: Path, state: dict) -> dict:
    import copy

    from rlcw.measure import heldout as ho
    from rlcw.models import load_causal_lm, load_tokenizer
    from rlcw.recipes.quickstart import heldout_rows, heldout_settings

    cfg = quickstart_config(root)
    cap = cfg.grpo.train.max_completion_length
    rows, s = heldout_rows(cfg, cap), heldout_settings(cfg, cap)
    tok = load_tokenizer(cfg.model.name, padding_side="left")
    fp32 = load_causal_lm(cfg.model.name)
    now = ho.resolved(s).precision
    # name -> (precision, model, compaction share): now as rlcw.measure.heldout samples; before: fp32, compacting
    # at every ending; candidates from --heldout-extra ("bf16", "fp32 packed", ...), compacting as now
    variants = {"now": (now, ho.sampling_model(copy.deepcopy(fp32), now), ho.COMPACT_SHARE)}
    if args.before:
        variants = {"before": ("fp32", fp32, 0.0), **variants}
    for extra in args.heldout_extra:
        variants[extra] = (extra.split()[0], sampling_copy(fp32, extra), ho.COMPACT_SHARE)
    batch = len(rows) * s.n_samples
    print(f"heldout: {len(rows)} prompts x {s.n_samples} samples, one batch of {batch}, sampled in {now}", flush=True)

    def share(value: float):
        return lambda: mock.patch.object(ho, "COMPACT_SHARE", value)

    runs = interleaved(
        {k: (lambda r, m=v[1]: ho.sample_crn(m, tok, rows, s)) for k, v in variants.items()},
        args.heldout_repeats,
        warm_up=False,
        contexts={k: share(v[2]) for k, v in variants.items()},
    )
    params = state.get("params") or sum(t.numel() for t in fp32.parameters())
    out = {}
    first = {k: [x["story"] for x in runs[k]["outs"][0]] for k in runs}
    for k, (precision, _, _) in variants.items():
        tokens = statistics.median(sum(x["tokens"] for x in o) for o in runs[k]["outs"])
        out[k] = summary(runs[k], precision, tokens=tokens, batch=batch, params=params)
        out[k]["same_stories_as_now"] = sum(a == b for a, b in zip(first[k], first["now"], strict=True))
    return out


def sampling_copy(fp32, precision: str):
    """A candidate held-out sampler's model: a copy of `fp32` in `precision` ("fp32" | "bf16"), its linears packed
    (rlcw.prepack, q/k/v and gate/up fused) when it names "packed"."""
    import copy

    from rlcw.prepack import fuse_projections, prepack_linears

    dtype, *how = precision.split()
    model = copy.deepcopy(fp32).to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    if "packed" in how:
        prepack_linears(model, batch_hint=128)
        fuse_projections(model)
    return model


# --- report ---


def summary(run: dict, precision: str, *, gflop=None, tokens=None, batch=None, params=None) -> dict:
    out = {"precision": precision, "wall_s": statistics.median(run["wall"]), "cpu_s": statistics.median(run["cpu"])}
    out["walls"], out["cpus"] = run["wall"], run["cpu"]
    if gflop is not None:
        out.update(gflop=gflop, gflop_per_cpu_s=gflop / out["cpu_s"])
    if tokens is not None:
        out.update(tokens=tokens, batch=batch, params=params, tok_per_cpu_s=tokens / out["cpu_s"])
    return out


def shares(stages: dict, best: dict) -> None:
    """Each variant's share of the roofline, in place."""
    for variants in stages.values():
        for v in variants.values():
            rate = best[f"{v['precision']}_gflops_cpu"]
            if "gflop" in v:
                v.update(roof=rate, roof_unit="GFLOP/s", share=v["gflop_per_cpu_s"] / rate)
            else:
                bound = roofline.decode_bound(v["params"], v["batch"], v["precision"], best["bandwidth_gbs"], rate)
                v.update(roof=bound["bound_tok_s"], roof_unit=f"tok/s ({bound['limit']})")
                v["share"] = v["tok_per_cpu_s"] / bound["bound_tok_s"]


def table(stages: dict) -> None:
    print(f"{'stage':<11}{'variant':<19}{'prec':<6}{'wall s':>8}{'CPU s':>8}{'work':>10}{'rate/CPU s':>12}"
          f"{'roofline':>10}  {'unit':<18}{'share':>6}{'vs before':>10}")  # fmt: skip
    for stage, variants in stages.items():
        before = variants.get("before")
        for name, v in variants.items():
            work, rate = (v["gflop"], v["gflop_per_cpu_s"]) if "gflop" in v else (v["tokens"], v["tok_per_cpu_s"])
            ratio = before["cpu_s"] / v["cpu_s"] if before else None
            v["cpu_speedup_vs_before"] = ratio
            print(
                f"{stage:<11}{name:<19}{v['precision']:<6}{v['wall_s']:>8.2f}{v['cpu_s']:>8.2f}{work:>10.1f}"
                f"{rate:>12.1f}{v['roof']:>10.1f}  {v['roof_unit']:<18}{v['share']:>6.0%}"
                + (f"{ratio:>9.2f}x" if ratio else "")
            )


def rm_runs(args, root: Path) -> list[dict]:
    """For each seed: the quickstart's build-pairs and train-rm, before (fp32, padded) and now, accuracy and speed."""
    import bench_rm_train

    from rlcw.recipes import build_pairs, train_rm
    from rlcw.rm.bt_trainer import BucketedRewardTrainer

    bench_rm_train._stamp_cpu()  # every loss row records the process CPU time
    rows = []
    for seed in args.rm_runs:
        cfg = quickstart_config(root / f"seed{seed}", seed)
        build_pairs.main(cfg.build_pairs)
        for name in ("before", "now"):
            t = replace(cfg.train_rm, run_name=f"train_rm_{name}")
            t.train = replace(t.train, cpu_precision="fp32" if name == "before" else "auto", logging_steps=1)
            BucketedRewardTrainer.max_padding = None if name == "before" else 0.1
            cpu = cpu_seconds()
            m = train_rm.main(t)["metrics"]
            metrics = Path(t.output_dir) / t.run_name / "metrics.jsonl"
            row = {
                "seed": seed,
                "variant": name,
                "accuracy": m["eval/accuracy"],
                "train_s": m["time/train_s"],
                "eval_s": m.get("time/eval_s"),
                "cpu_s": cpu_seconds() - cpu,
                "step_s": bench_rm_train.step_seconds(metrics),
                "step_cpu_s": bench_rm_train.step_seconds(metrics, bench_rm_train.CPU_KEY),
            }
            print(f"[bench] train-rm {row}", flush=True)
            rows.append(row)
    BucketedRewardTrainer.max_padding = 0.1
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--stages", nargs="*", default=list(STAGES), choices=STAGES)
    p.add_argument("--repeats", type=int, default=3, help="timed passes of every stage but heldout (after a warm-up)")
    p.add_argument("--heldout-repeats", type=int, default=1, help="timed passes of the held-out sampling")
    p.add_argument("--heldout-extra", nargs="*", default=[], help="held-out candidates, e.g. 'bf16 packed'")
    p.add_argument("--before", action="store_true", help="also each changed stage as it ran before (ratios)")
    p.add_argument("--rm-runs", nargs="*", type=int, default=[], metavar="SEED", help="real train-rm runs")
    p.add_argument("--out", default=None, help="keep the pairs and runs here (default: a temporary folder)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()

    info = machine()
    print(f"machine: {info['cpu']}; {info['describe']}; {info['threads']} thread(s) on cores {info['cores']}")
    root = Path(args.out or tempfile.mkdtemp(prefix="bench_stages."))
    slow_bf16 = not native_bf16()[0]  # emulated bf16 matmuls take seconds: fewer repeats
    report = {"machine": info, "args": vars(args), "roofline": [measure_roofline(slow_bf16)], "stages": {}}
    state: dict = {}
    for stage in args.stages:
        print(f"-- {stage}", flush=True)
        if stage == "rm_train":
            report["stages"][stage] = rm_train(args, root / "quickstart")
        elif stage == "generation":
            report["stages"][stage] = generation(args, state)
        elif stage == "loss":
            report["stages"][stage] = loss(args)
        elif stage == "reward":
            report["stages"][stage] = reward(args, state)
        else:
            report["stages"][stage] = heldout(args, root / "quickstart", state)
    report["roofline"].append(measure_roofline(slow_bf16))
    keys = ("bandwidth_gbs", "fp32_gflops", "bf16_gflops", "fp32_gflops_cpu", "bf16_gflops_cpu")
    best = report["best_roofline"] = {k: max(r[k] for r in report["roofline"]) for k in keys}
    shares(report["stages"], best)
    print(f"machine: {info['cpu']}; {info['describe']}")
    print(
        f"roofline (best of 2): triad {best['bandwidth_gbs']:.1f} GB/s, matmul per CPU s fp32 "
        f"{best['fp32_gflops_cpu']:.0f} / bf16 {best['bf16_gflops_cpu']:.0f} GFLOP/s"
    )
    table(report["stages"])
    if args.rm_runs:
        report["rm_runs"] = rm_runs(args, root / "rm_runs")
        for r in report["rm_runs"]:
            print(
                f"seed {r['seed']} {r['variant']:<7} accuracy {r['accuracy']:.3f}  step {r['step_s']:.2f} s "
                f"({r['step_cpu_s']:.2f} CPU s)  train {r['train_s']:.1f} s"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
