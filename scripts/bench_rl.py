"""Benchmark one GRPO step on the embedded model, split into its parts, at the quickstart sizes.

    OMP_NUM_THREADS=2 python scripts/bench_rl.py                       # the quickstart's sizes (its config): 4 prompts x 4 of 88 tokens
    OMP_NUM_THREADS=2 python scripts/bench_rl.py --step-samplers fast-bf16 fast-bf16-cdf --kl --probe --roofline   # step split before/after
    python scripts/bench_rl.py --rm runs/quickstart/train_rm/model --batch 8 --max-new-tokens 80 --repeats 2 --json out.json
    OMP_NUM_THREADS=1 python scripts/bench_rl.py --fast-rollout --merged-rollout   # candidates vs TRL's path, same run
    OMP_NUM_THREADS=1 python scripts/bench_rl.py --fast-rollout --bf16-rollout --max-new-tokens 128   # TRL path vs fast vs fast+bf16
    OMP_NUM_THREADS=2 python scripts/bench_rl.py --kl --batch 16 --num-generations 8 --max-new-tokens 88   # KL step: 1 forward vs 2
    /usr/bin/time -v python scripts/bench_rl.py --real-steps train.max_steps=3 reward.rm_path=runs/quickstart/train_rm/model  # a real rlcw grpo run, split
    python scripts/bench_rl.py --grpo-config runs/quickstart/grpo/config.yaml --real-steps train.max_steps=5 \
        --real-variants "no-shared-prefix no-compact" ""   # before/after, same process

Parts (timed separately, same model, same batch): generation (the rollout: transformers
`generate` with sampling exactly as TRL's GRPOTrainer calls it: left-padded chat prompts,
do_sample, temperature, top_p, max_new_tokens), reward (the BT RM scorer on the completions),
loss forward/backward (token log-probs of the completions under the LoRA policy, the DAPO-style
GRPO loss with group-normalised advantages), optimizer (AdamW step). It reports rollout tokens/s
(`--merged-rollout`: also with the LoRA merged into the weights for generation, as vLLM-style
rollouts do, timed in the same run on the same prompts; `--fast-rollout`: rlcw.rl.grpo.rollout's sampler, the
`rollout.kind=fast` candidate, likewise; `--bf16-rollout`: that sampler on a bf16 rollout copy,
`rollout.precision=bf16`, with the mean/max |logprob| gap of its tokens between the bf16 copy and the fp32 policy) and each part's share of the step, and the peak resident memory of the process (ru_maxrss).
This is a decomposition of the step rlcw's `grpo` runs, not TRL's internal timer: TRL adds its own
bookkeeping (logging, reward gathering) on top; compare with `rlcw grpo`'s seconds per step.
`--step-samplers A B ...`: the step's rollout by each (TRL's `generate`, or rlcw.sampling on the fp32/bf16
rollout copy with the multinomial or inverse-CDF draw), steps interleaved, and each one's median split per part
with the KL-to-start (`--kl`) and learning-probe (`--probe`) forwards amortised over `--every` steps, as the
quickstart runs them. `--roofline`: each sampler's tok/s as a share of this machine's roofline (scripts/roofline.py).
`--real-variants A B ...`: the `--real-steps` run once per variant (each a space-separated list of further
overrides and of the rollout's internal switches to turn off, which have no config keys: `no-shared-prefix` runs
TRL's log-prob forward, `no-compact` keeps ended rows in the decode batch, `no-prepack` samples from unpacked
weights), one after another in this process, with each part's mean over the steps and its ratio to the first.
Timings on a shared machine are noisy: run it on a quiet one and repeat.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import resource
import statistics
import time
from pathlib import Path
from unittest import mock

import roofline  # scripts/roofline.py (this script's folder is on sys.path)
import torch
from quickstart_sizes import add_size_args


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KB -> GB (Linux)


def completion_lengths(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Tokens up to and including the first EOS per row (B,), the rest is padding."""
    is_eos = completion_ids == eos_id
    first = torch.where(
        is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full((completion_ids.size(0),), completion_ids.size(1))
    )
    return first


@torch.inference_mode()
def logprob_mismatch(ref, other, prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """|log p_ref - log p_other| of each sampled completion token (flat): the rollout's off-policy gap."""
    from rlcw.sampling import left_pad

    ids, mask = left_pad([p + c for p, c in zip(prompts, completions, strict=False)], pad_id)  # (B, L)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    keep = torch.zeros_like(mask, dtype=torch.bool)  # completion token positions
    for i, c in enumerate(completions):
        if c:
            keep[i, -len(c) :] = True
    out = []
    for m in (ref, other):
        logits = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1].float()  # (B, L-1, V)
        out.append(torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)[keep[:, 1:]])
    return (out[0] - out[1]).abs()


@torch.inference_mode()
def is_statistics(ref, prompts, completions, sampler_logps, pad_id: int, temperature: float, cap: float) -> dict:
    """The GRPO loss's truncated importance sampling of these samples: weights min(pi/mu, cap) with pi the fp32
    policy at the sampling temperature (as TRL's loss computes it) and mu the sampler's own log-probs."""
    from rlcw.rl.grpo.is_correction import is_stats, truncated_is_weights
    from rlcw.sampling import left_pad

    ids, mask = left_pad([p + c for p, c in zip(prompts, completions, strict=False)], pad_id)  # (B, L)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = ref(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1].float() / temperature
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, L-1)
    width = max(map(len, completions))
    pi, mu, keep = torch.zeros(len(prompts), width), torch.zeros(len(prompts), width), torch.zeros(len(prompts), width)
    for i, (c, lp) in enumerate(zip(completions, sampler_logps, strict=True)):
        if c:
            pi[i, : len(c)], mu[i, : len(c)], keep[i, : len(c)] = logp[i, -len(c) :], torch.tensor(lp), 1.0
    _, sums = truncated_is_weights(pi, mu, keep, cap)
    return is_stats(sums)


def completion_logps(model, out, attn, prompt_len: int, completion: torch.Tensor) -> torch.Tensor:
    """(B, C) log-probs of the completion tokens, as the loss computes them."""
    logits = model(input_ids=out, attention_mask=attn).logits[:, prompt_len - 1 : -1].float()  # (B, C, V)
    return torch.log_softmax(logits, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)


def chat_texts(tok, rows: list[dict], num_generations: int) -> list[str]:
    """Each prompt row's chat-template text with the default system prompt, `num_generations` times (a GRPO batch)."""
    from rlcw.generation import chat_messages
    from rlcw.recipes.common.sections import DEFAULT_SYSTEM_PROMPT

    return [
        tok.apply_chat_template(
            chat_messages(DEFAULT_SYSTEM_PROMPT, r["prompt"]), tokenize=False, add_generation_prompt=True
        )
        for r in rows
        for _ in range(num_generations)
    ]


def build(args):
    from peft import get_peft_model

    from rlcw.data.prompts import load_prompts
    from rlcw.models import load_causal_lm, load_tokenizer
    from rlcw.recipes.common.models import lora_config
    from rlcw.recipes.common.sections import LoraSection

    tok = load_tokenizer(args.model, padding_side="left")
    model = load_causal_lm(args.model, "float32")
    model = get_peft_model(
        model,
        lora_config(
            LoraSection(r=16, alpha=32, top_layers=args.top_layers), "CAUSAL_LM", model.config.num_hidden_layers
        ),
    )
    rows = load_prompts("bundled", "train")[: args.batch // args.num_generations]
    texts = chat_texts(tok, rows, args.num_generations)
    return tok, model, rows, texts


# --step-samplers: what generates the step's rollout -> (rollout copy precision, draw); "trl" is `generate` on the PEFT model
STEP_SAMPLERS = {
    "trl": None,
    "fast-fp32": ("fp32", "multinomial"),
    "fast-bf16": ("bf16", "multinomial"),
    "fast-bf16-cdf": ("bf16", "inverse_cdf"),
}


def fast_generate(policy, enc, gen_cfg, tok, draw: str) -> torch.Tensor:
    """The rollout by rlcw.sampling on a MergedPolicy, laid out as `generate` returns it: (B, P + C), pad after EOS."""
    from rlcw.sampling import sample_with_logprobs

    rows = [r[m.bool()].tolist() for r, m in zip(enc["input_ids"], enc["attention_mask"], strict=False)]
    comps, _ = sample_with_logprobs(
        policy.refresh(), rows, gen_cfg, eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, draw=draw
    )
    width = max(map(len, comps))
    completion = torch.full((len(comps), width), tok.pad_token_id, dtype=enc["input_ids"].dtype)  # (B, C)
    for i, c in enumerate(comps):
        completion[i, : len(c)] = torch.tensor(c)
    return torch.cat([enc["input_ids"], completion], 1)


def step(
    args, tok, model, rows, texts, scorer, optimizer, merged=None, merged_bf16=None, sampler="trl", probe=None
) -> dict:
    from transformers import GenerationConfig

    t = {}
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    # exactly the GenerationConfig GRPOTrainer builds without vLLM (GRPOConfig defaults: top_k 0, min_p None, no penalty)
    gen_cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        do_sample=True,
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=[tok.eos_token_id],
        disable_compile=True,
    )
    model.eval()
    wall = time.perf_counter()
    start = time.perf_counter()
    if STEP_SAMPLERS[sampler] is None:
        with torch.no_grad():
            out = model.generate(**enc, generation_config=gen_cfg)  # (B, P + C)
    else:
        precision, draw = STEP_SAMPLERS[sampler]
        out = fast_generate(merged_bf16 if precision == "bf16" else merged, enc, gen_cfg, tok, draw)
    t["generation_s"] = time.perf_counter() - start
    prompt_len = enc["input_ids"].size(1)
    completion = out[:, prompt_len:]  # (B, C)
    lengths = completion_lengths(completion, tok.eos_token_id)
    t["rollout_tokens"] = int(lengths.sum())
    t["rollout_tok_per_s"] = t["rollout_tokens"] / t["generation_s"]
    stories = tok.batch_decode(completion, skip_special_tokens=True)

    start = time.perf_counter()
    if scorer is not None:
        rewards = torch.tensor(scorer.score([r["prompt"] for r in rows for _ in range(args.num_generations)], stories))
    else:
        rewards = lengths.float()  # stand-in reward when no RM is given
    t["reward_s"] = time.perf_counter() - start
    if args.merged_rollout:  # candidate: LoRA merged into the base weights for the rollout, unmerged after
        torch.manual_seed(1)
        start = time.perf_counter()
        model.merge_adapter()
        with torch.no_grad():
            merged_out = model.generate(**enc, generation_config=gen_cfg)
        model.unmerge_adapter()
        t["merged_generation_s"] = time.perf_counter() - start
        merged_tokens = int(completion_lengths(merged_out[:, prompt_len:], tok.eos_token_id).sum())
        t["merged_rollout_tok_per_s"] = merged_tokens / t["merged_generation_s"]
        t["merged_speedup"] = t["merged_rollout_tok_per_s"] / t["rollout_tok_per_s"]
        wall += t["merged_generation_s"]

    if args.fast_rollout:  # rl.grpo.rollout: merged-weight copy + shared prefill + lean sampling loop, same prompts
        from rlcw.sampling import sample_with_logprobs

        rows_ids = [r[m.bool()].tolist() for r, m in zip(enc["input_ids"], enc["attention_mask"], strict=False)]

        def timed_sample(name: str, policy, seed: int) -> tuple[list[list[int]], list[list[float]]]:
            """Sample with rlcw.rl.grpo.rollout on `policy` (with the per-token log-probs the importance-sampling
            correction needs); record `<name>_generation_s`, tok/s and the ratio to TRL's path."""
            torch.manual_seed(seed)
            start = time.perf_counter()
            out = sample_with_logprobs(
                policy.refresh(), rows_ids, gen_cfg, eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id
            )
            t[f"{name}_generation_s"] = time.perf_counter() - start
            t[f"{name}_rollout_tok_per_s"] = sum(map(len, out[0])) / t[f"{name}_generation_s"]
            t[f"{name}_speedup"] = t[f"{name}_rollout_tok_per_s"] / t["rollout_tok_per_s"]
            return out

        timed_sample("fast", merged, 2)
        wall += t["fast_generation_s"]  # a candidate, not part of the step
        if args.bf16_rollout:  # the same sampler on the bf16 rollout copy (rollout.precision=bf16)
            bf16, bf16_logps = timed_sample("bf16", merged_bf16, 3)
            # the correction itself costs no forward in training (the loss's own log-probs); measured here apart
            stats = is_statistics(
                merged.model, rows_ids, bf16, bf16_logps, tok.pad_token_id, args.temperature, args.is_cap
            )
            t.update({f"bf16_is_{k}": v for k, v in stats.items()})
            t["bf16_over_fast"] = t["bf16_rollout_tok_per_s"] / t["fast_rollout_tok_per_s"]
            wall += t["bf16_generation_s"]
            start = time.perf_counter()
            diff = logprob_mismatch(merged.model, merged_bf16.model, rows_ids, bf16, tok.pad_token_id)
            t["bf16_logp_absdiff_mean"], t["bf16_logp_absdiff_max"] = float(diff.mean()), float(diff.max())
            wall += time.perf_counter() - start

    groups = rewards.view(-1, args.num_generations)
    adv = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)).view(-1)  # (B,)
    mask = (torch.arange(completion.size(1))[None, :] < lengths[:, None]).float()  # (B, C)
    attn = torch.cat([enc["attention_mask"], mask.long()], dim=1)
    model.train()
    start = time.perf_counter()
    logp = completion_logps(model, out, attn, prompt_len, completion)  # (B, C)
    ratio = torch.exp(logp - logp.detach())
    loss = -(ratio * adv[:, None] * mask).sum() / mask.sum().clamp(min=1)  # DAPO: token-level mean
    loss.backward()
    t["loss_fwd_bwd_s"] = time.perf_counter() - start

    if args.kl:  # KL to the start (a `train.log_kl_every` step), both ways, after the loss forward it can reuse
        kl_now, kl_before = {}, {}
        for key in ("start", "policy", "start_again"):  # start first and last: the two-forward time brackets drift
            start = time.perf_counter()
            with torch.no_grad():
                if key == "policy":  # what the KL step also ran before: a fresh policy forward
                    completion_logps(model, out, attn, prompt_len, completion)
                else:
                    with model.disable_adapter():
                        completion_logps(model, out, attn, prompt_len, completion)
            (kl_before if key == "policy" else kl_now)[key] = time.perf_counter() - start
        t["kl_now_s"] = statistics.mean(kl_now.values())  # the start forward only (policy side: the loss's)
        t["kl_before_s"] = t["kl_now_s"] + kl_before["policy"]
        t["kl_speedup"] = t["kl_before_s"] / t["kl_now_s"]
        wall += sum(kl_now.values()) + kl_before["policy"]  # measured apart, not part of the step

    if probe is not None:  # the learning probe's forward on its fixed texts (a `probe.every_steps` step)
        start = time.perf_counter()
        probe._logps(model)
        t["probe_s"] = time.perf_counter() - start
        wall += t["probe_s"]  # measured apart, reported amortised over probe.every_steps

    start = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t["optimizer_s"] = time.perf_counter() - start
    parts = t["generation_s"] + t["reward_s"] + t["loss_fwd_bwd_s"] + t["optimizer_s"]
    t["step_s"] = time.perf_counter() - wall  # wall time of the step (candidates excluded)
    t["other_s"] = t["step_s"] - parts  # tokenising, decoding, advantages, masks: outside the four parts
    t["share_other"] = t["other_s"] / t["step_s"]
    parts = t["step_s"]
    t.update({f"share_{k[:-2]}": t[k] / parts for k in ("generation_s", "reward_s", "loss_fwd_bwd_s", "optimizer_s")})
    return t


SWITCHES = ("shared-prefix", "compact", "prepack")  # the rollout's internal switches, on in every rlcw grpo run


def switched_off(words: list[str]) -> contextlib.ExitStack:
    """A context in which the switches named `no-<switch>` in `words` are off: RlcwGRPOTrainer's `shared_prefix`
    and make_fast_rollout_func's `compact` and `prepack`, as `rlcw grpo` builds them."""
    import rlcw.rl.grpo.seam as seam
    import rlcw.rl.grpo.trainer as trainer

    off = {w.removeprefix("no-") for w in words}
    if off - set(SWITCHES):
        raise SystemExit(f"unknown switch in {words}: no-<one of {', '.join(SWITCHES)}>")
    stack = contextlib.ExitStack()
    if "shared-prefix" in off:
        cls = functools.partial(trainer.RlcwGRPOTrainer, shared_prefix=False)
        stack.enter_context(mock.patch.object(trainer, "RlcwGRPOTrainer", cls))
    kwargs = {k: False for k in ("compact", "prepack") if k in off}
    if kwargs:
        fn = functools.partial(seam.make_fast_rollout_func, **kwargs)
        stack.enter_context(mock.patch.object(seam, "make_fast_rollout_func", fn))
    return stack


def real_variants(config: str | None, overrides: list[str], variants: list[str]) -> list[dict]:
    """`real_steps` once per variant (each a space-separated list of further overrides and `no-<switch>` words)."""
    out = []
    for i, variant in enumerate(variants):
        words = variant.split()
        sets = [w for w in words if "=" in w]
        with switched_off([w for w in words if "=" not in w]):
            res = real_steps(config, [*overrides, *sets, f"run_name=bench_variant{i}", "overwrite=true"])
        keys = [k for k in res["steps"][0] if k.endswith("_s")]
        res["mean"] = {k: statistics.mean(r[k] for r in res["steps"]) for k in keys}
        res["variant"] = variant
        out.append(res)
    base = out[0]["mean"]
    print("part (s, mean over steps 2..)  " + "  ".join(f"[{r['variant'] or 'as configured'}]" for r in out))
    for k in base:
        print(
            f"{k[:-2]:>14}  "
            + "  ".join(f"{r['mean'][k]:8.2f} ({base[k] / max(r['mean'][k], 1e-9):.2f}x)" for r in out)
        )
    return out


def real_steps(config: str | None, overrides: list[str]) -> dict:
    """Run `rlcw grpo` (TRL GRPOTrainer) with timers on its four parts; per-step split from step 2 on.

    generation = GRPOTrainer._generate (rollout incl. TRL's tokenising), reward = _calculate_rewards,
    loss fwd/bwd = compute_loss + Accelerator.backward, optimizer = AdamW.step; everything else in a
    step (old/ref log-probs, rlcw's step logger and its KL-to-start forward, monitors, TRL logging,
    zero_grad, scheduler) is "other". Step boundaries: the end of each optimizer step.
    """
    from accelerate import Accelerator
    from trl.trainer import grpo_trainer as G

    from rlcw.config import load_config
    from rlcw.recipes.grpo import GRPORecipeConfig
    from rlcw.recipes.grpo import main as grpo_main

    acc, marks = {"generation": 0.0, "reward": 0.0, "loss_fwd_bwd": 0.0, "optimizer": 0.0}, []

    def timed(owner, name, key):
        orig = getattr(owner, name)

        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                acc[key] += time.perf_counter() - start
                if key == "optimizer":
                    marks.append((time.perf_counter(), dict(acc)))

        setattr(owner, name, wrapper)
        return orig

    patched = [
        (G.GRPOTrainer, "_generate", "generation"),
        (G.GRPOTrainer, "_calculate_rewards", "reward"),
        (G.GRPOTrainer, "compute_loss", "loss_fwd_bwd"),
        (Accelerator, "backward", "loss_fwd_bwd"),
        (torch.optim.AdamW, "step", "optimizer"),
    ]
    originals = [(o, n, timed(o, n, k)) for o, n, k in patched]
    try:
        summary = grpo_main(load_config(GRPORecipeConfig, config, overrides))
    finally:
        for owner, name, orig in originals:
            setattr(owner, name, orig)
    steps = []
    for (t0, a0), (t1, a1) in zip(marks, marks[1:], strict=False):
        row = {f"{k}_s": a1[k] - a0[k] for k in a1}
        row["step_s"] = t1 - t0
        row["other_s"] = row["step_s"] - sum(a1[k] - a0[k] for k in a1)
        row.update({f"share_{k[:-2]}": v / row["step_s"] for k, v in list(row.items()) if k != "step_s"})
        steps.append(row)
    return {"status": summary.get("status"), "run": summary.get("run_dir"), "steps": steps}


# sampler name in step()'s results -> (its tok/s key, weight precision)
SAMPLERS = {
    "TRL generate (PEFT, fp32)": ("rollout_tok_per_s", "fp32"),
    "merged LoRA generate (fp32)": ("merged_rollout_tok_per_s", "fp32"),
    "rlcw fast (fp32)": ("fast_rollout_tok_per_s", "fp32"),
    "rlcw fast (bf16)": ("bf16_rollout_tok_per_s", "bf16"),
}


def base_params(model) -> int:
    """Parameters a decode step reads: the base model's (tied embeddings once), not the LoRA factors."""
    return sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)


def roofline_table(
    machine: list[dict], results: list[dict], params: int, batch: int, step_sampler: str = "trl"
) -> list[dict]:
    """Print and return each sampler's median tok/s beside the roofline bound at `batch` and its precision.

    The machine's figures are the better of the two measurements (before and after the steps): the bound is
    what the hardware allows, and other load on a shared machine only lowers a measurement."""
    best = {k: max(m[k] for m in machine) for k in ("bandwidth_gbs", "fp32_gflops", "bf16_gflops")}
    print(
        f"roofline: triad {best['bandwidth_gbs']:.1f} GB/s, matmul fp32 {best['fp32_gflops']:.0f} / bf16 "
        f"{best['bf16_gflops']:.0f} GFLOP/s (best of {len(machine)}: "
        + "; ".join(f"{m['bandwidth_gbs']:.1f} GB/s, {m['fp32_gflops']:.0f}/{m['bf16_gflops']:.0f}" for m in machine)
        + f"), {params / 1e6:.1f}M weights read a decode step, batch {batch}"
    )
    rows = []
    samplers = dict(SAMPLERS)
    if STEP_SAMPLERS[step_sampler] is not None:  # the step's own rollout ran rlcw.sampling, not TRL's generate
        del samplers["TRL generate (PEFT, fp32)"]
        samplers[f"step rollout ({step_sampler})"] = ("rollout_tok_per_s", STEP_SAMPLERS[step_sampler][0])
    for name, (key, precision) in samplers.items():
        if key not in results[0]:
            continue
        tok_s = statistics.median(r[key] for r in results)
        bound = roofline.decode_bound(params, batch, precision, best["bandwidth_gbs"], best[f"{precision}_gflops"])
        rows.append(
            {"sampler": name, "precision": precision, "tok_s": tok_s, **bound, "share": tok_s / bound["bound_tok_s"]}
        )
        print(
            f"  {name:32s} {tok_s:7.1f} tok/s  bound {bound['bound_tok_s']:7.1f} ({bound['limit']})  "
            f"share {tok_s / bound['bound_tok_s']:.0%}"
        )
    return rows


def step_splits(by_sampler: dict[str, list[dict]], every: int) -> dict[str, dict]:
    """Print and return each step sampler's median seconds per part of a quickstart step: generation, reward,
    loss fwd/bwd, optimizer, other, and the KL-to-start and probe forwards amortised over the steps that run them
    (`every`: train.log_kl_every and probe.every_steps, 3 in the quickstart), with the ratio to the first sampler."""
    out = {}
    for name, steps in by_sampler.items():
        row = {
            k: statistics.median(r[f"{k}_s"] for r in steps)
            for k in ("generation", "reward", "loss_fwd_bwd", "optimizer", "other")
        }
        for key, part in (("kl_now_s", "kl"), ("probe_s", "probe")):
            if key in steps[0]:
                row[part] = statistics.median(r[key] for r in steps) / every
        row["step"] = sum(row.values())
        out[name] = row
    first = next(iter(out.values()))
    for name, row in out.items():
        print(
            f"step split ({name}): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in row.items() if k != "step")
            + f"; step {row['step']:.2f} s ({first['step'] / row['step']:.2f}x the first)"
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument(
        "--rm", default="runs/quickstart/train_rm/model", help="BT RM folder; absent -> a length stand-in reward"
    )
    add_size_args(p, "--max-new-tokens")  # the quickstart's, from its config
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--merged-rollout",
        action="store_true",
        help="also time the rollout with the LoRA merged (same batch and settings)",
    )
    p.add_argument(
        "--fast-rollout",
        action="store_true",
        help="also time rlcw.rl.grpo.rollout (rollout.kind=fast) on the same prompts",
    )
    p.add_argument(
        "--bf16-rollout",
        action="store_true",
        help="with --fast-rollout: also time it on a bf16 rollout copy (rollout.precision=bf16) and measure its logprob gap",
    )
    p.add_argument(
        "--kl",
        action="store_true",
        help="also time a KL-to-the-start step: the start forward alone (now) vs + a policy forward (before)",
    )
    p.add_argument(
        "--step-samplers",
        nargs="+",
        default=["trl"],
        choices=list(STEP_SAMPLERS),
        help="what generates each step's rollout; several: interleaved steps of each, split side by side "
        "(fast-bf16 = the quickstart's sampler, fast-bf16-cdf = with rollout.draw=inverse_cdf)",
    )
    p.add_argument("--probe", action="store_true", help="also time the learning probe's forward on its 8 texts")
    p.add_argument("--every", type=int, default=3, help="steps between KL and probe forwards (quickstart: 3)")
    p.add_argument("--is-cap", type=float, default=3.0, help="rollout.is_cap for the bf16 correction statistics")
    p.add_argument(
        "--roofline",
        action="store_true",
        help="also measure this machine's bandwidth and matmul rates (before and after the steps) and print each "
        "sampler's tok/s as a share of the roofline bound at its batch and precision (scripts/roofline.py)",
    )
    p.add_argument("--json", help="write the results here")
    p.add_argument(
        "--real-steps",
        nargs="*",
        metavar="KEY=VALUE",
        help="instead: time a real `rlcw grpo` run (--grpo-config plus these overrides, e.g. train.max_steps=3)",
    )
    p.add_argument("--grpo-config", default="configs/grpo/cpu.yaml")
    p.add_argument("--real-variants", nargs="+", metavar="OVERRIDES", help="with --real-steps: one run per variant")
    args = p.parse_args()
    if args.real_variants:
        out = real_variants(args.grpo_config, args.real_steps or [], args.real_variants)
        if args.json:
            Path(args.json).write_text(json.dumps({"variants": out, "threads": torch.get_num_threads()}, indent=2))
        return
    if args.real_steps is not None:
        out = real_steps(args.grpo_config, args.real_steps)
        for i, r in enumerate(out["steps"], start=2):
            print(f"real step {i}: " + ", ".join(f"{k}={v:.3g}" for k, v in r.items()), flush=True)
        out.update({"peak_rss_gb": peak_rss_gb(), "threads": torch.get_num_threads()})
        print(f"peak RSS {out['peak_rss_gb']:.2f} GB; threads {out['threads']}; run {out['run']} ({out['status']})")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        return
    torch.manual_seed(0)
    tok, model, rows, texts = build(args)
    scorer = None
    if Path(args.rm).is_dir():
        from rlcw.rm.scoring import load_rm

        scorer = load_rm(args.rm)
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4)
    merged = merged_bf16 = None
    if args.bf16_rollout and not args.fast_rollout:
        p.error("--bf16-rollout needs --fast-rollout (it is compared with it in the same run)")
    step_fast = [STEP_SAMPLERS[x] for x in args.step_samplers if STEP_SAMPLERS[x]]
    if args.fast_rollout or step_fast:
        from rlcw.rl.grpo.rollout import MergedPolicy

        merged = MergedPolicy(model)
        bf16_needed = args.bf16_rollout or any(prec == "bf16" for prec, _ in step_fast)
        merged_bf16 = MergedPolicy(model, "bf16") if bf16_needed else None
    probe = None
    if args.probe:
        from rlcw.measure.probe import LearningProbe, probe_texts
        from rlcw.recipes.common.sections import DEFAULT_SYSTEM_PROMPT

        probe = LearningProbe(tok, probe_texts("bundled", 8), DEFAULT_SYSTEM_PROMPT, every_steps=args.every, out=None)
    machine = [roofline.measure()] if args.roofline else []
    by_sampler = {x: [] for x in args.step_samplers}
    for i in range(args.repeats):  # interleaved: one step of each sampler per pass
        for name in args.step_samplers:
            r = step(args, tok, model, rows, texts, scorer, optimizer, merged, merged_bf16, name, probe)
            by_sampler[name].append(r)
            print(f"step {i} ({name}): " + ", ".join(f"{k}={v:.3g}" for k, v in r.items()), flush=True)
    results = by_sampler[args.step_samplers[0]]
    split = step_splits(by_sampler, args.every)
    summary = {
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "max_new_tokens": args.max_new_tokens,
        "rm": args.rm if scorer else None,
        "steps": results,
        "step_samplers": by_sampler,
        "step_split": split,
        "peak_rss_gb": peak_rss_gb(),
    }
    for key in ("fast_speedup", "bf16_speedup", "bf16_over_fast", "merged_speedup", "kl_speedup"):
        if key in results[0]:
            vals = [r[key] for r in results]
            summary[key], summary[key + "_median"] = vals, statistics.median(vals)
            base = {"bf16_over_fast": "fast-rollout tok/s", "kl_speedup": "KL seconds now"}.get(key, "TRL-path tok/s")
            what = "KL seconds before" if key == "kl_speedup" else "candidate tok/s"
            print(
                f"{key} ({what} / {base}, per step, interleaved): "
                + ", ".join(f"{v:.2f}x" for v in vals)
                + f"; median {statistics.median(vals):.2f}x"
            )
    if "bf16_is_mean_weight" in results[0]:
        keys = ("bf16_is_mean_abs_gap", "bf16_is_mean_weight", "bf16_is_clipped_share")
        summary.update({k: statistics.median(r[k] for r in results) for k in keys})
        print(
            f"bf16 rollout importance sampling (cap {args.is_cap}, median over steps): mean |gap| "
            f"{summary[keys[0]]:.4f} nats/token, mean weight {summary[keys[1]]:.4f}, clipped share {summary[keys[2]]:.4f}"
        )
    if args.roofline:
        machine.append(roofline.measure())
        summary["roofline"] = roofline_table(machine, results, base_params(model), args.batch, args.step_samplers[0])
    last = results[-1]
    print(
        "step split: "
        + ", ".join(f"{k[6:]} {last[k]:.0%}" for k in last if k.startswith("share_"))
        + f" of {last['step_s']:.1f} s"
    )
    print(f"peak RSS {summary['peak_rss_gb']:.2f} GB; threads {summary['threads']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
