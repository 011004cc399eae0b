"""rlcw's extension of TRL's RLOOTrainer: the per-step extras rlcw's GRPO logs, on RLOO's batches.

    trainer = RlcwRLOOTrainer(model=..., reward_funcs=..., args=RLOOConfig(...), ...,   # TRL's own arguments
                              run=run, monitor_ngram=3, log_kl_every=3, kl_ref_model=None,
                              samples_every=1, samples_k=2, slop=None)

Per generated training batch, from the code rlcw's GRPO trainer uses too (rlcw.rl.trl_common.TRLExtras): the
reward-hacking statistics (`monitor/*`, rlcw.measure.monitors; `monitor/slop` when a human baseline is given), KL to
the starting model (`monitor/kl_to_start` = k3 and `kl_to_start/k1` per completion token, even at beta = 0),
reward, words and tokens per prompt source; rank 0 writes the sampled prompt order and the top and bottom stories.
The prompt sampler is reseeded per epoch (a resumed run draws the order of an uninterrupted one).

RLOO's advantage is the leave-one-out baseline over the group (TRL: reward minus the mean of the
other completions of its prompt), and its loss is a clipped sequence-level ratio. TRL's RLOO always
computes the old per-token log-probs in `_generate_and_score_completions` (it returns their sequence
sums): the first no-grad forward there is caught (`StepState.catch`, set by `_generate_and_score_completions`),
so the policy's side of the KL costs nothing and a KL step costs one forward of the start model (the policy with
its adapter disabled, or `kl_ref_model`).

What rlcw's GRPO has and this does not, and why:
- the fast rollout with importance-sampling correction (rlcw.rl.grpo.rollout, rlcw.rl.grpo.is_correction): TRL's
  RLOOTrainer has no `rollout_func` seam to plug a sampler into, and its loss reads sequence log-prob
  sums (`old_logps`), not the per-token `sampling_per_token_logps` the correction reweights;
- Agents' Room rollouts: the same missing `rollout_func`.
The learning probe is a plain callback and works here (rlcw.measure.probe).

TRL symbols used (TRL 1.16.0): `trl.RLOOTrainer` and the hooks and attributes rlcw.rl.trl_common names;
`_generate_and_score_completions(inputs)` (output keys `prompt_ids`, `prompt_mask`, `completion_ids`,
`completion_mask`).
"""

from __future__ import annotations

from trl import RLOOTrainer

from rlcw.rl.trl_common import TRLExtras


class RlcwRLOOTrainer(TRLExtras, RLOOTrainer):
    """RLOOTrainer + rlcw's per-step extras (see the module docstring). The options are
    rlcw.rl.trl_common.TRLExtras's; the rest is TRL's RLOOTrainer."""

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        self._catch(out)  # the first no-grad forward of _generate_and_score_completions: the old log-probs (B, C)
        return out

    def _generate_and_score_completions(self, inputs):
        st = self.step_state
        st.catch, st.caught = self.model.training, None
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            st.catch = False
        if self.model.training:
            self._on_batch(inputs, output)
        return output
