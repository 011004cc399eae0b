"""rlcw's extension of TRL's GRPOTrainer: a resumable prompt order and per-step extras of each batch.

`RlcwGRPOTrainer` is TRL's GRPOTrainer with everything rlcw adds passed to its constructor:

    trainer = RlcwGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), ...,   # TRL's own arguments
                              run=run, monitor_ngram=3, log_kl_every=3, kl_ref_model=None,
                              samples_every=1, samples_k=2, rollout_is_cap=3.0)

Per generated training batch it logs (into TRL's metrics, so they reach metrics.jsonl and
TensorBoard with TRL's): the reward-hacking statistics (`monitor/*`, rlcw.measure.monitors), KL to the
starting model (`monitor/kl_to_start` = k3, `kl_to_start/k1`, per completion token, via
rlcw.sampling.kl_per_token; even at beta = 0), reward, words and tokens per prompt source
(`source/<name>/*`); rank 0 writes the sampled prompt order (`samples/data_order.jsonl`) and the
top and bottom scored stories (`samples/train_step_XXXXXX.jsonl`). The starting model for KL is
TRL's reference log-probs when beta > 0, else the policy with its LoRA adapter disabled, else
`kl_ref_model` (a frozen copy the caller loads for full fine-tuning). On-policy (TRL keeps no old
log-probs) the policy's side is the loss's own forward, so a KL step costs one extra forward, not
two. The prompt sampler is TRL's RepeatSampler reseeded per epoch, so a resumed run draws the
prompt order of an uninterrupted one. The hooks below pass values to each other through one
per-step record, `StepState` (its docstring names the writer and the reader of each field); the
batch's statistics and files come from one callback, rlcw.rl.grpo.batch_log.BatchLog. With `shared_prefix`,
the loss's and the start model's forwards run each group's prompt once (rlcw.rl.grpo.shared_prefix).

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
- `trl.trainer.utils.RepeatSampler` (subclassed: `seed`, `generator`) and
  `trl.trainer.grpo_trainer.add_fused_lm_head` (TRL's log-prob helper reads `log_probs` from it; off CPU the
  shared-prefix forward calls it with `labels`, `fused_lm_head=True` and a key/value cache and reads `log_probs` and
  `entropy`; on CPU it runs the backbone and rlcw.rl.fused_logprobs at TRL's `temperature`:
  tests/unit/test_shared_prefix.py compares both with TRL's own `_get_per_token_logps_and_entropies`).
- Used elsewhere with this trainer: `GRPOTrainer(rollout_func=...)` (experimental; `RolloutFunc` in
  trl.trainer.grpo_trainer) with `_tokenize_prompts`, `generation_config`, `eos_token_ids`
  (rlcw.rl.grpo.rollout) and `trl.models.unwrap_model_for_generation` (rlcw.agents.rl).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.trainer.grpo_trainer import add_fused_lm_head
from trl.trainer.utils import RepeatSampler

from rlcw.data.records import message_text
from rlcw.measure.monitors import PREFIX
from rlcw.rl.grpo.batch_log import BatchLog
from rlcw.runs import RunDir
from rlcw.sampling import kl_per_token

TRL_VERSION_CHECKED = "1.16.0"


class EpochRepeatSampler(RepeatSampler):
    """TRL's sampler reseeded per epoch (seed + epoch): its own generator otherwise runs on across
    epochs, so a run resumed in a later epoch would draw a different prompt order."""

    epoch = 0

    def set_epoch(self, epoch: int) -> None:  # called by accelerate's DataLoaderShard.set_epoch
        self.epoch = epoch

    def __iter__(self):
        if self.seed is not None:
            self.generator.manual_seed(self.seed + self.epoch)
        return super().__iter__()


@dataclass
class StepState:
    """The values that pass between TRL hooks within one step, each with the hook that writes it and the one
    that reads it (TRL calls, per step: `_generate_and_score_completions` -> `_calculate_rewards` inside it;
    then per micro-batch `_compute_loss` -> `_get_per_token_logps_and_entropies` inside it).

    - `rewards`: (N, F) rewards per function of the batch being generated. Written by `_calculate_rewards`,
      read right after by `_generate_and_score_completions` (TRL's output does not carry them).
    - `kl_due`: this generation's KL to the start is taken in `_compute_loss`, from the loss's own forward
      (on-policy: TRL kept no old log-probs), one start forward per micro-batch instead of two forwards.
      Written by `_generate_and_score_completions` (every generation resets it), read by `_compute_loss`.
    - `catch`: the next `_get_per_token_logps_and_entropies` call is the loss's forward. Set by
      `_compute_loss`, cleared by the first `_get_per_token_logps_and_entropies` (or `_compute_loss` after).
    - `caught`: that forward's detached per-token log-probs (B, T). Written by
      `_get_per_token_logps_and_entropies`, read and cleared by `_compute_loss` (for the KL to the start).
    - `is_inputs`: the copy of the batch whose advantages the importance weights rescale. Written by
      `_compute_loss`, read and cleared by `_get_per_token_logps_and_entropies`.

    The run-long prompt sampler (`_get_train_sampler` -> `_run_epoch`) is not per step: it stays on the trainer.
    """

    rewards: torch.Tensor | None = None
    kl_due: bool = False
    catch: bool = False
    caught: torch.Tensor | None = None
    is_inputs: dict | None = None


class RlcwGRPOTrainer(GRPOTrainer):
    """GRPOTrainer + rlcw's per-step extras (see the module docstring for what and which TRL internals)."""

    def __init__(
        self,
        *args,
        run: RunDir,
        monitor_ngram: int | None = 3,
        log_kl_every: int = 1,
        kl_ref_model=None,
        samples_every: int = 1,
        samples_k: int = 2,
        rollout_is_cap: float = 0.0,
        slop=None,
        shared_prefix: bool = True,
        **kwargs,
    ):
        """`monitor_ngram`: n of the monitors' n-gram statistics (None = no monitor statistics);
        `log_kl_every`: KL to the start on step 1 and every N-th step (0 = never); `kl_ref_model`: a
        frozen starting model, needed only without LoRA at beta = 0; `samples_every`: top/bottom
        `samples_k` stories every N steps (0 = never); `rollout_is_cap` > 0: each completion token's loss is
        weighted by min(pi/mu, cap) when the rollout returned its sampler's log-probs mu (rlcw.rl.grpo.is_correction;
        0 = off); `slop`: a rlcw.metrics.slop.SlopBaseline for `monitor/slop` (None = off); `shared_prefix`
        (on; off only to compare): log-prob forwards run each group's prompt once where rlcw.rl.grpo.shared_prefix
        applies. The rest is TRL's GRPOTrainer."""
        super().__init__(*args, **kwargs)
        self.run, self.log_kl_every = run, log_kl_every
        self.batch_log = BatchLog(run, monitor_ngram, samples_every, samples_k, slop)
        self.kl_ref_model = kl_ref_model
        self.rollout_is_cap = rollout_is_cap
        # one process, no DeepSpeed/FSDP engine: the shared-prefix forward calls the model once per prompt group
        self.shared_prefix = (
            shared_prefix
            and self.accelerator.num_processes == 1
            and not (self.is_deepspeed_enabled or self.is_fsdp_enabled)
        )
        self._rlcw_sampler: EpochRepeatSampler | None = None
        self.step_state = StepState()  # what the hooks below pass each other (see StepState)
        if kl_ref_model is not None:
            kl_ref_model.to(self.accelerator.device).eval().requires_grad_(False)
            add_fused_lm_head(
                kl_ref_model, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32
            )

    # ---------------------------------------------------------------- TRL hooks

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
        # A multi-rank resume mid-epoch wraps the loader as SkipBatchSampler -> BatchSamplerShard ->
        # BatchSampler; neither accelerate's nor transformers' set_epoch reaches the sampler through
        # BatchSamplerShard (no .sampler), so it would replay epoch 0's order: set it here.
        if self._rlcw_sampler is not None and kwargs.get("epoch") is not None:
            self._rlcw_sampler.set_epoch(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)

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
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            st.is_inputs, st.catch = None, False
            caught, st.caught = st.caught, None
        if kl_due:  # the policy's log-probs are the loss's own (on-policy: they are the sampler's model's)
            self._append_kl(self.kl_to_start(inputs, policy_logps=caught))
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = self._shared_prefix_logps(*args, **kwargs) or super()._get_per_token_logps_and_entropies(*args, **kwargs)
        st = self.step_state
        if st.catch:  # the first call inside _compute_loss is the loss's forward
            st.catch, st.caught = False, out[0].detach()
            if st.is_inputs is not None:
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
        from rlcw.rl.grpo.shared_prefix import shared_prefix_logps

        out = shared_prefix_logps(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            self.temperature,
            compute_entropy,
            self.accelerator.autocast,
        )
        return None if out is None else (*out, None)

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

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self.step_state.rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self.step_state.rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self._on_batch(inputs, output, self.step_state.rewards)
        return output

    # ---------------------------------------------------------------- per-step extras

    def kl_to_start(self, output: dict, policy_logps: torch.Tensor | None = None) -> tuple[float, float]:
        """(k3, k1) KL estimates per completion token, policy vs the starting model, on the sampled tokens
        (gathered over ranks, token-weighted). The policy's log-probs are `policy_logps` (the loss's forward),
        else the batch's old log-probs, else a forward."""
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)  # (B, P+C)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        keep = output["completion_ids"].size(1)
        with torch.no_grad():
            logp = policy_logps if policy_logps is not None else output.get("old_per_token_logps")
            if logp is None:
                logp = self._get_per_token_logps_and_entropies(self.model, ids, mask, keep)[0]  # (B, C)
            ref = output.get("ref_per_token_logps")
            if ref is None:
                ref = self._start_logps(ids, mask, keep)
        cmask = output["completion_mask"].float()
        k3 = (kl_per_token(logp, ref, "k3") * cmask).sum()
        k1 = (kl_per_token(logp, ref, "k1") * cmask).sum()
        sums = self.accelerator.gather(torch.stack([k3, k1, cmask.sum()]).view(1, 3)).sum(0)
        return (sums[0] / sums[2].clamp(min=1)).item(), (sums[1] / sums[2].clamp(min=1)).item()

    @staticmethod
    def _kl_metrics(kl: tuple[float, float]) -> dict[str, float]:
        return {PREFIX + "kl_to_start": kl[0], "kl_to_start/k1": kl[1]}

    def _append_kl(self, kl: tuple[float, float]) -> None:
        """Per micro-batch, like TRL's own `kl`: a step of k micro-batches logs the mean of k token-weighted KLs."""
        for key, value in self._kl_metrics(kl).items():
            self._metrics["train"][key].append(value)

    def _start_logps(self, ids, mask, keep) -> torch.Tensor:
        model = self.accelerator.unwrap_model(self.model)
        if hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                return self._get_per_token_logps_and_entropies(self.model, ids, mask, keep)[0]
        if self.kl_ref_model is None:
            raise ValueError("KL to the start of a full fine-tune at beta=0 needs kl_ref_model (a frozen copy)")
        return self._get_per_token_logps_and_entropies(self.kl_ref_model, ids, mask, keep)[0]

    def _on_batch(self, inputs: list[dict], output: dict, rewards_per_func: torch.Tensor) -> None:
        """A generated training batch: its rows (gathered over ranks) to the batch log, the KL to the start now
        or at the loss's forward (`StepState.kl_due`), the metrics into TRL's."""
        step = self.state.global_step + 1  # the step this batch trains
        rows = gather_object(self._local_rows(inputs, output))
        total = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(1).tolist()
        for r, value, per in zip(rows, total, rewards_per_func.tolist(), strict=False):
            r["reward"], r["rewards"] = value, dict(zip(self.reward_func_names, per, strict=False))
        metrics = self.batch_log(step, rows, self.num_generations, is_main_process=self.accelerator.is_main_process)
        kl_due = bool(self.log_kl_every) and (step % self.log_kl_every == 0 or step == 1)
        # TRL kept no old log-probs (on-policy): the loss's forward computes exactly them, so the KL waits for it
        # (_compute_loss) and costs one forward of the start model instead of two; the buffer this generation
        # fills is consumed before the next generation, which resets the flag
        self.step_state.kl_due = kl_due and output.get("old_per_token_logps") is None
        if kl_due and not self.step_state.kl_due:
            metrics.update(self._kl_metrics(self.kl_to_start(output)))
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)

    def _local_rows(self, inputs: list[dict], output: dict) -> list[dict]:
        """One row per completion of this process: text, tokens, cut by the cap, prompt and its columns."""
        tok = self.processing_class
        comp = output["completion_ids"]  # (B, C), padded after the EOS
        is_end = (comp == tok.eos_token_id) | ((comp == tok.pad_token_id) if tok.pad_token_id is not None else False)
        finished = is_end.any(1)
        lengths = torch.where(
            finished, is_end.int().argmax(1) + 1, torch.full_like(finished, comp.size(1), dtype=torch.long)
        )
        texts = [tok.decode(c[:n], skip_special_tokens=True) for c, n in zip(comp, lengths.tolist(), strict=False)]
        # Agents' Room: the rewarded text is the whole story; tokens/truncated stay the trained agent's call
        return [
            {
                "text": x.get("story", t).strip(),
                "tokens": int(n),
                "truncated": not bool(f),
                "prompt": message_text(x["prompt"]),
                "prompt_id": x.get("prompt_id"),  # rlcw's prompt rows carry both; a plain TRL dataset need not
                "source": x.get("source", "default"),
                "min_words": x.get("min_words"),
                "max_words": x.get("max_words"),
                **({"agents_room": dict(x["agents_room"], trained_text=t.strip())} if "agents_room" in x else {}),
            }
            for t, n, f, x in zip(texts, lengths.tolist(), finished.tolist(), inputs, strict=False)
        ]
