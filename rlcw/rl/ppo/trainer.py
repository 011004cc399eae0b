"""rlcw's PPO loop (TRL 1.16 has no PPOTrainer): LoRA policy, adapter-disabled reference, a
separate value model (`rlcw.rl.ppo.value`), KL-penalised per-token rewards, GAE, PPO-clip.

One step = sample one response per prompt -> score with TRL-signature reward functions ->
old log-probs, reference log-probs (same model, adapter disabled: no second copy), values ->
rewards (-kl_coef * KL per token + score on the last token) -> GAE -> `ppo_epochs` passes over
shuffled minibatches (micro-batched), clipped policy + value losses, one gradient clip and
optimizer step per minibatch. Rank 0 logs every step to metrics.jsonl and the `tracker` (rlcw.tracking.Tracker:
TensorBoard, wandb, trackio as `train.report_to` says).

    trainer = PPOTrainer(policy, value, tokenizer, funcs, weights, PPOSettings(...), run)
    trainer.train(prompt_rows, render=lambda row: token_ids, periodic=PeriodicEval(...))

Checkpoints `<run>/checkpoints/step_XXXXXX/`: policy adapter (loadable as `model.name`),
value tensors, optimizer, RNG states, step; `train(..., resume=True)` continues from the last.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from rlcw.config import above, at_least
from rlcw.measure.monitors import PREFIX, monitor_stats, step_stats
from rlcw.rl.aux_state import load_aux_state, save_aux_state
from rlcw.rl.ppo.checkpoint import (
    finish_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    tmp_path,
    write_model_state,
    write_rng,
)
from rlcw.rl.ppo.maths import (
    explained_variance,
    gae,
    masked_mean,
    masked_moments,
    policy_loss,
    token_rewards,
    value_loss,
    whiten_with_moments,
)
from rlcw.rl.ppo.rollout import Rollout, response_logprobs, response_values, sample_rollout, score_completions
from rlcw.runs import RunDir
from rlcw.sampling import kl_per_token


@dataclass
class PPOSettings:
    """Hyperparameters of the loop; also `rlcw ppo`'s `train.*` config section, as is."""

    max_steps: int = at_least(1, 20)  # PPO steps (one rollout batch + its update each)
    batch_size: int = at_least(1, 8)  # prompts (= responses) per step per process
    ppo_epochs: int = at_least(1, 2)  # passes over each rollout batch in the update
    minibatch_size: int = at_least(1, 4)  # responses per optimizer step
    micro_batch_size: int = at_least(1, 4)  # responses per forward/backward (memory)
    learning_rate: float = at_least(0, 1e-5)  # AdamW learning rate of the policy
    value_learning_rate: float = at_least(0, 1e-4)  # AdamW learning rate of the value model
    max_grad_norm: float = 1.0  # gradient-norm clipping threshold
    max_new_tokens: int = at_least(1, 64)  # new-token cap of each response
    # sampling temperature of the rollouts (also used to score log-probs)
    temperature: float = above(0, 1.0, "log-probs divide by it")
    top_p: float = 1.0  # nucleus-sampling p of the rollouts (1.0 = off)
    top_k: int = at_least(0, 0)  # top-k of the rollouts (0 = the whole vocabulary)
    gamma: float = 1.0  # GAE discount factor
    lam: float = 0.95  # GAE lambda
    clip: float = 0.2  # clip range of the policy importance ratio
    value_clip: float = 0.2  # clip range of the value update around the rollout values
    vf_coef: float = 0.1  # weight of the value loss in the total loss
    entropy_coef: float = 0.0  # weight of the entropy bonus (0 = off; no entropy computed)
    kl_coef: float = 0.05  # per-token KL-to-reference penalty in the reward (-kl_coef * KL)
    kl_estimator: str = "k1"  # per-token KL estimator: k1 (log-ratio) | k3 (always >= 0)
    whiten_advantages: bool = True  # normalize advantages to mean 0, std 1 over the batch (all ranks)
    # early stopping of an update (as Stable-Baselines3's target_kl): once a minibatch's approx KL between the
    # rollout policy and the current one exceeds 1.5 x target_kl, that minibatch's step and the rest of the
    # update are skipped; None = every epoch runs (PPO's clip alone does not bound the move)
    target_kl: float | None = None
    missing_eos_penalty: float | None = None  # added to the score of responses cut at the cap
    save_steps: int = at_least(0, 0)  # 0 = only the final checkpoint
    resume: str = (
        "false"  # `rlcw ppo`'s train.resume (false | true | auto, rlcw.runs.resume_checkpoint); train() takes its own
    )


def prompt_batch(n: int, batch_size: int, step: int, seed: int, rank: int = 0, world: int = 1) -> list[int]:
    """Prompt indices for one step: a fresh seeded permutation per pass over the data (resumable by step)."""
    g = batch_size * world
    out = []
    for i in range(step * g + rank * batch_size, step * g + (rank + 1) * batch_size):
        epoch, j = divmod(i, n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        out.append(int(perm[j]))
    return out


class PPOTrainer:
    """Holds the models and optimizer; `train` runs steps, logs, checkpoints, evaluates."""

    def __init__(
        self,
        policy,
        value,
        tokenizer,
        reward_funcs: list,
        reward_weights: list[float],
        settings: PPOSettings,
        run: RunDir,
        accelerator=None,
        base_spec: str | None = None,
        monitor=None,
        seed: int = 0,
        monitor_ngram: int | None = 3,
        tracker=None,
        slop=None,
    ):
        """`tracker`: rlcw.tracking.Tracker (anything with `log(metrics, step)`) every step's stats also go to;
        `monitor`: an object with `observe(step, stats) -> stop reason | None` (rlcw.measure.monitors.MonitorCallback);
        `monitor_ngram`: n of the reward-hacking statistics (rlcw.measure.monitors) every step, None = off; `slop`: a
        rlcw.metrics.slop.SlopBaseline for `monitor/slop` (None = off)."""
        from accelerate import Accelerator

        self.s, self.run, self.tokenizer, self.base_spec = settings, run, tokenizer, base_spec
        self.seed, self.monitor_ngram, self.slop = seed, monitor_ngram, slop
        self.funcs, self.weights = reward_funcs, reward_weights
        self.acc = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        groups = [
            {"params": [p for p in policy.parameters() if p.requires_grad], "lr": settings.learning_rate},
            {"params": [p for p in value.parameters() if p.requires_grad], "lr": settings.value_learning_rate},
        ]
        optimizer = torch.optim.AdamW(groups, weight_decay=0.0)
        self.policy, self.value, self.optimizer = self.acc.prepare(policy, value, optimizer)
        self.step, self.monitor, self.stop_reason = 0, monitor, None
        self.eos_ids = [tokenizer.eos_token_id]
        self.tracker = tracker

    # -- one step ------------------------------------------------------------------------------
    def _unwrapped(self):
        return self.acc.unwrap_model(self.policy)

    @torch.no_grad()
    def rollout(self, queries: list[list[int]], prompts: list, columns: dict) -> tuple[Rollout, dict]:
        """Sample, score, and compute everything the update needs (old logp, values, advantages)."""
        s, policy = self.s, self._unwrapped()
        policy.eval()
        self.value.eval()
        t0 = time.time()
        ro = sample_rollout(
            policy,
            queries,
            pad_id=self.tokenizer.pad_token_id,
            eos_ids=self.eos_ids,
            max_new_tokens=s.max_new_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            device=self.acc.device,
        )
        t1 = time.time()
        texts = self.tokenizer.batch_decode(ro.response, skip_special_tokens=True)
        completions = (
            [[{"role": "assistant", "content": t}] for t in texts]
            if prompts and isinstance(prompts[0], list)
            else texts
        )
        ids = [r[m.bool()].tolist() for r, m in zip(ro.response.cpu(), ro.response_mask.cpu(), strict=False)]
        scores, stats = score_completions(
            self.funcs, self.weights, prompts, completions, completion_ids=ids, **columns
        )
        scores = scores.to(self.acc.device)
        if s.missing_eos_penalty is not None:
            scores = scores + s.missing_eos_penalty * (~ro.ended).float()
        t2 = time.time()
        logp, ref_logp, values, ent = self._forward_no_grad(policy, ro)
        kl = kl_per_token(logp, ref_logp, s.kl_estimator)  # (B, R)
        mask = ro.response_mask
        rewards = token_rewards(scores, kl, mask, s.kl_coef)
        adv, ret = gae(rewards, values, mask, s.gamma, s.lam)
        batch = {
            "old_logp": logp,
            "old_values": values,
            "returns": ret,
            "advantages": self._whiten_globally(adv, mask) if s.whiten_advantages else adv,
        }
        kl_seq = (kl_per_token(logp, ref_logp, "k1") * mask).sum(1)  # (B,) KL of each response
        stats.update(
            {
                "reward": scores.mean(),
                "reward_std": scores.std() if len(scores) > 1 else torch.tensor(0.0),
                "kl": kl_seq.mean(),
                "non_score_reward": (-s.kl_coef * kl * mask).sum(1).mean(),
                "entropy": masked_mean(ent, mask),
                "ppo/returns_mean": masked_mean(ret, mask),
                "ppo/values_mean": masked_mean(values, mask),
                "ppo/explained_variance": explained_variance(values, ret, mask),
                "completions/mean_length": ro.lengths.mean(),
                "completions/min_length": ro.lengths.min(),
                "completions/max_length": ro.lengths.max(),
                "completions/clipped_ratio": (~ro.ended).float().mean(),
                "time/generate_s": t1 - t0,
                "time/score_s": t2 - t1,
                "time/forward_s": time.time() - t2,
            }
        )
        stats["rlhf_reward"] = stats["reward"] + stats["non_score_reward"]
        if self.monitor_ngram:
            lengths = ro.lengths.long().tolist()
            mon = step_stats(texts, lengths, (~ro.ended).tolist(), scores.tolist(), len(texts), self.monitor_ngram)
            mon["kl_to_start"] = masked_mean(kl_per_token(logp, ref_logp, "k3"), mask)  # nats per token
            if self.slop is not None:  # each prompt's completions are one document
                groups = [str(p) for p in prompts] if prompts else None
                mon["slop"] = sum(self.slop.scores(texts, groups)) / len(texts)
            stats.update({PREFIX + k: v for k, v in mon.items()})
        self._last_texts, self._last_scores = texts, scores.cpu().tolist()
        return ro, {"batch": batch, "stats": stats}

    def _whiten_globally(self, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Whiten with the mean and variance over every rank's tokens (one all-reduce), not this rank's alone."""
        moments = self.acc.reduce(masked_moments(adv, mask), reduction="sum")  # (3,)
        return whiten_with_moments(adv, mask, moments)

    def _forward_no_grad(self, policy, ro: Rollout):
        s, mb = self.s, self.s.micro_batch_size
        parts: dict[str, list] = {"logp": [], "ref": [], "v": [], "ent": []}
        for start in range(0, ro.response.shape[0], mb):
            part = ro.select(torch.arange(start, min(start + mb, ro.response.shape[0])))
            logp, ent = response_logprobs(policy, part, s.temperature)
            with policy.disable_adapter():
                ref, _ = response_logprobs(policy, part, s.temperature, with_entropy=False)
            parts["logp"].append(logp), parts["ref"].append(ref), parts["ent"].append(ent)
            parts["v"].append(response_values(self.value, part))
        return tuple(torch.cat(parts[k]) for k in ("logp", "ref", "v", "ent"))

    def update(self, ro: Rollout, batch: dict) -> dict:
        """`ppo_epochs` passes of shuffled minibatches; one clipped optimizer step per minibatch, until the
        policy has moved past `target_kl` (then the rest of the update is skipped: `ppo/early_stopped`)."""
        s = self.s
        B = ro.response.shape[0]
        sums: dict[str, float] = {}
        n_updates, stopped = 0, False
        gen = torch.Generator().manual_seed(self.seed * 7919 + self.step)
        for _ in range(s.ppo_epochs):
            perm = torch.randperm(B, generator=gen)
            for start in range(0, B, s.minibatch_size):
                idx = perm[start : start + s.minibatch_size]
                stats = self._minibatch(ro, batch, idx)
                stopped = stats.pop("ppo/early_stopped", 0.0) > 0
                if stopped:
                    break
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_updates += 1
            if stopped:
                break
        out = {k: v / max(n_updates, 1) for k, v in sums.items()}
        out.update({"ppo/updates": float(n_updates), "ppo/early_stopped": float(stopped)})
        return out

    def _minibatch(self, ro: Rollout, batch: dict, idx: torch.Tensor) -> dict:
        s = self.s
        self.optimizer.zero_grad(set_to_none=True)
        n_tokens = ro.response_mask[idx].sum().clamp(min=1.0)
        out: dict[str, float] = {}
        for start in range(0, len(idx), s.micro_batch_size):
            mi = idx[start : start + s.micro_batch_size]
            part, mask = ro.select(mi), ro.response_mask[mi]
            weight = float(mask.sum() / n_tokens)  # micro-batch share of the minibatch's tokens
            logp, ent = response_logprobs(self.policy, part, s.temperature, with_entropy=s.entropy_coef > 0)
            values = response_values(self.value, part)
            pg, pg_stats = policy_loss(logp, batch["old_logp"][mi], batch["advantages"][mi], mask, s.clip)
            vf, vf_stats = value_loss(values, batch["old_values"][mi], batch["returns"][mi], mask, s.value_clip)
            loss = pg + s.vf_coef * vf
            if s.entropy_coef > 0:
                loss = loss - s.entropy_coef * masked_mean(ent, mask)
            self.acc.backward(loss * weight)
            for k, v in {
                "ppo/policy_loss": pg,
                "ppo/value_loss": vf,
                **{f"ppo/{k}": v for k, v in {**pg_stats, **vf_stats}.items()},
            }.items():
                out[k] = out.get(k, 0.0) + weight * float(v.detach())
        if self._past_target_kl(out["ppo/approx_kl"]):
            self.optimizer.zero_grad(set_to_none=True)
            return {"ppo/early_stopped": 1.0}
        out.update(self.clip_gradients())
        self.optimizer.step()
        return out

    def _past_target_kl(self, approx_kl: float) -> bool:
        """Whether the policy moved past 1.5 x target_kl (every rank's mean: all ranks stop together)."""
        if self.s.target_kl is None:
            return False
        if self.acc.num_processes > 1:
            approx_kl = float(self.acc.reduce(torch.tensor(approx_kl, device=self.acc.device), "mean"))
        return approx_kl > 1.5 * self.s.target_kl

    def clip_gradients(self) -> dict[str, float]:
        """Clip the policy's and the value model's gradients each to max_grad_norm, separately (as OpenRLHF
        and verl do: a large value error must not shrink the policy step); their norms before clipping."""
        policy, value = (group["params"] for group in self.optimizer.param_groups)  # the two groups of __init__
        return {
            "ppo/grad_norm": float(self.acc.clip_grad_norm_(policy, self.s.max_grad_norm)),
            "ppo/value_grad_norm": float(self.acc.clip_grad_norm_(value, self.s.max_grad_norm)),
        }

    # -- the loop ------------------------------------------------------------------------------
    def train(
        self,
        rows: list[dict],
        encode: Callable[[dict], list[int]],
        prompt_of: Callable[[dict], object],
        periodic=None,
        resume: bool = False,
        columns: tuple[str, ...] = (),
    ) -> list[dict]:
        """Run until `max_steps`; return the per-step logs. `encode(row)` -> query token ids,
        `prompt_of(row)` -> what reward functions get as the prompt; `columns` of each row reach
        reward functions as keyword lists (TRL's extra dataset columns)."""
        s, acc = self.s, self.acc
        ckpt = latest_checkpoint(self.run.checkpoints) if resume else None
        if ckpt is not None:
            self.step = load_checkpoint(
                ckpt, self._unwrapped(), acc.unwrap_model(self.value), self.optimizer, acc.process_index
            )
            load_aux_state(ckpt, self._aux_objects(), f"rlcw_aux_state_rank{acc.process_index}.json")
            acc.print(f"resumed from {ckpt} at step {self.step}")
        else:
            torch.manual_seed(self.seed + 1_000 * acc.process_index)  # ranks sample different responses
        if periodic is not None:
            periodic.begin(self._unwrapped(), self.step, acc.is_main_process)
        history = []
        bar = tqdm(total=s.max_steps, initial=self.step, desc="ppo", disable=not acc.is_main_process)
        while self.step < s.max_steps:
            t0 = time.time()
            picked = [
                rows[i]
                for i in prompt_batch(
                    len(rows), s.batch_size, self.step, self.seed, acc.process_index, acc.num_processes
                )
            ]
            ro, data = self.rollout(
                [encode(r) for r in picked],
                [prompt_of(r) for r in picked],
                {c: [r.get(c) for r in picked] for c in columns},
            )
            t1 = time.time()
            self.policy.eval(), self.value.eval()  # no dropout: ratio = 1 on the first pass
            stats = {**data["stats"], **self.update(ro, data["batch"]), "time/update_s": time.time() - t1}
            self.step += 1
            stats = self._reduce(stats)
            stats.update(
                {
                    "time/step_s": time.time() - t0,
                    "kl_coef": s.kl_coef,
                    "lr": s.learning_rate,
                    "epoch": self.step * s.batch_size * acc.num_processes / len(rows),
                }
            )
            history.append({"step": self.step, **stats})
            self._log(stats, picked)
            if periodic is not None:
                periodic.step_end(self._unwrapped(), self.step, acc.is_main_process)
            if s.save_steps and self.step % s.save_steps == 0:  # after evaluation: it reseeds the RNG
                self.save(self.run.checkpoints / f"step_{self.step:06d}")
            if self.monitor is not None:
                self.stop_reason = self.monitor.observe(self.step, monitor_stats(stats))
                if self.stop_reason:
                    self.monitor.alerts.append({"step": self.step, "level": "stop", "message": self.stop_reason})
                    acc.print(f"[rlcw] {self.stop_reason}")
                    break
            bar.update(1)
            bar.set_postfix(reward=f"{stats['reward']:.3f}", kl=f"{stats['kl']:.3f}")
        bar.close()
        if periodic is not None:
            periodic.end(self._unwrapped(), self.step, acc.is_main_process)
        return history

    def _reduce(self, stats: dict) -> dict:
        out = {}
        for k, v in stats.items():
            t = torch.as_tensor(v, dtype=torch.float32, device=self.acc.device)
            out[k] = float(self.acc.reduce(t, "mean")) if self.acc.num_processes > 1 else float(t)
        return out

    def _log(self, stats: dict, rows: list[dict]) -> None:
        if not self.acc.is_main_process:
            return
        clean = {k: v for k, v in stats.items() if not math.isnan(v)}
        self.run.log(self.step, clean)
        if self.tracker is not None:
            self.tracker.log(clean, self.step)
        self._log_extremes(rows)

    def _log_extremes(self, rows: list[dict]) -> None:
        """Best and worst scored responses of the step, appended to samples/rollouts.jsonl."""
        from rlcw.io import append_jsonl

        order = sorted(range(len(self._last_scores)), key=self._last_scores.__getitem__)
        for tag, i in (("top", order[-1]), ("bottom", order[0])):
            row = rows[i]
            append_jsonl(
                self.run.samples / "rollouts.jsonl",
                {
                    "id": str(row.get("id", i)),
                    "prompt": str(row.get("prompt", "")),
                    "story": self._last_texts[i] or "(empty)",
                    "system": f"ppo-rollout-{tag}",
                    "step": self.step,
                    "meta": {"score": self._last_scores[i]},
                },
            )

    def _aux_objects(self) -> dict[str, object]:
        """Monitor streaks and reward RNGs (GenRM pairing) that checkpoints carry (rlcw.rl.aux_state)."""
        objects = {f"reward/{getattr(f, '__name__', i)}": f for i, f in enumerate(self.funcs)}
        return {**objects, "monitor": self.monitor} if self.monitor is not None else objects

    def save(self, path) -> None:
        """A resumable checkpoint (see `rlcw.rl.ppo.checkpoint`); every rank adds its RNG state."""
        acc = self.acc
        acc.wait_for_everyone()
        if acc.is_main_process:
            write_model_state(
                path, self._unwrapped(), acc.unwrap_model(self.value), self.optimizer, self.tokenizer, self.base_spec
            )
        acc.wait_for_everyone()
        write_rng(path, acc.process_index)
        save_aux_state(tmp_path(path), self._aux_objects(), f"rlcw_aux_state_rank{acc.process_index}.json")
        acc.wait_for_everyone()
        if acc.is_main_process:
            finish_checkpoint(path, self.step, asdict(self.s))
        acc.wait_for_everyone()
