"""rlcw's extension of TRL's RLOOTrainer: the per-step extras rlcw's GRPO logs, on RLOO's batches.

    trainer = RlcwRLOOTrainer(model=..., reward_funcs=..., args=RLOOConfig(...), ...,   # TRL's own arguments
                              run=run, monitor_ngram=3, log_kl_every=3, kl_ref_model=None,
                              samples_every=1, samples_k=2, slop=None)

Per generated training batch, as `rlcw.rl.grpo.trainer.RlcwGRPOTrainer` does: the reward-hacking
statistics (`monitor/*`, rlcw.measure.monitors; `monitor/slop` when a human baseline is given), KL to the
starting model (`monitor/kl_to_start` = k3 and `kl_to_start/k1` per completion token, even at
beta = 0), reward, words and tokens per prompt source; rank 0 writes the sampled prompt order and the
top and bottom stories. The prompt sampler is reseeded per epoch (a resumed run draws the order of an
uninterrupted one).

RLOO's advantage is the leave-one-out baseline over the group (TRL: reward minus the mean of the
other completions of its prompt), and its loss is a clipped sequence-level ratio. TRL's RLOO always
computes the old per-token log-probs in `_generate_and_score_completions` (it returns their sequence
sums): the first no-grad forward there is caught, so the policy's side of the KL costs nothing and a
KL step costs one forward of the start model (the policy with its adapter disabled, or `kl_ref_model`).

What rlcw's GRPO has and this does not, and why:
- the fast rollout with importance-sampling correction (rlcw.rl.grpo.rollout, rlcw.rl.grpo.is_correction): TRL's
  RLOOTrainer has no `rollout_func` seam to plug a sampler into, and its loss reads sequence log-prob
  sums (`old_logps`), not the per-token `sampling_per_token_logps` the correction reweights;
- Agents' Room rollouts: the same missing `rollout_func`.
The learning probe is a plain callback and works here (rlcw.measure.probe).

TRL symbols used (TRL 1.16.0): `trl.RLOOTrainer` hooks `_get_train_sampler(dataset)`,
`_calculate_rewards(inputs, prompts, completions, completion_ids_list)`, `_generate_and_score_completions
(inputs)` (output keys `prompt_ids`, `prompt_mask`, `completion_ids`, `completion_mask`),
`_get_per_token_logps_and_entropies(model, ids, mask, logits_to_keep, ...)`, `_metrics["train"]`,
`reward_weights`, `reward_func_names`, `num_generations`, `num_iterations`, `shuffle_dataset`.
"""

from __future__ import annotations

import torch
from accelerate.utils import gather_object
from trl import RLOOTrainer
from trl.trainer.rloo_trainer import add_fused_lm_head

from rlcw.rl.grpo.batch_log import BatchLog
from rlcw.rl.grpo.trainer import EpochRepeatSampler, RlcwGRPOTrainer
from rlcw.runs import RunDir


class RlcwRLOOTrainer(RLOOTrainer):
    """RLOOTrainer + rlcw's per-step extras (see the module docstring)."""

    def __init__(
        self,
        *args,
        run: RunDir,
        monitor_ngram: int | None = 3,
        log_kl_every: int = 1,
        kl_ref_model=None,
        samples_every: int = 1,
        samples_k: int = 2,
        slop=None,
        **kwargs,
    ):
        """`slop`: a rlcw.metrics.slop.SlopBaseline for the `monitor/slop` series (None = off); the other
        options are RlcwGRPOTrainer's. The rest is TRL's RLOOTrainer."""
        super().__init__(*args, **kwargs)
        self.run, self.log_kl_every = run, log_kl_every
        self.batch_log = BatchLog(run, monitor_ngram, samples_every, samples_k, slop)  # GRPO's batch log, shared
        self.kl_ref_model = kl_ref_model
        if kl_ref_model is not None:
            kl_ref_model.to(self.accelerator.device).eval().requires_grad_(False)
            add_fused_lm_head(kl_ref_model, temperature=self.temperature)  # TRL's log-prob helper reads it
        self._rlcw_sampler: EpochRepeatSampler | None = None
        self._batch_rewards: torch.Tensor | None = None
        # the first no-grad forward of _generate_and_score_completions is the old per-token log-probs (B, C)
        self._rlcw_catch, self._rlcw_caught = False, None

    # rlcw's GRPO extension reads the same TRL internals under the same names: shared, not copied
    kl_to_start = RlcwGRPOTrainer.kl_to_start
    _kl_metrics = staticmethod(RlcwGRPOTrainer._kl_metrics)
    _start_logps = RlcwGRPOTrainer._start_logps
    _local_rows = RlcwGRPOTrainer._local_rows

    def _get_train_sampler(self, dataset=None):
        self._rlcw_sampler = EpochRepeatSampler(
            data_source=dataset if dataset is not None else self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )
        return self._rlcw_sampler

    def _run_epoch(self, *args, **kwargs):
        # a multi-rank resume mid-epoch bypasses the sampler's set_epoch (see RlcwGRPOTrainer._run_epoch)
        if self._rlcw_sampler is not None and kwargs.get("epoch") is not None:
            self._rlcw_sampler.set_epoch(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._rlcw_catch:
            self._rlcw_catch, self._rlcw_caught = False, out[0].detach()
        return out

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._batch_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._batch_rewards

    def _generate_and_score_completions(self, inputs):
        self._rlcw_catch, self._rlcw_caught = self.model.training, None
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._rlcw_catch = False
        if self.model.training:
            self._log_batch(inputs, output, self._batch_rewards, self._rlcw_caught)
        return output

    def _log_batch(self, inputs: list[dict], output: dict, rewards_per_func: torch.Tensor, old_logps) -> None:
        step = self.state.global_step + 1  # the step this batch trains
        rows = gather_object(self._local_rows(inputs, output))
        total = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(1).tolist()
        for r, value, per in zip(rows, total, rewards_per_func.tolist(), strict=False):
            r["reward"], r["rewards"] = value, dict(zip(self.reward_func_names, per, strict=False))
        metrics = self.batch_log(step, rows, self.num_generations, is_main_process=self.accelerator.is_main_process)
        if self.log_kl_every and (step % self.log_kl_every == 0 or step == 1):
            metrics.update(self._kl_metrics(self.kl_to_start({**output, "old_per_token_logps": old_logps})))
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
