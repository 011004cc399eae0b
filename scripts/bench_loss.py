"""Benchmark the GRPO loss's log-prob forward + backward on the embedded model: rlcw's LM head against TRL's.

    OMP_NUM_THREADS=1 taskset -c 0 python scripts/bench_loss.py                  # quickstart sizes, 3 repeats
    OMP_NUM_THREADS=1 python scripts/bench_loss.py --repeats 5 --no-trl-rows --json out.json
    OMP_NUM_THREADS=1 python scripts/bench_loss.py --bf16     # also both shared paths under CPU autocast to bf16

The loss's log-prob call at the quickstart's batch (configs/quickstart/cpu.yaml's sizes by default: 16 completions of
88 tokens as 4 prompts x 4, the bundled chat prompts, SmolLM2-135M with LoRA r16 on every layer, temperature 0.9), timed as one forward with entropies
(GRPOTrainer's `_compute_loss` asks for them) and the backward of a GRPO-style loss (advantage-weighted mean
log-prob over the completion mask) to the LoRA weights, through:

- `shared-trl-head`: rlcw.rl.grpo.shared_prefix with TRL's fused LM head (`add_fused_lm_head`; on CPU its torch
  fallback), the path rlcw took before rlcw.rl.fused_logprobs;
- `shared-own-head`: the same with rlcw.rl.fused_logprobs, the CPU default;
- `trl-rows` (off with --no-trl-rows): TRL's own `_get_per_token_logps_and_entropies`, every row's prompt included.

Then the LM head alone on the batch's 1408 completion hidden states: `head-trl` (TRL's ChunkedLogProbFunction, as
its fused head calls it) against `head-own` (rlcw.rl.fused_logprobs.token_logprobs), forward with entropies and
backward to the hidden states.

All in one process on the same batch, the paths interleaved per repeat. The completion tokens are drawn at random
from the vocabulary (the cost does not depend on which tokens; all rows run to the 88-token cap, as a cut story
does). For each path: the median and fastest wall-clock seconds; the median CPU seconds of the process, which with
one thread other processes on the core disturb less than wall-clock time, and from which the rest is computed; the
matmul GFLOP the path executes (torch's FlopCounterMode: the backbone, attention, the LM head and their backward);
GFLOP per CPU second; its share of this machine's fp32 matmul rate (scripts/roofline.py's matmul, timed in CPU
seconds in this process); the speed-up over TRL's head. Then the largest gaps between the two heads' log-probs,
entropies and gradients. Timings on a shared machine are noisy: repeat on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import torch
from bench_rl import chat_texts  # scripts/bench_rl.py (this script's folder is on sys.path)
from quickstart_sizes import add_size_args


def cpu_name() -> tuple[str, bool]:
    """(model name, has avx512f) from /proc/cpuinfo (lscpu's 'Model name')."""
    info = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if line.count(":") >= 1)
    info = {k.strip(): v.strip() for k, v in info.items()}
    return info.get("model name", platform.processor()), "avx512f" in info.get("flags", "").split()


def build(args):
    """(PEFT policy with TRL's fused head, input ids (B, P + C), attention mask, completion mask (B, C))."""
    from peft import get_peft_model
    from trl.trainer.grpo_trainer import add_fused_lm_head

    from rlcw.data.prompts import load_prompts
    from rlcw.models import load_causal_lm, load_tokenizer
    from rlcw.recipes.common.models import lora_config
    from rlcw.recipes.common.sections import LoraSection

    tok = load_tokenizer(args.model, padding_side="left")
    model = load_causal_lm(args.model, "float32")
    add_fused_lm_head(model, temperature=args.temperature, outputs=("log_probs", "entropy"))  # as GRPOTrainer does
    lora = LoraSection(r=16, alpha=32, top_layers=args.top_layers)
    model = get_peft_model(model, lora_config(lora, "CAUSAL_LM", model.config.num_hidden_layers))
    for name, p in model.named_parameters():  # LoRA B starts at zero: a trained adapter's gradients flow both ways
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    model.train()
    rows = load_prompts("bundled", "train")[: args.batch // args.num_generations]
    texts = chat_texts(tok, rows, args.num_generations)
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    g = torch.Generator().manual_seed(0)
    completion = torch.randint(0, model.config.vocab_size, (args.batch, args.completion_tokens), generator=g)
    cmask = torch.ones_like(completion)
    ids = torch.cat([enc["input_ids"], completion], 1)
    mask = torch.cat([enc["attention_mask"], cmask], 1)
    return model, ids, mask, cmask


def loss_steps(args, model, ids, mask, cmask) -> dict:
    """name -> a step: one log-prob forward with entropies and the backward of a GRPO-style loss (advantage-weighted
    mean log-prob over the completion mask) to the LoRA weights; it returns (log-probs, entropies, LoRA grads)."""
    from trl import GRPOTrainer

    from rlcw.rl.grpo.shared_prefix import shared_prefix_logps

    fake = SimpleNamespace(accelerator=SimpleNamespace(autocast=nullcontext, is_main_process=True))
    advantages = torch.randn(ids.size(0), generator=torch.Generator().manual_seed(1))
    m = cmask.float()

    def step(logps_fn):
        def run():
            model.zero_grad(set_to_none=True)
            logps, ent = logps_fn(model, ids, mask, cmask.size(1))
            (-(logps * advantages[:, None] * m).sum() / m.sum()).backward()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
            return logps.detach(), ent.detach(), grads

        return run

    def shared(own_head: bool, autocast=nullcontext):
        return lambda *a: shared_prefix_logps(*a, args.temperature, True, autocast, own_head=own_head)

    out = {"shared-trl-head": step(shared(False)), "shared-own-head": step(shared(True))}
    if args.bf16:  # what train.bf16=true runs: the accelerator's CPU autocast to bf16 around each group's forward
        bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
        out |= {"shared-trl-head-bf16": step(shared(False, bf16)), "shared-own-head-bf16": step(shared(True, bf16))}
    if args.trl_rows:
        out["trl-rows"] = step(
            lambda *a: GRPOTrainer._get_per_token_logps_and_entropies(fake, *a, compute_entropy=True)[:2]
        )
    return out


def head_steps(args, model, ids, mask, cmask) -> dict:
    """name -> the LM head alone on the batch's completion hidden states (N, H): forward with entropies and the
    backward of the advantage-weighted log-probs to the hidden states, through TRL's head and rlcw's."""
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    from rlcw.rl.fused_logprobs import token_logprobs

    base = model.get_base_model()
    keep = cmask.size(1)
    with torch.no_grad():
        hidden = base.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -keep - 1 : -1]
    hidden = hidden.reshape(-1, hidden.size(-1)).contiguous().requires_grad_()  # (N, H)
    targets, weight = ids[:, -keep:].reshape(-1), base.get_output_embeddings().weight
    weights = torch.randn(hidden.size(0), generator=torch.Generator().manual_seed(1))

    def step(head):
        def run():
            hidden.grad = None
            logps, ent = head()
            (logps * weights).sum().backward()
            return logps.detach(), ent.detach(), {"hidden": hidden.grad.clone()}

        return run

    outputs = ("log_probs", "entropy")  # the chunk width GRPO's fused head uses (TRL's _CHUNKED_LOGPROB_CHUNK_SIZE)
    trl = step(
        lambda: ChunkedLogProbFunction.apply(
            hidden, weight, None, targets, args.temperature, 32768, None, 1.0, outputs
        )[:2]
    )
    own = step(lambda: token_logprobs(hidden, weight, targets, args.temperature, entropy=True))
    return {"head-trl": trl, "head-own": own}


def _inplace_addmm_flop(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


def counted(step) -> tuple[tuple, float]:
    """(the step's outputs, the matmul GFLOP it executes: mm, addmm, bmm, attention, forward and backward). torch's
    counter leaves out the in-place addmm_ (TRL's head accumulates its backward with it): counted here."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.addmm_: _inplace_addmm_flop}) as counter:
        out = step()
    return out, counter.get_total_flops() / 1e9


def timed(steps: dict, repeats: int) -> tuple[dict, dict]:
    """({name: {"seconds", "cpu_seconds", "gflop"}}, {name: the step's outputs}), the steps interleaved."""
    results = {k: {"seconds": [], "cpu_seconds": []} for k in steps}
    outputs = {}
    for k, step in steps.items():  # warm-up, the outputs to compare, and the FLOP count
        outputs[k], results[k]["gflop"] = counted(step)
        print(f"{k}: warmed up, {results[k]['gflop']:.1f} GFLOP of matmuls", flush=True)
    for i in range(repeats):
        for k, step in steps.items():
            start, cpu = time.perf_counter(), time.process_time()
            step()
            results[k]["cpu_seconds"].append(time.process_time() - cpu)
            results[k]["seconds"].append(time.perf_counter() - start)
        print(f"repeat {i + 1}: " + ", ".join(f"{k} {r['seconds'][-1]:.2f} s" for k, r in results.items()), flush=True)
    return results, outputs


def table(results: dict, base: str, peak: float) -> None:
    """Print (and add to `results`) the medians, GFLOP per CPU second, share of `peak` and speed-up over `base`."""
    print(f"{'path':<17}{'wall s':>8}{'min':>7}{'CPU s':>7}{'GFLOP':>7}{'GFLOP/s':>9}{'of rate':>9}{'speed-up':>10}")
    ref = statistics.median(results[base]["cpu_seconds"])
    for k, r in results.items():
        cpu = statistics.median(r["cpu_seconds"])
        r.update(median_s=statistics.median(r["seconds"]), min_s=min(r["seconds"]), cpu_s=cpu)
        r.update(gflop_per_s=r["gflop"] / cpu, share_of_rate=r["gflop"] / cpu / peak, speedup=ref / cpu)
        print(
            f"{k:<17}{r['median_s']:>8.2f}{r['min_s']:>7.2f}{cpu:>7.2f}{r['gflop']:>7.1f}{r['gflop_per_s']:>9.1f}"
            f"{r['share_of_rate']:>9.0%}{r['speedup']:>9.2f}x"
        )


def gaps(outputs: dict, old: str, new: str, mask: torch.Tensor) -> dict:
    """Largest gaps between two paths' log-probs and entropies (where `mask`) and gradients (relative to the max)."""
    (lp0, ent0, g0), (lp1, ent1, g1) = outputs[old], outputs[new]
    return {
        "logp_max_abs": (lp0 - lp1)[mask].abs().max().item(),
        "entropy_max_abs": (ent0 - ent1)[mask].abs().max().item(),
        "grad_max_rel": max(((g0[n] - g1[n]).abs().max() / g0[n].abs().max()).item() for n in g0),
    }


def matmul_rate_cpu(repeats: int = 20) -> float:
    """FLOP/s of scripts/roofline.py's fp32 matmul (the model's widths), per CPU second, fastest of `repeats`."""
    x, w = torch.randn(1024, 576), torch.randn(576, 1536)
    best = float("inf")
    for _ in range(repeats + 1):
        start = time.process_time()
        torch.mm(x, w)
        best = min(best, time.process_time() - start)
    return 2 * 1024 * 576 * 1536 / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    add_size_args(p, "--completion-tokens")  # the quickstart's, from its config
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-trl-rows", dest="trl_rows", action="store_false", help="skip TRL's every-row path")
    p.add_argument("--bf16", action="store_true", help="also both shared paths under CPU autocast to bf16")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()

    name, avx512 = cpu_name()
    affinity = sorted(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    print(f"machine: {name}, avx512f: {'yes' if avx512 else 'no'}; torch threads {threads}, cores {affinity}")
    model, ids, mask, cmask = build(args)
    prompt = int(mask[:, : -args.completion_tokens].sum(1).float().mean())
    print(
        f"batch: {args.batch} rows ({args.num_generations} a prompt), prompt ~{prompt} tokens, {cmask.size(1)} scored"
    )
    report = {"args": vars(args), "machine": name, "avx512f": avx512, "threads": torch.get_num_threads()}
    parts = {
        "head": (head_steps(args, model, ids, mask, cmask), "head-trl", "head-own"),
        "loss": (loss_steps(args, model, ids, mask, cmask), "shared-trl-head", "shared-own-head"),
    }
    for part, (steps, old, new) in parts.items():
        print(f"-- {part}: timing", flush=True)
        results, outputs = timed(steps, args.repeats)
        same = cmask.bool().reshape(outputs[old][0].shape)
        report[part] = {"results": results, "gaps": gaps(outputs, old, new, same)}
        if f"{new}-bf16" in outputs:  # what bf16 autocast moves, against the fp32 path
            report[part]["bf16_gaps"] = gaps(outputs, new, f"{new}-bf16", same)
    report["matmul_gflops"] = peak = matmul_rate_cpu() / 1e9
    print(f"fp32 matmul rate here: {peak:.1f} GFLOP per CPU second (scripts/roofline.py's shape, same process)")
    for part, (_, old, new) in parts.items():
        print(f"-- {part} forward + backward (GFLOP/s per CPU second)")
        table(report[part]["results"], old, peak)
        print(f"{new} vs {old}: " + ", ".join(f"{k} {v:.2e}" for k, v in report[part]["gaps"].items()))
        if "bf16_gaps" in report[part]:
            print(f"{new}-bf16 vs {new}: " + ", ".join(f"{k} {v:.2e}" for k, v in report[part]["bf16_gaps"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
