"""Fast GRPO rollouts on CPU: a merged-weight copy of the LoRA policy and a lean sampling loop (rlcw.sampling).

    from rlcw.rl.grpo.rollout import make_fast_rollout_func
    GRPOTrainer(..., rollout_func=make_fast_rollout_func())     # what `rlcw grpo rollout.kind=fast` does

What it does differently from TRL's own path (transformers `generate` on the PEFT model), same samples
in distribution (same logits processors in transformers' order: repetition penalty, temperature,
top-k, top-p, min-p; one `torch.multinomial` per step on the (B, V) probabilities like `generate`):
- `MergedPolicy`: a plain copy of the model whose LoRA-targeted Linear weights are `W + B A * s`,
  recomputed from the live adapter before every rollout; every other weight is shared with the policy
  (no copy). The policy's base weights are never touched (no merge/unmerge drift), and the rollout
  runs no LoRA matmuls and no PEFT wrappers.
- Each distinct prompt is prefilled once (TRL repeats every prompt `num_generations` times); its KV
  cache is then repeated to the group's rows. Prefill is a large share of a short rollout.
- `torch.inference_mode`, last-position logits only, no scores kept, stop when every row has ended.

Not for vLLM, DeepSpeed ZeRO-3 (sharded weights) or Agents' Room rollouts (`check_fast_rollout`, run by
`rlcw grpo`'s validate, refuses those combinations).

Rollout precision (`make_fast_rollout_func("bf16")`, `rollout.precision=bf16|auto`): the rollout copy holds
bf16 weights, halving the bytes streamed per token; oneDNN runs bf16 matmuls natively only on CPUs with AVX512-BF16
or AMX (`auto` takes bf16 only there: `resolve_precision`). The policy, its loss and optimizer stay fp32, so bf16
rollouts are slightly off-policy; TRL 1.16 corrects rollout log-probs by importance sampling only on its vLLM path
(`use_vllm` and `vllm_importance_sampling_correction`), so the rollout returns each sampled token's log-prob and
rlcw's GRPO trainer reweights the loss per token by min(pi/mu, rollout.is_cap) (rlcw.rl.grpo.is_correction).
`compact` and `prepack` (on; no config keys: scripts/bench_rl.py turns them off to compare): with the inverse-CDF
draw ended rows leave the decode batch, and the copy's linears run from weights packed once a rollout for oneDNN,
q/k/v and gate/up fused (rlcw.prepack), with the same bf16 samples and log-probs.

What each choice costs and buys, against the roofline of the machine measured (`scripts/bench_rollout.py`,
`scripts/bench_rl.py --fast-rollout`), the IS gap of each sampler, and what was tried and not kept (a static KV cache,
int8 weights, autocast, torch.compile of the decode step): docs/results/speed.md.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from rlcw.cpu_isa import native_bf16
from rlcw.data.records import message_text
from rlcw.errors import RlcwError
from rlcw.prepack import can_prepack, fuse_projections, prepack_linears
from rlcw.rl.grpo.references import check_references, teacher_forced_logprobs
from rlcw.sampling import DRAWS, WordCounts, sample_with_logprobs

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


class MergedPolicy:
    """A generation-only copy of a (PEFT LoRA) causal LM with the adapter merged into separate tensors.

    precision="fp32": every weight the adapter does not touch is shared with the policy (no copy).
    precision="bf16": the copy holds bf16 weights (~2 bytes/param extra; buffers such as RoPE's stay
    shared, fp32); the merged LoRA targets and any trainable non-LoRA weight are re-cast every refresh.
    The policy and its optimizer keep fp32 weights: only the rollout runs in bf16 (off-policy by
    ~0.03 nats/token on the embedded model; see the module docstring).
    prepack=True (CPU only; ignored elsewhere): the copy's Linears run from weights packed for oneDNN
    (rlcw.prepack; with fuse, attention's q/k/v and the MLP's gate/up as one product each), those a refresh
    changes packed again after it (frozen ones once); fp32 then makes a copy too (its weights shared with the
    policy, the packed ones its own).
    """

    def __init__(self, model, precision: str = "fp32", prepack: bool = False, fuse: bool = True):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        dtype = PRECISIONS[precision]
        self.source = model
        self.lora = hasattr(model, "peft_config")
        self.pairs = []  # (plain Linear in the copy, LoRA module in the policy)
        self.copies = []  # (copy's tensor, policy's trainable tensor) to re-cast every refresh (bf16 only)
        self.packed = []  # the copy's packed products made from weights a refresh writes (prepack=True)
        prepack = prepack and next(model.parameters()).device.type == "cpu"
        if not self.lora and dtype == torch.float32 and not prepack:  # full fine-tuning: the model is "merged"
            self.model = model
            return
        base = model.get_base_model() if self.lora else model
        memo = {}
        for module in base.modules():
            if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                bl = module.base_layer
                lin = torch.nn.Linear(bl.in_features, bl.out_features, bias=bl.bias is not None, device="meta")
                lin.weight = torch.nn.Parameter(bl.weight.detach().to(dtype, copy=True), requires_grad=False)
                if bl.bias is not None:
                    lin.bias = (
                        bl.bias
                        if dtype == bl.bias.dtype
                        else torch.nn.Parameter(bl.bias.detach().to(dtype), requires_grad=False)
                    )
                memo[id(module)] = lin  # the copy holds its own plain Linear in the LoRA wrapper's place
                self.pairs.append((lin, module))
        inside = {id(t) for _, m in self.pairs for t in m.parameters()}  # replaced by the plain Linears above
        for t in base.buffers():
            memo[id(t)] = t  # buffers (RoPE frequencies) shared, in their own dtype
        for t in base.parameters():  # fp32: share every other weight instead of copying it; bf16: a bf16 copy
            if id(t) in inside or id(t) in memo or not t.is_floating_point() or t.dtype == dtype:
                memo.setdefault(id(t), t)
                continue
            memo[id(t)] = torch.nn.Parameter(t.detach().to(dtype), requires_grad=False)
            if t.requires_grad:
                self.copies.append((memo[id(t)], t))
        self.model = copy.deepcopy(base, memo)
        # TRL's GRPOTrainer replaces the policy's `forward` on the instance (add_fused_lm_head) with a closure
        # that calls the ORIGINAL model's forward: a deep copy would keep it and silently run the fp32 policy
        # (unmerged LoRA, no bf16). The copy uses its class's own forward.
        self.model.__dict__.pop("forward", None)
        self.model.eval()
        # the copy's Linears packed for oneDNN (rlcw.prepack), not the policy's
        if prepack and can_prepack(self.model):
            layers = prepack_linears(self.model)
            layers += fuse_projections(self.model) if fuse else []
            # refresh writes the merged LoRA targets and the re-cast trainable copies; weights shared with the
            # policy change where the policy trains them: only products made from those are packed again
            live = {id(t.weight) for t, _ in self.pairs} | {id(t) for t, _ in self.copies}
            live |= {id(t) for t in self.model.parameters() if t.requires_grad}
            self.packed = [p for p in layers if any(id(t) in live for t in p.sources())]

    @torch.no_grad()
    def refresh(self):
        """Recompute the merged weights from the policy's current adapter (active adapters only)."""
        for target, lora in self.pairs:
            w = lora.base_layer.weight.detach()
            delta = None
            if not getattr(lora, "disable_adapters", False):
                for name in lora.active_adapters:
                    if name in getattr(lora, "lora_A", {}):
                        d = lora.get_delta_weight(name)
                        delta = d if delta is None else delta + d
            target.weight.copy_(w if delta is None else w + delta.to(w.dtype))  # copy_ casts to the copy's dtype
        for target, source in self.copies:
            target.copy_(source.detach())
        for layer in self.packed:
            layer.repack()
        return self.model


def make_fast_rollout_func(
    precision: str = "fp32",
    draw: str = "multinomial",
    compact: bool = True,
    prepack: bool = True,
    block_short_endings: bool = False,
    references=None,
):
    """A TRL 1.16 `GRPOTrainer(rollout_func=...)`: TRL's prompts, tokenisation and generation config, fast sampling.

    precision: "fp32" (same weights as the policy) or "bf16" (bf16 rollout copy; faster decode where bf16 is native).
    draw: "multinomial" (torch.multinomial, as `generate`) or "inverse_cdf" (rlcw.sampling.inverse_cdf_draw:
    the same distribution from one random number a row a step; faster: scripts/bench_rollout.py).
    compact: with the inverse-CDF draw, rows that ended leave the decode batch (rlcw.sampling; the same samples up
    to float rounding, which is enough to send a seeded run down another trajectory).
    prepack: on CPU, the copy's linear layers run from weights packed once a rollout for oneDNN (rlcw.prepack;
    fp32: the same samples up to float rounding, bf16: the same products).
    block_short_endings: no completion ends before its row's `min_words` (the trainer's `rollout_rows`, the
    batch's dataset rows, which RlcwGRPOTrainer sets before each generation), the EOS ids masked out of the
    sampling distribution until then (rlcw.sampling's `min_words`); the returned log-probs are the masked
    distribution's, so the IS correction weighs the gap to the policy.
    references: a `rlcw.rl.grpo.references.ReferenceInjection`: the last row of each group whose prompt has a
    reference is that story, teacher-forced (not sampled), its log-probs the copy's under the sampling distribution.
    """
    state: dict = {}

    def rollout(prompts, trainer) -> dict:
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)  # exactly TRL's chat rendering and tokenisation
        model = trainer.accelerator.unwrap_model(trainer.model)
        if state.get("source") is not model:
            state["source"], state["merged"] = model, MergedPolicy(model, precision, prepack=prepack)
        gen_model = state["merged"].refresh()
        was_training = gen_model.training
        gen_model.eval()
        texts = [message_text(p) for p in prompts]
        injected = references.rows(texts, trainer.num_generations) if references is not None else []
        skip = set(injected)
        sampled = [i for i in range(len(prompt_ids)) if i not in skip]
        bounds = {}
        if block_short_endings:
            if "words" not in state:
                state["words"] = WordCounts.of(trainer.processing_class, gen_model.config.vocab_size)
            rows = trainer.rollout_rows
            bounds = {"min_words": [int(rows[i].get("min_words") or 0) for i in sampled], "words": state["words"]}
        completions, logprobs = [None] * len(prompt_ids), [None] * len(prompt_ids)
        try:
            drawn, drawn_logps = sample_with_logprobs(
                gen_model,
                [prompt_ids[i] for i in sampled],
                trainer.generation_config,
                eos_ids=list(trainer.eos_token_ids),
                pad_id=trainer.generation_config.pad_token_id,
                draw=draw,
                compact=compact and draw == "inverse_cdf",
                **bounds,
            )
            for i, ids, logps in zip(sampled, drawn, drawn_logps, strict=True):
                completions[i], logprobs[i] = ids, logps
            if injected:
                forced = [references.ids[texts[i]] for i in injected]
                logps = teacher_forced_logprobs(
                    gen_model,
                    [prompt_ids[i] for i in injected],
                    forced,
                    trainer.generation_config,
                    pad_id=trainer.generation_config.pad_token_id,
                )
                for i, ids, lps in zip(injected, forced, logps, strict=True):
                    completions[i], logprobs[i] = ids, lps
        finally:
            gen_model.train(was_training)
        trainer.injected_rows = injected  # the batch rows that hold a reference (logged as rollout/references)
        # TRL 1.16 keeps these as inputs["sampling_per_token_logps"]; it corrects with them only on its vLLM
        # path, so rlcw's GRPO trainer applies the truncated importance weights itself (rollout.is_cap).
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": logprobs}

    return rollout


# The fast sampler's own keys and the value that leaves each off (what TRL's rollout runs with), in hint order.
FAST_ONLY_OFF = {"precision": "fp32", "draw": "multinomial", "block_short_endings": "false", "references": "null"}


def check_fast_rollout(
    kind: str,
    precision: str,
    is_cap: float,
    *,
    deepspeed: str | None,
    agents_variant: str | None,
    draw: str = "multinomial",
    block_short_endings: bool = False,
    references: str | None = None,
) -> None:
    """Reject fast-rollout settings that cannot work (`kind` is `rollout.kind`; errors name the `rollout.*` keys).

    Values are checked first (an unknown draw or precision), then the fast sampler's own keys: every one set away
    from its off value is named in one error when the rollout is TRL's, and in the hint of the ZeRO-3 and Agents'
    Room clash, so one edit fixes the config."""
    fast = kind == "fast"
    if draw not in DRAWS:
        raise RlcwError(f"unknown rollout.draw {draw!r}", where="rollout.draw", hint=" or ".join(DRAWS))
    if precision not in ("fp32", "bf16", "auto"):
        raise RlcwError(
            f"unknown rollout.precision {precision!r}",
            where="rollout.precision",
            hint="fp32, bf16 or auto (bf16 where the CPU or GPU has native bf16)",
        )
    on = {
        "precision": precision != "fp32",
        "draw": draw != "multinomial",
        "block_short_endings": block_short_endings,
        "references": references is not None,
    }
    own = [key for key in FAST_ONLY_OFF if on[key]]
    back = [f"rollout.{key}={FAST_ONLY_OFF[key]}" for key in own]
    if own and not fast:
        names = " and ".join(f"rollout.{key}" for key in own)
        raise RlcwError(
            f"{names} {'applies' if len(own) == 1 else 'apply'} to the fast rollout only",
            where=f"rollout.{own[0]}",
            hint=f"add rollout.kind=fast, or set {' '.join(back)}",
        )
    check_references(references)
    if is_cap < 0 or (0 < is_cap < 1):
        raise RlcwError(
            f"rollout.is_cap={is_cap} would down-weight even on-policy tokens",
            where="rollout.is_cap",
            hint="a cap >= 1 (e.g. 3, TRL's vLLM default), or 0 for no correction",
        )
    zero3 = deepspeed and "zero3" in Path(deepspeed).name
    clash = "agents.variant" if agents_variant else "train.deepspeed (ZeRO-3)" if zero3 else None
    if fast and clash:
        # the fast sampler's own keys go back with it (configs/grpo/cpu.yaml sets several)
        raise RlcwError(
            f"rollout.kind=fast cannot be combined with {clash}",
            where="rollout.kind",
            hint=f"{' '.join(['rollout.kind=trl', *back])} (the fast sampler needs whole weights and plain rollouts)",
        )


def resolve_precision(precision: str) -> tuple[str, str]:
    """`rollout.precision` -> (fp32 | bf16, why): auto takes bf16 only where it runs natively (elsewhere bf16
    is emulated and slower than fp32)."""
    if precision != "auto":
        return precision, "set in the config"
    ok, why = native_bf16()
    return ("bf16" if ok else "fp32"), f"auto: {why}"
