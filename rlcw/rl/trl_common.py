"""What rlcw adds to TRL's group-sampling trainers (GRPOTrainer, RLOOTrainer), written once for both.

    class RlcwGRPOTrainer(TRLExtras, GRPOTrainer): ...      # rlcw.rl.grpo.trainer
    class RlcwRLOOTrainer(TRLExtras, RLOOTrainer): ...      # rlcw.rl.rloo.trainer
    trainer = RlcwRLOOTrainer(model=..., args=RLOOConfig(...), ...,     # TRL's own arguments
                              run=run, monitor_ngram=3, log_kl_every=3, kl_ref_model=None,
                              samples_every=1, samples_k=2, slop=None)

`TRLExtras` gives both trainers: the prompt sampler (TRL's RepeatSampler reseeded per epoch, so a resumed run
draws the prompt order of an uninterrupted one), the per-step record its hooks pass values through (`StepState`),
each batch's rewards per function (`_calculate_rewards`), KL to the starting model (`kl_to_start`: k3 as
`monitor/kl_to_start` and k1 as `kl_to_start/k1` per completion token, even at beta = 0; the start is TRL's
reference log-probs when the batch carries them, else the policy with its LoRA adapter disabled, else
`kl_ref_model`, a frozen copy the caller loads for full fine-tuning) and the per-batch hook (`_on_batch`): the
batch's rows, gathered over ranks, go to rlcw.rl.batch_log.BatchLog (reward-hacking statistics `monitor/*`, reward,
words and tokens per prompt source; on rank 0 the sampled prompt order and the top and bottom stories under
`samples/`), and the metrics go into TRL's, so they reach metrics.jsonl with TRL's own. Each trainer says where the
policy's side of the KL comes from (`_kl_at_generation`).

TRL symbols used, by both trainers (TRL 1.16.0, tests/unit/test_grpo_trainer_symbols.py): the hooks
`_get_train_sampler(dataset)`, `_calculate_rewards(inputs, prompts, completions, completion_ids_list)`,
`_get_per_token_logps_and_entropies(model, ids, mask, logits_to_keep)[0]`; transformers' `Trainer._run_epoch(...,
epoch=...)`; the attributes `_metrics["train"]`, `reward_weights`, `reward_func_names`, `num_generations`,
`num_iterations`, `shuffle_dataset`, `temperature`, `args.generation_batch_size`, `args.steps_per_generation`
(and `args.cast_lm_head_to_fp32` where the config has it); `trl.trainer.utils.RepeatSampler` (subclassed: `seed`,
`generator`) and `trl.trainer.utils.add_fused_lm_head` (TRL's log-prob helper reads `log_probs` from it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from accelerate.utils import gather_object
from trl.trainer.utils import RepeatSampler, add_fused_lm_head

from rlcw.measure.monitors import PREFIX
from rlcw.rewards.bt import message_text
from rlcw.rl.batch_log import BatchLog
from rlcw.runs import RunDir
from rlcw.sampling import kl_per_token


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
    that reads it (TRL calls `_calculate_rewards` inside `_generate_and_score_completions`).

    - `rewards`: (N, F) rewards per function of the batch being generated. Written by `_calculate_rewards`,
      read right after by `_generate_and_score_completions` (TRL's output does not carry them).
    - `catch`: the next `_get_per_token_logps_and_entropies` call is the forward whose log-probs the KL to the
      start reuses. Set by the trainer's hook that runs that forward (each trainer's docstring names it),
      cleared by the first `_get_per_token_logps_and_entropies` (`_catch`) or by that hook after.
    - `caught`: that forward's detached per-token log-probs (B, T). Written by `_catch`, read and cleared by the
      hook that set `catch`.

    The run-long prompt sampler (`_get_train_sampler` -> `_run_epoch`) is not per step: it stays on the trainer.
    """

    rewards: torch.Tensor | None = None
    catch: bool = False
    caught: torch.Tensor | None = None


class TRLExtras:
    """rlcw's per-step extras for a TRL trainer class that follows it in the bases (see the module docstring)."""

    step_state_cls: type[StepState] = StepState

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
        """`monitor_ngram`: n of the monitors' n-gram statistics (None = no monitor statistics);
        `log_kl_every`: KL to the start on step 1 and every N-th step (0 = never); `kl_ref_model`: a
        frozen starting model, needed only for a full fine-tune without TRL's reference log-probs;
        `samples_every`: top/bottom `samples_k` stories every N steps (0 = never); `slop`: a
        rlcw.metrics.slop.SlopBaseline for `monitor/slop` (None = off). The rest goes to the TRL trainer."""
        super().__init__(*args, **kwargs)
        self.run, self.log_kl_every = run, log_kl_every
        self.batch_log = BatchLog(run, monitor_ngram, samples_every, samples_k, slop)
        self.kl_ref_model = kl_ref_model
        self._rlcw_sampler: EpochRepeatSampler | None = None
        self.step_state = self.step_state_cls()  # what the hooks pass each other (see StepState)
        if kl_ref_model is not None:
            kl_ref_model.to(self.accelerator.device).eval().requires_grad_(False)
            # as TRL sets up its own reference model (RLOOConfig has no cast_lm_head_to_fp32: TRL's RLOO never casts)
            cast = getattr(self.args, "cast_lm_head_to_fp32", False)
            add_fused_lm_head(kl_ref_model, temperature=self.temperature, cast_lm_head_to_fp32=cast)

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

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self.step_state.rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self.step_state.rewards

    def _catch(self, out: tuple) -> bool:
        """Keep the log-probs of `out` (a `_get_per_token_logps_and_entropies` result) when `StepState.catch` waits
        for them; True when it did."""
        st = self.step_state
        if not st.catch:
            return False
        st.catch, st.caught = False, out[0].detach()
        return True

    # ---------------------------------------------------------------- per-step extras

    def kl_to_start(self, output: dict, policy_logps: torch.Tensor | None = None) -> tuple[float, float]:
        """(k3, k1) KL estimates per completion token, policy vs the starting model, on the sampled tokens
        (gathered over ranks, token-weighted). The policy's log-probs are `policy_logps` (a caught forward),
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

    def _start_logps(self, ids, mask, keep) -> torch.Tensor:
        model = self.accelerator.unwrap_model(self.model)
        if hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                return self._get_per_token_logps_and_entropies(self.model, ids, mask, keep)[0]
        if self.kl_ref_model is None:
            raise ValueError("KL to the start of a full fine-tune at beta=0 needs kl_ref_model (a frozen copy)")
        return self._get_per_token_logps_and_entropies(self.kl_ref_model, ids, mask, keep)[0]

    def _kl_at_generation(self, output: dict) -> dict[str, float]:
        """The KL-to-start metrics of a KL step, taken when the batch is generated (from `StepState.caught` when a
        forward was caught, else the batch's old log-probs, else a forward); a trainer that takes it later
        returns {} here."""
        return self._kl_metrics(self.kl_to_start(output, policy_logps=self.step_state.caught))

    def _on_batch(self, inputs: list[dict], output: dict) -> None:
        """A generated training batch: its rows (gathered over ranks) with their rewards to the batch log, the KL
        to the start on a KL step (`_kl_at_generation`), the metrics into TRL's."""
        step = self.state.global_step + 1  # the step this batch trains
        rows = gather_object(self._local_rows(inputs, output))
        rewards_per_func = self.step_state.rewards
        total = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(1).tolist()
        for r, value, per in zip(rows, total, rewards_per_func.tolist(), strict=False):
            r["reward"], r["rewards"] = value, dict(zip(self.reward_func_names, per, strict=False))
        metrics = self.batch_log(step, rows, self.num_generations, is_main_process=self.accelerator.is_main_process)
        if self.log_kl_every and (step % self.log_kl_every == 0 or step == 1):
            metrics.update(self._kl_at_generation(output))
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
