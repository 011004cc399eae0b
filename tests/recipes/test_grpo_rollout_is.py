"""The GRPO trainer's truncated importance-sampling correction of fast (bf16) rollouts, on the tiny Llama.

OMP_NUM_THREADS=1 python -m pytest -q tests/recipes/test_grpo_rollout_is.py
"""

from __future__ import annotations

import math

import pytest
import torch

EQUAL = ("Write about rain.", "Write about snow.")


def _train(
    tiny_model_dir,
    tokenizer,
    tmp_path,
    *,
    seed: int,
    precision: str,
    cap: float,
    shift: float = 0.0,
    texts: tuple[str, ...] = EQUAL,
    shared_prefix: bool = False,
):
    """3 GRPO steps with the fast rollout; `shift` is added to the sampler's log-probs (a fake sampler gap)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from rlcw.rl.grpo.rollout import make_fast_rollout_func
    from rlcw.rl.grpo.trainer import RlcwGRPOTrainer
    from rlcw.runs import RunDir

    # EQUAL: prompts of one token length: TRL's loss forward gives left-padded rows no position ids (positions
    # then count the padding) while sampling does, so padding alone would open a sampler/policy gap in fp32
    prompts = [[{"role": "user", "content": t}] for t in texts]
    args = GRPOConfig(
        output_dir=str(tmp_path / f"{precision}-{seed}-{cap}-{shift}-{len(texts[0])}-{shared_prefix}"),
        max_steps=3,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        learning_rate=1e-2,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        bf16=False,
        gradient_checkpointing=False,  # as rlcw grpo sets it (TRL 1.16 defaults to True)
        logging_steps=1,
        disable_tqdm=True,
        seed=seed,
    )
    fast = make_fast_rollout_func(precision)

    def rollout(p, trainer):
        out = fast(p, trainer)
        return dict(out, logprobs=[[x + shift for x in row] for row in out["logprobs"]])

    torch.manual_seed(seed)
    trainer = RlcwGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
        reward_funcs=lambda completions, **kw: [float(len(c[0]["content"])) for c in completions],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts] * 3),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        rollout_func=rollout,
        run=RunDir(tmp_path / f"run-{precision}-{seed}-{cap}-{shift}-{len(texts[0])}-{shared_prefix}", "grpo"),
        rollout_is_cap=cap,
        shared_prefix=shared_prefix,
    )
    assert trainer.shared_prefix is shared_prefix  # one process: nothing turns it off
    trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def test_weight_multiplies_the_loss(tiny_model_dir, tokenizer, tmp_path):
    """Same seed, same samples: a sampler log-prob lowered by ln 2 gives weight 2 on every token, so the first
    step's policy gradient doubles (1.5x under a cap of 1.5); with cap 0 the trainer ignores the sampler's
    log-probs. (On-policy GRPO's loss value is 0 here: equal-length completions, advantages summing to 0.)"""
    plain = _train(tiny_model_dir, tokenizer, tmp_path, seed=0, precision="fp32", cap=0.0, shift=-math.log(2))
    doubled = _train(tiny_model_dir, tokenizer, tmp_path, seed=0, precision="fp32", cap=3.0, shift=-math.log(2))
    capped = _train(tiny_model_dir, tokenizer, tmp_path, seed=0, precision="fp32", cap=1.5, shift=-math.log(2))
    assert "rollout_is/mean_weight" not in plain[0]
    assert plain[0]["grad_norm"] > 0
    assert doubled[0]["grad_norm"] == pytest.approx(2 * plain[0]["grad_norm"], rel=1e-3)
    assert doubled[0]["rollout_is/mean_weight"] == pytest.approx(2.0, rel=1e-4)
    assert doubled[0]["rollout_is/mean_abs_gap"] == pytest.approx(math.log(2), rel=1e-3)
    assert doubled[0]["rollout_is/clipped_share"] == 0
    assert capped[0]["grad_norm"] == pytest.approx(1.5 * plain[0]["grad_norm"], rel=1e-3)
    assert capped[0]["rollout_is/clipped_share"] == 1


def test_corrected_bf16_run_inside_fp32_seed_spread(tiny_model_dir, tokenizer, tmp_path):
    """A corrected bf16-rollout run's gradient-norm, reward and entropy means lie inside the spread of fp32 runs
    with other seeds (widened by half their range), and its correction statistics are small and finite."""
    fp32 = [_train(tiny_model_dir, tokenizer, tmp_path, seed=s, precision="fp32", cap=3.0) for s in (1, 2, 3, 4)]
    bf16 = _train(tiny_model_dir, tokenizer, tmp_path, seed=0, precision="bf16", cap=3.0)
    for key in ("grad_norm", "reward", "entropy"):
        ref = [sum(h[key] for h in run) / len(run) for run in fp32]
        lo, hi = min(ref), max(ref)
        got = sum(h[key] for h in bf16) / len(bf16)
        assert lo - (hi - lo) / 2 <= got <= hi + (hi - lo) / 2, (key, got, ref)
    for h in fp32:  # fp32 copy = the policy: weights 1 up to float rounding
        assert h[0]["rollout_is/mean_abs_gap"] < 1e-4
    gaps = [h["rollout_is/mean_abs_gap"] for h in bf16]
    weights = [h["rollout_is/mean_weight"] for h in bf16]
    assert all(0 < g < 0.5 for g in gaps)  # bf16 really is off-policy, but only slightly
    assert all(0.7 < w < 1.3 for w in weights)
    assert all(0 <= h["rollout_is/clipped_share"] < 0.2 for h in bf16)


def test_shared_prefix_same_step_and_no_padding_gap(tiny_model_dir, tokenizer, tmp_path, monkeypatch):
    """The loss forward with each group's prompt run once: the same first step as TRL's forward of every row
    (same seed, same samples: gradient norm and entropy), taken on every log-prob forward; and with prompts of
    different token lengths (groups of different prefix lengths) an fp32 rollout copy stays on-policy."""
    from rlcw.rl.grpo import shared_prefix as sp

    lengths = {
        len(tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)["input_ids"])
        for t in EQUAL
    }
    assert len(lengths) == 1, lengths
    calls = []
    original = sp.shared_prefix_logps

    def spy(*a, **k):
        out = original(*a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(sp, "shared_prefix_logps", spy)
    trl_rows = _train(tiny_model_dir, tokenizer, tmp_path, seed=0, precision="fp32", cap=3.0)
    assert calls == []
    shared = _train(tiny_model_dir, tokenizer, tmp_path, seed=0, precision="fp32", cap=3.0, shared_prefix=True)
    assert calls and all(calls)  # every forward of the loss and of the start model (KL) took the shared path
    assert shared[0]["grad_norm"] == pytest.approx(trl_rows[0]["grad_norm"], rel=1e-4)
    assert shared[0]["entropy"] == pytest.approx(trl_rows[0]["entropy"], rel=1e-5)
    unequal = ("Write about rain.", "Write a long story about the first snow of a cold winter in the mountains.")
    exact = _train(
        tiny_model_dir, tokenizer, tmp_path, seed=0, precision="fp32", cap=3.0, texts=unequal, shared_prefix=True
    )
    assert all(h["rollout_is/mean_abs_gap"] < 1e-4 for h in exact)  # the fp32 copy is the policy: on-policy
