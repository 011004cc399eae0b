"""Batch geometry per optimizer step for a world size, and the divisibility rules that must hold.

GRPO follows TRL 1.16's GRPOConfig: a micro-batch is `batch_size` completions per GPU; one
generation batch = batch_size * world * grad_accum completions (steps_per_generation = grad_accum)
feeds one optimizer step per `num_iterations`; it must hold whole groups of `num_generations`
(TRL), and rlcw also asks each GPU's micro-batch to (rlcw.recipes.grpo). PPO follows rlcw.rl.ppo.trainer:
`batch_size` prompts per process, one completion each. Reward models: `batch_size` pairs per GPU
times grad_accum times world (the effective batch). A broken rule is an RlcwError naming the keys
and the nearest values that work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlcw.errors import RlcwError


def nearest_multiples(value: int, of: int, limit: int = 2) -> list[int]:
    """The multiples of `of` nearest to `value` (positive, nearest first, at most `limit`)."""
    below = (value // of) * of
    cands = sorted({c for c in (below, below + of, below - of) if c > 0}, key=lambda c: (abs(c - value), c))
    return cands[:limit]


def nearest_valid(value: int, ok, limit: int = 2, span: int = 4096) -> list[int]:
    """The positive integers nearest to `value` for which `ok(n)` holds (nearest first)."""
    out = []
    for d in range(span):
        for n in sorted({value - d, value + d}):
            if n > 0 and n not in out and ok(n):
                out.append(n)
        if len(out) >= limit:
            break
    return out[:limit]


def _or(values: list[int]) -> str:
    return " or ".join(str(v) for v in values) if values else "none nearby"


@dataclass(frozen=True)
class Geometry:
    """What one optimizer step consumes across all GPUs."""

    world: int
    prompts: int  # distinct prompts (RL) or pairs (RM) per optimizer step
    sequences: int  # completions (RL) or scored sequences (RM) per optimizer step
    max_tokens: int  # upper bound of trained tokens per optimizer step (completion tokens for RL)
    micro_batch: int  # sequences per GPU per forward/backward
    steps_per_epoch: int | None = None  # of the given data, when countable
    note: str = ""


def check_world(world: int, gpus_per_node: int) -> int:
    """Nodes for `world` ranks; a multi-node world must fill whole nodes."""
    if world < 1:
        raise RlcwError(f"world_size={world} must be at least 1", where="world_size")
    if world > gpus_per_node and world % gpus_per_node:
        raise RlcwError(
            f"world_size={world} does not fill whole nodes of plan.gpus_per_node={gpus_per_node}",
            where="world_size",
            hint=f"nearest valid world_size: {_or(nearest_multiples(world, gpus_per_node))}",
        )
    return max(1, math.ceil(world / gpus_per_node))


def grpo_geometry(
    world: int,
    batch_size: int,
    num_generations: int,
    grad_accum: int = 1,
    num_iterations: int = 1,
    max_completion_length: int = 512,
    num_prompts: int | None = None,
) -> Geometry:
    """TRL GRPO geometry; errors name train.* keys and world_size with the nearest valid values."""
    if num_generations < 2:
        raise RlcwError(
            f"train.num_generations={num_generations}: GRPO needs at least 2 completions per prompt",
            where="train.num_generations",
        )
    if batch_size % num_generations:
        raise RlcwError(
            f"train.batch_size={batch_size} (completions per GPU) is not a multiple of "
            f"train.num_generations={num_generations}",
            where="train.batch_size",
            hint=f"nearest valid train.batch_size: {_or(nearest_multiples(batch_size, num_generations))}; "
            f"or train.num_generations: {_or(nearest_valid(num_generations, lambda g: g > 1 and batch_size % g == 0))}",
        )
    completions = batch_size * world * grad_accum
    if completions % num_generations:  # TRL's rule; implied by the one above, kept for overrides of either
        raise RlcwError(
            f"generation batch train.batch_size*world_size*train.gradient_accumulation_steps = {completions} "
            f"is not a multiple of train.num_generations={num_generations}",
            where="world_size",
            hint="nearest valid world_size: "
            + _or(nearest_valid(world, lambda w: (batch_size * w * grad_accum) % num_generations == 0)),
        )
    prompts = completions // num_generations
    steps = None
    if num_prompts is not None:
        if num_prompts < prompts:
            fits = [w for w in range(world, 0, -1) if batch_size * w * grad_accum // num_generations <= num_prompts]
            raise RlcwError(
                f"{num_prompts} training prompts cannot fill one generation batch of {prompts} prompts "
                f"(train.batch_size={batch_size} x world_size={world} x "
                f"train.gradient_accumulation_steps={grad_accum} / train.num_generations={num_generations})",
                where="data",
                hint=f"more training prompts in data.prompts, or world_size <= {fits[0] if fits else 0}, "
                "or a smaller train.batch_size",
            )
        steps = (num_prompts // prompts) * num_iterations  # TRL's sampler drops a partial last batch
    return Geometry(
        world=world,
        prompts=prompts,
        sequences=completions,
        max_tokens=completions * max_completion_length,
        micro_batch=batch_size,
        steps_per_epoch=steps,
        note=f"each generation batch trains {num_iterations} optimizer step(s)" if num_iterations > 1 else "",
    )


def ppo_geometry(
    world: int,
    batch_size: int,
    minibatch_size: int,
    micro_batch_size: int,
    ppo_epochs: int,
    max_new_tokens: int,
    num_prompts: int | None = None,
) -> Geometry:
    """rlcw PPO: batch_size prompts per process per rollout, ppo_epochs x (batch/minibatch) updates each."""
    if batch_size % minibatch_size:
        raise RlcwError(
            f"train.batch_size={batch_size} is not a multiple of train.minibatch_size={minibatch_size}",
            where="train.minibatch_size",
            hint=f"nearest valid train.minibatch_size: {_or(nearest_valid(minibatch_size, lambda m: batch_size % m == 0))}",
        )
    if minibatch_size % micro_batch_size:
        raise RlcwError(
            f"train.minibatch_size={minibatch_size} is not a multiple of train.micro_batch_size={micro_batch_size}",
            where="train.micro_batch_size",
            hint="nearest valid train.micro_batch_size: "
            + _or(nearest_valid(micro_batch_size, lambda m: minibatch_size % m == 0)),
        )
    rollout = batch_size * world
    steps = None
    if num_prompts is not None:
        if num_prompts < rollout:
            raise RlcwError(
                f"{num_prompts} training prompts cannot fill one rollout of train.batch_size={batch_size} "
                f"x world_size={world} = {rollout}",
                where="data",
                hint=f"world_size <= {max(1, num_prompts // batch_size)} or more prompts",
            )
        steps = num_prompts // rollout
    updates = ppo_epochs * (batch_size // minibatch_size)
    return Geometry(
        world=world,
        prompts=rollout,
        sequences=rollout,
        max_tokens=rollout * max_new_tokens,
        micro_batch=micro_batch_size,
        steps_per_epoch=steps,
        note=f"one rollout = {updates} optimizer updates of {minibatch_size * world} responses (train.ppo_epochs x batch/minibatch)",
    )


def rm_geometry(
    world: int,
    batch_size: int,
    grad_accum: int,
    max_length: int,
    sequences_per_pair: int = 2,
    num_pairs: int | None = None,
    target_batch: int | None = None,
) -> Geometry:
    """Reward-model geometry: pairs (BT: chosen + rejected; GenRM: both orders) per optimizer step.

    `target_batch` (e.g. LitBench's 128) must equal the effective batch at this world size."""
    effective = batch_size * grad_accum * world
    if target_batch is not None and effective != target_batch:
        fixes = []
        if target_batch % (batch_size * world) == 0:
            fixes.append(f"train.grad_accum={target_batch // (batch_size * world)} at world_size={world}")
        if target_batch % (batch_size * grad_accum) == 0:
            fixes.append(f"world_size={target_batch // (batch_size * grad_accum)} with train.grad_accum={grad_accum}")
        raise RlcwError(
            f"effective batch train.batch_size*train.grad_accum*world_size = {batch_size}*{grad_accum}*{world} = "
            f"{effective}, not plan.global_batch={target_batch}",
            where="world_size",
            hint=("nearest valid: " + " or ".join(fixes))
            if fixes
            else "train.batch_size must divide plan.global_batch",
        )
    steps = None if num_pairs is None else math.ceil(num_pairs / effective)
    return Geometry(
        world=world,
        prompts=effective,
        sequences=effective * sequences_per_pair,
        max_tokens=effective * sequences_per_pair * max_length,
        micro_batch=batch_size,
        steps_per_epoch=steps,
    )
