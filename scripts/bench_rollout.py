"""Rollout samplers side by side against this machine's roofline, at the quickstart's sizes, in one run.

    OMP_NUM_THREADS=2 python scripts/bench_rollout.py                        # embedded model, the quickstart's sizes
    python scripts/bench_rollout.py --repeats 3 --json rollout.json
    python scripts/bench_rollout.py --random-weights MODEL_DIR               # config + tokenizer only: same shapes
    python scripts/bench_rollout.py --samplers "fast bf16 dynamic cdf" "fast bf16 dynamic cdf packed" --profile

Samplers (same prompts, same GenerationConfig as TRL's GRPOTrainer: temperature 0.9, top_k 0, top_p 1):
`generate fp32` (transformers `generate`, what TRL's path runs, here without LoRA wrappers), rlcw.sampling's
sampler with its dynamic cache (`fast ... dynamic`) and with a static KV cache
(`fast ... static`), each on fp32 and bf16 weights; `... cdf`: the static-cache sampler with the inverse-CDF
draw (one uniform a row a step instead of torch.multinomial's exponential per vocabulary entry); `fast int8
static`: weight-only int8 linear layers (per output channel, bf16 activations, torch's `_weight_int8pack_mm`)
in the bf16 copy, a candidate; `fast ... dynamic cdf` is the quickstart's sampler (ended rows leave the batch), and
`... packed` the same with every linear layer's weight packed once for oneDNN and attention's q/k/v and the MLP's
gate/up as one product each (rlcw.prepack; `... packed unfused`: packed, not fused); `... concat`: transformers'
DynamicCache as it is, concatenating every layer's cache each step (rlcw.sampling writes into buffers). Repeats are
interleaved (one of each sampler per pass) so a shared machine's load falls on all of them. Each row shows the
median completion tokens/s (up to EOS), decode slots/s (rows x steps, ended rows included), the roofline bound
at the batch and the weights' precision (scripts/roofline.py: triad bandwidth and matmul rates measured in the
same run) and the share. For bf16 and int8 it also reports what the rollout's importance-sampling correction
pays: the mean |log pi_fp32 - log mu| of the sampled tokens and the share of tokens whose weight the cap clips.
With --random-weights (a machine without the embedded model) completions rarely end, and the log-prob gaps
describe random weights, not the model: use those runs for speed only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import roofline  # scripts/roofline.py (this script's folder is on sys.path)
import torch
from quickstart_sizes import add_size_args


class Int8Linear(torch.nn.Module):
    """y = x W^T (+ b) with W stored as int8 per output channel (scale max|W_row| / 127); x runs in bf16."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()  # (out, in)
        scale = w.abs().amax(1).clamp(min=1e-8) / 127
        self.register_buffer("weight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scale.to(torch.bfloat16))
        self.bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.size(-1)).to(torch.bfloat16).contiguous()  # (N, in)
        y = torch._weight_int8pack_mm(flat, self.weight, self.scales)  # (N, out)
        y = y if self.bias is None else y + self.bias
        return y.view(*x.shape[:-1], -1)


def int8_copy(bf16_model) -> torch.nn.Module:
    """The bf16 copy with every Linear (the LM head included) replaced by Int8Linear; embeddings stay bf16."""
    import copy

    model = copy.deepcopy(bf16_model)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(parent, name, Int8Linear(child))
    return model


def load(args):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from rlcw.rl.grpo.rollout import MergedPolicy

    if args.random_weights:
        torch.manual_seed(0)
        tok = AutoTokenizer.from_pretrained(args.random_weights)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.random_weights)).float().eval()
    else:
        from rlcw.models import load_causal_lm, load_tokenizer

        tok, model = load_tokenizer(args.model, padding_side="left"), load_causal_lm(args.model, "float32").eval()
    bf16 = MergedPolicy(model, "bf16").refresh()
    models = {"fp32": model, "bf16": bf16}
    for key in {model_key(s) for s in args.samplers if "packed" in s.split()}:  # "bf16 packed", "fp32 packed unfused"
        precision, *how = key.split()
        models[key] = MergedPolicy(model, precision, prepack=True, fuse="unfused" not in how).refresh()
    if "fast int8 static" in args.samplers:
        models["int8"] = int8_copy(bf16)
    return tok, models


def model_key(sampler: str) -> str:
    """The weights a `fast ...` sampler runs on: its precision, then `packed` / `unfused` where it names them."""
    _, precision, _, *extra = sampler.split()
    return " ".join([precision, *(e for e in extra if e in ("packed", "unfused"))])


def concatenating_cache():
    """rlcw.sampling with transformers' DynamicCache as it is (concatenating every layer's cache each step)."""
    from unittest import mock

    from transformers import DynamicCache

    import rlcw.sampling

    return mock.patch.object(rlcw.sampling, "_growing_cache", lambda config, _: DynamicCache(config=config))


def prompts(tok, batch: int, num_generations: int) -> list[list[int]]:
    """The first batch / num_generations bundled train prompts in the quickstart's chat format, each repeated."""
    from rlcw.data.prompts import load_prompts
    from rlcw.generation import prompt_token_ids

    try:
        from rlcw.recipes.common.sections import DEFAULT_SYSTEM_PROMPT
    except ImportError:  # a bare machine without rlcw's dependencies: the tokenizer's default system prompt
        DEFAULT_SYSTEM_PROMPT = None
    rows = load_prompts("bundled", "train")[: batch // num_generations]
    return [p for p in prompt_token_ids(tok, rows, DEFAULT_SYSTEM_PROMPT) for _ in range(num_generations)]


def run_sampler(name: str, models: dict, ids: list[list[int]], cfg, tok, seed: int) -> dict:
    from rlcw.sampling import left_pad, sample_with_logprobs

    torch.manual_seed(seed)
    start = time.perf_counter()
    if name == "generate fp32":
        x, mask = left_pad(ids, tok.pad_token_id)
        with torch.inference_mode():
            out = models["fp32"].generate(input_ids=x, attention_mask=mask, generation_config=cfg)[:, x.size(1) :]
        seconds = time.perf_counter() - start
        rows = out.tolist()
        comps = [r[: next((i + 1 for i, t in enumerate(r) if t == tok.eos_token_id), len(r))] for r in rows]
        return {"seconds": seconds, "tokens": sum(map(len, comps)), "steps": out.size(1), "comps": comps}
    _, _, cache, *extra = name.split()  # "fast bf16 dynamic cdf packed": inverse-CDF draw, packed weights
    with concatenating_cache() if "concat" in extra else contextlib.nullcontext():
        comps, logps = sample_with_logprobs(
            models[model_key(name)],
            ids,
            cfg,
            eos_ids=[tok.eos_token_id],
            pad_id=tok.pad_token_id,
            cache=cache,
            draw="inverse_cdf" if "cdf" in extra else "multinomial",
        )
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tokens": sum(map(len, comps)),
        "steps": max(map(len, comps)),
        "comps": comps,
        "logps": logps,
    }


SAMPLERS = (
    "generate fp32",
    "fast fp32 dynamic",
    "fast fp32 static",
    "fast bf16 dynamic",
    "fast bf16 static",
    "fast bf16 static cdf",
    "fast fp32 static cdf",
    "fast int8 static",
    "fast bf16 dynamic cdf",
    "fast bf16 dynamic cdf packed unfused",
    "fast bf16 dynamic cdf packed",
    "fast bf16 dynamic cdf packed concat",
    "fast fp32 dynamic cdf",
    "fast fp32 dynamic cdf packed unfused",
    "fast fp32 dynamic cdf packed",
)


def main() -> None:
    from bench_rl import is_statistics
    from transformers import GenerationConfig

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument(
        "--random-weights", metavar="MODEL_DIR", help="config.json + tokenizer: random weights, same shapes"
    )
    add_size_args(p, "--max-new-tokens", lora=False)  # the quickstart's, from its config
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    p.add_argument("--is-cap", type=float, default=3.0, help="rollout.is_cap for the clipped share")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--profile", action="store_true", help="then one more pass of each sampler under torch.profiler")
    args = p.parse_args()
    tok, models = load(args)
    ids = prompts(tok, args.batch, args.num_generations)
    cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens, do_sample=True, temperature=args.temperature, top_p=1.0, top_k=0,
        pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id], disable_compile=True,
    )  # fmt: skip
    machine = [roofline.measure()]
    runs = {s: [] for s in args.samplers}
    gaps = {}
    for r in range(args.repeats + 1):  # pass 0 warms every sampler up and is not counted
        for s in args.samplers:
            out = run_sampler(s, models, ids, cfg, tok, seed=100 + r)
            if r:
                runs[s].append(out)
            print(f"pass {r} {s}: {out['seconds']:.2f} s, {out['tokens']} tokens, {out['steps']} steps", flush=True)
            if r == 1 and "logps" in out and (not s.startswith("fast fp32") or "packed" in s):
                gaps[s] = is_statistics(
                    models["fp32"], ids, out["comps"], out["logps"], tok.pad_token_id, args.temperature, args.is_cap
                )
    machine.append(roofline.measure())
    best = {k: max(m[k] for m in machine) for k in ("bandwidth_gbs", "fp32_gflops", "bf16_gflops")}
    params = sum(t.numel() for t in models["fp32"].parameters())
    print(
        f"roofline: triad {best['bandwidth_gbs']:.1f} GB/s, matmul fp32 {best['fp32_gflops']:.0f} / bf16 "
        f"{best['bf16_gflops']:.0f} GFLOP/s (best of {len(machine)}), {params / 1e6:.1f}M weights, batch {args.batch}, "
        f"{torch.get_num_threads()} threads"
    )
    rows = []
    for s, outs in runs.items():
        precision = s.split()[1]
        rate = best["bf16_gflops"] if precision != "fp32" else best["fp32_gflops"]  # int8 weights run bf16 maths
        bound = roofline.decode_bound(params, args.batch, precision, best["bandwidth_gbs"], rate)
        tok_s = statistics.median(o["tokens"] / o["seconds"] for o in outs)
        slots = statistics.median(args.batch * o["steps"] / o["seconds"] for o in outs)
        row = {"sampler": s, "tok_s": tok_s, "slots_s": slots, **bound, "share": tok_s / bound["bound_tok_s"]}
        row["speedup_vs_generate"] = (
            tok_s / statistics.median(o["tokens"] / o["seconds"] for o in runs["generate fp32"])
            if "generate fp32" in runs
            else None
        )
        row.update({f"is_{k}": v for k, v in gaps.get(s, {}).items()})
        rows.append(row)
        extra = f", IS |gap| {row['is_mean_abs_gap']:.4f} clipped {row['is_clipped_share']:.4f}" if s in gaps else ""
        print(
            f"  {s:20s} {tok_s:7.1f} tok/s ({slots:7.1f} slots/s)  bound {bound['bound_tok_s']:7.1f} ({bound['limit']})"
            f"  share {row['share']:.0%}  x{row['speedup_vs_generate'] or float('nan'):.2f} generate{extra}"
        )
    if args.profile:  # where each sampler's time goes, by operator
        from torch.profiler import profile

        for s in args.samplers:
            with profile() as prof:
                run_sampler(s, models, ids, cfg, tok, seed=100)
            print(f"{s}\n{prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=12)}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": machine, "best": best, "args": vars(args), "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
