"""rlcw's extension of TRL's GRPOTrainer: a resumable prompt order and per-step extras of each batch.

`RlcwGRPOTrainer` is TRL's GRPOTrainer with everything rlcw adds passed to its constructor:

    trainer = RlcwGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), ...,   # TRL's own arguments
                              run=run, monitor_ngram=3, log_kl_every=3, kl_ref_model=None,
                              samples_every=1, samples_k=2, rollout_is_cap=3.0)

What it shares with rlcw's RLOO (rlcw.rl.trl_common.TRLExtras): per generated training batch the reward-hacking
statistics (`monitor/*`), KL to the starting model (`monitor/kl_to_start` = k3, `kl_to_start/k1`, per completion
token; even at beta = 0), reward, words and tokens per prompt source (`source/<name>/*`), the sampled prompt order
and the top and bottom stories under `samples/` (rlcw.rl.batch_log.BatchLog), and the prompt sampler reseeded per
epoch. What is GRPO's own: on-policy (TRL keeps no old log-probs) the policy's side of the KL is the loss's own
forward, so a KL step costs one extra forward, not two; the fast rollout's importance-sampling correction
(`rollout_is_cap`); with `shared_prefix`, the loss's and the start model's forwards run each group's prompt once
(rlcw.rl.grpo.shared_prefix). The hooks pass values to each other through one per-step record, `GRPOStepState`
(its docstring names the writer and the reader of each field). The starting model for KL is TRL's reference
log-probs when beta > 0, else the policy with its LoRA adapter disabled, else `kl_ref_model`.

TRL symbols used (checked against TRL 1.16.0; tests/unit/test_grpo_trainer_symbols.py checks each
one exists, so an upgrade that removes one fails there first):
- `trl.GRPOTrainer`, overridden hooks: `_get_train_sampler(dataset)`,
  `_calculate_rewards(inputs, prompts, completions, completion_ids_list)` (returns the gathered
  (N, F) rewards per function), `_generate_and_score_completions(inputs)` (its output keys
  `prompt_ids`, `prompt_mask`, `completion_ids`, `completion_mask`, optional
  `old_per_token_logps`, `ref_per_token_logps`); `_compute_loss(model, inputs)` (the batch keys
  `sampling_per_token_logps`, `old_per_token_logps`, `completion_mask`, `advantages`: the fast
  rollout's truncated importance weights scale the advantages per token, rlcw.rl.grpo.is_correction);
  transformers' `Trainer._run_epoch(..., epoch=...)` (sets the sampler's epoch on a multi-rank resume).
- GRPOTrainer internals read: `_get_per_token_logps_and_entropies(model, ids, mask, logits_to_keep)[0]`,
  `_metrics["train"]`, `reward_weights`, `reward_func_names`, `num_generations`, `num_iterations`,
  `shuffle_dataset`, `temperature`, `args.generation_batch_size`, `args.steps_per_generation`,
  `args.cast_lm_head_to_fp32`.
- `trl.trainer.utils.RepeatSampler` (subclassed: `seed`, `generator`, rlcw.rl.trl_common) and
  `trl.trainer.utils.add_fused_lm_head` (TRL's log-prob helper reads `log_probs` from it; off CPU the
  shared-prefix forward calls it with `labels`, `fused_lm_head=True` and a key/value cache and reads `log_probs` and
  `entropy`; on CPU it runs the backbone and rlcw.rl.fused_logprobs at TRL's `temperature`:
  tests/unit/test_shared_prefix.py compares both with TRL's own `_get_per_token_logps_and_entropies`).
- Used elsewhere with this trainer: `GRPOTrainer(rollout_func=...)` (experimental; `RolloutFunc` in
  trl.trainer.grpo_trainer) with `_tokenize_prompts`, `generation_config`, `eos_token_ids`
  (rlcw.rl.grpo.rollout) and `trl.models.unwrap_model_for_generation` (rlcw.agents.rl).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from trl import GRPOTrainer

from rlcw.rl.trl_common import StepState, TRLExtras

TRL_VERSION_CHECKED = "1.16.0"


@dataclass
class GRPOStepState(StepState):
    """rlcw.rl.trl_common.StepState plus what GRPO's loss hooks pass each other (TRL calls, per step:
    `_generate_and_score_completions`; then per micro-batch `_compute_loss` -> `_get_per_token_logps_and_entropies`
    inside it). Here `catch` is set by `_compute_loss`: the caught forward is the loss's own.

    - `kl_due`: this generation's KL to the start is taken in `_compute_loss`, from the loss's own forward
      (on-policy: TRL kept no old log-probs), one start forward per micro-batch instead of two forwards.
      Written by `_generate_and_score_completions` (every generation resets it), read by `_compute_loss`.
    - `is_inputs`: the copy of the batch whose advantages the importance weights rescale. Written by
      `_compute_loss`, read and cleared by `_get_per_token_logps_and_entropies`.
    """

    kl_due: bool = False
    is_inputs: dict | None = None
    want_end: bool = False  # the loss forward also returns the end log-probs (early_end_unlikelihood)
    end_logps: torch.Tensor | None = None


class RlcwGRPOTrainer(TRLExtras, GRPOTrainer):
    """GRPOTrainer + rlcw's per-step extras (see the module docstring for what and which TRL internals)."""

    step_state_cls = GRPOStepState

    def __init__(
        self,
        *args,
        rollout_is_cap: float = 0.0,
        shared_prefix: bool = True,
        lm_head: str = "auto",
        ending_credit: tuple[str, ...] = (),
        early_end_unlikelihood: float = 0.0,
        end_rate_in_range: float = 0.0,
        **kwargs,
    ):
        """`rollout_is_cap` > 0: each completion token's loss is weighted by min(pi/mu, cap) when the rollout
        returned its sampler's log-probs mu (rlcw.rl.grpo.is_correction; 0 = off); `shared_prefix`: log-prob
        forwards run each group's prompt once where rlcw.rl.grpo.shared_prefix applies; `lm_head` (auto | trl |
        rlcw): whose LM head those forwards use (rlcw.rl.grpo.shared_prefix.resolve_lm_head); `ending_credit`: the
        reward functions (by name) whose advantage goes to each completion's last token only
        (rlcw.rl.grpo.ending_credit; empty = off); `early_end_unlikelihood`: the weight of -log(1 - pi(end)) at
        completion positions short of the row's `min_words` words, added to the loss (0 = off); `end_rate_in_range`
        in (0, 1): with that weight, also the divergence of pi(end) from this rate at positions where ending would
        leave the story inside the row's word range (0 = off). `run`, `monitor_ngram`,
        `log_kl_every`, `kl_ref_model`, `samples_every`, `samples_k`, `slop`: rlcw.rl.trl_common.TRLExtras. The
        rest is TRL's GRPOTrainer."""
        super().__init__(*args, **kwargs)
        self.rollout_is_cap = rollout_is_cap
        self.lm_head = lm_head
        self.early_end_unlikelihood = early_end_unlikelihood
        if not 0 <= end_rate_in_range < 1 or (end_rate_in_range > 0 and early_end_unlikelihood <= 0):
            raise ValueError(
                f"end_rate_in_range must be in [0, 1) and needs early_end_unlikelihood > 0 (its weight), got "
                f"{end_rate_in_range} with {early_end_unlikelihood}"
            )
        self.end_rate_in_range = end_rate_in_range
        self._word_counts = None
        unknown = sorted(set(ending_credit) - set(self.reward_func_names))
        if unknown or (ending_credit and set(self.reward_func_names) <= set(ending_credit)):
            raise ValueError(
                f"ending_credit names {sorted(ending_credit)}: each must be one of the reward functions "
                f"{self.reward_func_names}, and at least one must be left for the content tokens"
            )
        self.ending_credit = [name in ending_credit for name in self.reward_func_names] if ending_credit else None
        if ending_credit:
            from rlcw.logs import say

            say("grpo", f"ending credit: {', '.join(ending_credit)} judge each completion's last token only")
        self._own_head: bool | None = None  # resolved at the first shared-prefix forward, and said in the log
        # one process, no DeepSpeed/FSDP engine: the shared-prefix forward calls the model once per prompt group
        self.shared_prefix = (
            shared_prefix
            and self.accelerator.num_processes == 1
            and not (self.is_deepspeed_enabled or self.is_fsdp_enabled)
        )

    # ---------------------------------------------------------------- TRL hooks

    def _compute_loss(self, model, inputs):
        """TRL's loss with each completion token reweighted by min(pi/mu, cap) when the rollout returned its
        sampler's log-probs mu (TRL 1.16 does that only for vLLM). No extra forward: the weight is taken from
        the loss's own log-probs, caught in _get_per_token_logps_and_entropies below."""
        st = self.step_state
        if self.rollout_is_cap > 0 and inputs.get("sampling_per_token_logps") is not None:
            inputs = dict(inputs)  # the buffered batch is reused across iterations: reweight a copy
            st.is_inputs = inputs
        kl_due = st.kl_due and self.model.training
        st.catch = True
        st.want_end = self.early_end_unlikelihood > 0 and "end_held" in inputs
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            st.is_inputs, st.catch, st.want_end = None, False, False
            caught, st.caught = st.caught, None
            end, st.end_logps = st.end_logps, None
        if self.early_end_unlikelihood > 0 and "end_held" in inputs:
            loss = loss + self.early_end_unlikelihood * self._early_end_term(end, inputs)
        if kl_due:  # the policy's log-probs are the loss's own (on-policy: they are the sampler's model's)
            self._append_kl(self.kl_to_start(inputs, policy_logps=caught))
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = self._shared_prefix_logps(*args, **kwargs) or super()._get_per_token_logps_and_entropies(*args, **kwargs)
        st = self.step_state
        if self._catch(out) and st.is_inputs is not None:  # the first call inside _compute_loss is the loss's forward
            inputs, st.is_inputs = st.is_inputs, None
            self._rlcw_reweight(inputs, out[0])
        return out

    def _shared_prefix_logps(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        """TRL's (log-probs, entropies, aux loss) with each group's prompt run once, or None where that does not
        apply (off, a multimodal or MoE-aux call, no shared prompt): then TRL's own path runs."""
        if not self.shared_prefix or any(v is not None and v is not False for v in kwargs.values()):
            return None
        from rlcw.rl.grpo.shared_prefix import resolve_lm_head, shared_prefix_logps

        if self._own_head is None:
            from rlcw.logs import say

            self._own_head, why = resolve_lm_head(self.lm_head, model, input_ids.device)
            say("grpo", f"loss forward: {'rlcw' if self._own_head else 'TRL'}'s LM head ({why})")
        st = self.step_state
        want_end = st.want_end and self._own_head
        st.want_end = False  # the loss's forward only, not the KL's start forward after it
        out = shared_prefix_logps(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            self.temperature,
            compute_entropy,
            self.accelerator.autocast,
            own_head=self._own_head,
            end_ids=list(self.eos_token_ids) if want_end else None,
        )
        if out is not None and want_end:
            st.end_logps, out = out[2], out[:2]
        return None if out is None else (*out, None)

    def _end_positions(self, inputs: list[dict], output: dict) -> dict[str, torch.Tensor]:
        """(B, T) bool masks of completion positions by the words their text holds so far, counted token by token
        as count_words counts the text (rlcw.sampling.WordCounts): `end_held`, fewer than the row's `min_words`;
        with `end_rate_in_range`, `end_in_range`, from `min_words` to `max_words` (a row without a range: neither)."""
        from rlcw.sampling import WordCounts

        ids, mask = output["completion_ids"], output["completion_mask"].bool()
        if self._word_counts is None:
            vocab = self.accelerator.unwrap_model(self.model).config.vocab_size
            self._word_counts = WordCounts.of(self.processing_class, vocab).to(ids.device)
        low = torch.tensor([int(r.get("min_words") or 0) for r in inputs], device=ids.device)[:, None]
        words = self._word_counts.before(ids)
        out = {"end_held": (words < low) & mask}
        if self.end_rate_in_range > 0:
            high = torch.tensor([int(r.get("max_words") or -1) for r in inputs], device=ids.device)[:, None]
            out["end_in_range"] = (words >= low) & (words <= high) & mask
        return out

    def _early_end_term(self, end: torch.Tensor | None, inputs: dict) -> torch.Tensor:
        """Per completion token of the micro-batch: the sum over held positions of -log(1 - pi(end)), plus with
        `end_rate_in_range` = r the sum over in-range positions of KL(Bernoulli(r) || Bernoulli(pi(end))), which
        is 0 where pi(end) = r. Logged as `early_end/unlikelihood` (the whole term), `early_end/p_end_held` and
        `early_end/p_end_in_range` (the mean probability of ending at such a position)."""
        if end is None:
            raise RuntimeError(
                "train.early_end_unlikelihood needs the loss forward through rlcw's LM head with each prompt run "
                "once (a CPU, one process, train.lm_head auto or rlcw)"
            )
        mode = "train" if self.model.training else "eval"
        end = end.clamp(max=-1e-6)
        stay = torch.log1p(-end.exp())  # log(1 - pi(end))
        held = inputs["end_held"]
        term = (-stay * held).sum()
        p_end = (end.detach().exp() * held).sum() / held.sum().clamp(min=1)
        self._metrics[mode]["early_end/p_end_held"].append(float(p_end))
        if "end_in_range" in inputs:
            r, inside = self.end_rate_in_range, inputs["end_in_range"]
            kl = r * (math.log(r) - end) + (1 - r) * (math.log1p(-r) - stay)
            term = term + (kl * inside).sum()
            p_in = (end.detach().exp() * inside).sum() / inside.sum().clamp(min=1)
            self._metrics[mode]["early_end/p_end_in_range"].append(float(p_in))
        term = term / inputs["completion_mask"].sum().clamp(min=1)
        self._metrics[mode]["early_end/unlikelihood"].append(float(term.detach()))
        return term

    def _rlcw_reweight(self, inputs: dict, per_token_logps: torch.Tensor) -> None:
        """Scale the advantages per token by w = min(exp(logp - mu), cap), w > 0: for every TRL loss linear in
        the advantage (grpo, dapo, bnpo, dr_grpo, cispo, sapo) that is the loss times w, and TRL accepts (B, T)
        advantages. logp = the old log-probs when TRL kept them (num_iterations > 1), so the weight is
        pi_old/mu and TRL's own ratio covers pi/pi_old."""
        from rlcw.rl.grpo.is_correction import is_stats, truncated_is_weights

        mask = inputs["completion_mask"]
        base = inputs.get("old_per_token_logps")
        base = per_token_logps.detach() if base is None else base  # (B, T)
        weights, sums = truncated_is_weights(base, inputs["sampling_per_token_logps"], mask, self.rollout_is_cap)
        adv = inputs["advantages"]
        inputs["advantages"] = (adv.unsqueeze(1) if adv.dim() == 1 else adv) * weights  # (B, T)
        mode = "train" if self.model.training else "eval"
        for key, value in is_stats(self.accelerator.reduce(sums, reduction="sum")).items():
            self._metrics[mode][f"rollout_is/{key}"].append(value)

    def _generate_and_score_completions(self, inputs):
        self.rollout_rows = inputs  # the batch's dataset rows, in the prompts' order (rollout.block_short_endings)
        output = super()._generate_and_score_completions(inputs)
        if self.early_end_unlikelihood > 0:
            output.update(self._end_positions(inputs, output))
        if self.model.training:
            if self.ending_credit is not None:
                output["advantages"] = self._ending_credit_advantages(output["completion_mask"])
            self.step_state.kl_due = False  # the buffer this generation fills is consumed before the next one
            self._on_batch(inputs, output)
            if getattr(self, "injected_rows", None):  # rollout.references: groups whose last row is a reference
                self._metrics["train"]["rollout/references"].append(float(len(self.injected_rows)))
        return output

    def _local_rows(self, inputs: list[dict], output: dict) -> list[dict]:
        """TRLExtras' rows, those the fast rollout filled with a reference story marked `reference`."""
        rows = super()._local_rows(inputs, output)
        for i in getattr(self, "injected_rows", ()):
            rows[i]["reference"] = True
        return rows

    def _ending_credit_advantages(self, completion_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) advantages of this process's rows from the gathered rewards per function of this generation
        (rlcw.rl.grpo.ending_credit): the content terms' advantage on every token, the stopping terms' added on the
        last."""
        from rlcw.rl.grpo.ending_credit import split_advantages, token_advantages

        content, ending = split_advantages(
            self.step_state.rewards, self.reward_weights, self.ending_credit, self.num_generations, self.scale_rewards
        )
        n = completion_mask.shape[0]
        rows = slice(self.accelerator.process_index * n, (self.accelerator.process_index + 1) * n)
        return token_advantages(content[rows], ending[rows], completion_mask)

    # ---------------------------------------------------------------- per-step extras

    def _kl_at_generation(self, output: dict) -> dict[str, float]:
        """TRL kept no old log-probs (on-policy): the loss's forward computes exactly them, so the KL waits for it
        (`_compute_loss`, `GRPOStepState.kl_due`) and costs one forward of the start model instead of two."""
        if output.get("old_per_token_logps") is None:
            self.step_state.kl_due = True
            return {}
        return self._kl_metrics(self.kl_to_start(output))

    def _append_kl(self, kl: tuple[float, float]) -> None:
        """Per micro-batch, like TRL's own `kl`: a step of k micro-batches logs the mean of k token-weighted KLs."""
        for key, value in self._kl_metrics(kl).items():
            self._metrics["train"][key].append(value)
