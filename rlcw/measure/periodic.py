"""The callback that runs periodic evaluation inside a TRL/transformers trainer.

Baseline samples come once from the starting model (step 0, before any update); every
`every_steps` and at the end, the held-out prompts are sampled with the current policy (same
seed as the baseline), saved as story records in `<run>/samples/step_XXXXXX.jsonl`, scored by
the evaluators and logged as `eval/<evaluator>/<metric>` to metrics.jsonl and the `train.report_to`
trackers (the `tracker` argument, rlcw.tracking.Tracker).

Sampling runs on every rank (a DeepSpeed ZeRO-3 forward needs every rank's shards): the held-out
prompts are cut into batches of `batch_size` in one fixed order, batch k goes to rank k mod world
and is seeded by its first prompt's index (never by the rank), ranks with fewer batches sample a
dummy batch so every rank calls `generate` equally often (transformers' synced_gpus keeps their
decode steps in step), and the stories are gathered to rank 0, which evaluates and writes; so the
samples equal a single-process run's. The global RNG state is restored after sampling.
Samplers without `distributed = True` (Agents' Room) run on rank 0 while the others wait.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from rlcw.data.records import read_stories, write_stories
from rlcw.generation import generate_stories
from rlcw.measure.evaluation import run_evaluators
from rlcw.runs import RunDir


def story_sampler(
    tokenizer,
    prompts: list[dict],
    *,
    system_prompt: str | None,
    run_name: str,
    max_new_tokens: int,
    temperature: float,
    batch_size: int,
    seed: int,
) -> Callable:
    """The `sample(model, step)` of plain RL runs: one seeded story per held-out prompt, named `<run>@<step>`."""

    def sample(model, step: int) -> list[dict]:
        rank, world = _rank_world()
        starts = list(range(0, len(prompts), batch_size))  # the global batches, one fixed order
        mine = starts[rank::world]
        rounds = -(-len(starts) // world)  # every rank calls generate this often
        out: list[dict] = []
        for i in range(rounds):
            start = mine[i] if i < len(mine) else starts[0]  # dummy batch: same number of generate calls
            recs = generate_stories(
                model,
                tokenizer,
                prompts[start : start + batch_size],
                system_prompt=system_prompt,
                system_name=f"{run_name}@{step}",
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                batch_size=batch_size,
                seed=seed + start,  # the batch's seed follows its prompts, not the rank
                step=step,
                show_progress=False,
            )
            if i < len(mine):
                out += [dict(r, seed=seed, _order=start + j) for j, r in enumerate(recs)]
        return _gather_ordered(out, world)

    sample.distributed = True
    return sample


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _gather_ordered(records: list[dict], world: int) -> list[dict]:
    """Every rank's records, in the global prompt order (`_order`, removed)."""
    if world > 1:
        parts: list = [None] * world
        dist.all_gather_object(parts, records)
        records = [r for part in parts for r in part]
    return [{k: v for k, v in r.items() if k != "_order"} for r in sorted(records, key=lambda r: r["_order"])]


def _rng_devices() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class PeriodicEval:
    """Trainer-agnostic periodic evaluation: `begin`, `step_end`, `end` with the global step.

    `sample(model, step) -> story records`; evaluators follow `rlcw.measure.evaluation.Evaluator`.
    Used by `PeriodicEvalCallback` (TRL/transformers trainers) and by rlcw's own PPO loop."""

    def __init__(self, run: RunDir, sample: Callable, evaluators: list, every_steps: int, tracker=None):
        """`tracker`: rlcw.tracking.Tracker (or anything with `log(metrics, step)`) the eval rows also go to."""
        self.run, self.sample, self.evaluators, self.every_steps = run, sample, evaluators, every_steps
        self.tracker = tracker
        self.baseline: list[dict] = []
        self.history: list[dict] = []
        self._last_step = -1

    def _evaluate(self, model, step: int, is_main: bool) -> None:
        every_rank = getattr(self.sample, "distributed", False)
        stories = []
        if is_main or every_rank:
            with torch.random.fork_rng(devices=_rng_devices()):  # sampling reseeds; training's RNG stream goes on
                stories = self.sample(model, step)
        if is_main:
            if step == 0:
                self.baseline = [dict(s, system="baseline") for s in stories]
                write_stories(self.run.samples / "baseline.jsonl", self.baseline)
            write_stories(self.run.samples / f"step_{step:06d}.jsonl", stories)
            metrics = run_evaluators(self.evaluators, stories, self.baseline, self.run.samples)
            self.history.append({"step": step, **metrics})
            self.run.log(step, metrics)
            if self.tracker is not None:
                self.tracker.log(metrics, step)
        self._last_step = step
        _barrier()

    def begin(self, model, step: int, is_main: bool) -> None:
        """At the start of training (step > 0 on resume: reload the baseline, sample nothing)."""
        if not self.every_steps:
            return
        saved = self.run.samples / "baseline.jsonl"
        if step > 0 and saved.is_file():  # resumed run: the baseline was sampled before
            self.baseline = read_stories(saved)
        elif step == 0:
            self._evaluate(model, 0, is_main)

    def step_end(self, model, step: int, is_main: bool) -> None:
        if self.every_steps and step % self.every_steps == 0:
            self._evaluate(model, step, is_main)

    def end(self, model, step: int, is_main: bool) -> None:
        if self.every_steps and self._last_step != step:
            self._evaluate(model, step, is_main)


class PeriodicEvalCallback(TrainerCallback):
    """`PeriodicEval` as a transformers `TrainerCallback`."""

    def __init__(self, run: RunDir, sample: Callable, evaluators: list, every_steps: int, tracker=None):
        self.periodic = PeriodicEval(run, sample, evaluators, every_steps, tracker)

    @property
    def baseline(self) -> list[dict]:
        return self.periodic.baseline

    @property
    def history(self) -> list[dict]:
        return self.periodic.history

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.periodic.begin(model, state.global_step, state.is_world_process_zero)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.periodic.step_end(model, state.global_step, state.is_world_process_zero)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.periodic.end(model, state.global_step, state.is_world_process_zero)
