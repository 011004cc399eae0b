"""rlcw.rl.grpo.rollout on the tiny Llama: the fast sampler matches `generate`, the merged copy matches the LoRA policy.

OMP_NUM_THREADS=1 python -m pytest -q tests/recipes/test_fast_rollout.py
"""

from __future__ import annotations

import pytest
import torch

from rlcw.rl.grpo.rollout import MergedPolicy
from rlcw.sampling import left_pad, sample


@pytest.fixture()
def policy(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], task_type="CAUSAL_LM")
    )


def fake_trainer(policy, tokenizer, ids, max_new_tokens: int, eos: list[int], **more):
    """What the rollout function reads of a GRPOTrainer: its prompts' ids, the policy, a sampling config, the EOS
    ids, and `more` attributes."""
    from types import SimpleNamespace

    from transformers import GenerationConfig

    return SimpleNamespace(
        _tokenize_prompts=lambda prompts: (ids, None, None),
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        model=policy,
        generation_config=GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=True, top_k=0, pad_token_id=tokenizer.pad_token_id
        ),
        eos_token_ids=eos,
        **more,
    )


def test_left_pad_hand_worked():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_greedy_matches_generate(policy, tokenizer):
    """Repeated and different-length prompts: the same completions as TRL's path (generate on the PEFT model)."""
    from transformers import GenerationConfig

    texts = ["Once upon a time", "Once upon a time", "A dragon who could not sleep", "A dragon who could not sleep"]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    cfg = GenerationConfig(
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id],
        disable_compile=True,
    )
    ids, mask = left_pad(rows, tokenizer.pad_token_id)
    policy.eval()
    with torch.no_grad():
        out = policy.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.size(1) :].tolist()
    eos = tokenizer.eos_token_id
    expected = [r[: next((i + 1 for i, t in enumerate(r) if t == eos), len(r))] for r in out]
    got = sample(MergedPolicy(policy).refresh(), rows, cfg, eos_ids=[eos], pad_id=tokenizer.pad_token_id)
    assert got == expected
    assert all(len(c) == 12 or c[-1] == eos for c in got)


def test_merged_copy_tracks_adapter_and_leaves_base_exact(policy):
    merged = MergedPolicy(policy)
    base_before = {k: v.clone() for k, v in policy.get_base_model().state_dict().items() if "lora_" not in k}
    with torch.no_grad():  # a trained adapter: B != 0
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids = torch.tensor([[5, 9, 11, 3, 7]])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        got = merged.refresh()(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with policy.disable_adapter(), torch.no_grad():
        plain = policy(input_ids=ids).logits
    assert (
        plain - want
    ).abs().max() > 1e-3  # the adapter really changes the policy, so the match above means something
    after = {k: v for k, v in policy.get_base_model().state_dict().items() if "lora_" not in k}
    assert all(torch.equal(base_before[k], after[k]) for k in base_before)


def test_bf16_copy_tracks_adapter_policy_stays_fp32(policy):
    """The bf16 rollout copy: bf16 weights (tied embedding/head stay one tensor), refreshed from the live
    adapter, logits within bf16 rounding of the fp32 policy; the policy's own weights untouched and fp32."""
    merged = MergedPolicy(policy, "bf16")
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    with torch.no_grad():  # a trained adapter after the copy was made: refresh must pick it up
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids = torch.tensor([[5, 9, 11, 3, 7]])
    model = merged.refresh()
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        got = model(input_ids=ids).logits.float()
        with policy.disable_adapter():
            plain = policy(input_ids=ids).logits
    gap, effect = (got - want).abs().max(), (plain - want).abs().max()
    assert gap < 0.1 * effect  # bf16 rounding is small next to what the adapter changes
    changed = [k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed and all("lora_B" in k for k in changed)  # only our own edit; the copy never writes back


def test_rollout_precision_needs_fast_rollout(runs_root, tiny_model_dir):
    from rlcw.config import load_config
    from rlcw.errors import RlcwError
    from rlcw.recipes.grpo import GRPORecipeConfig, rollout_seam

    for overrides, msg in (
        (["rollout.precision=bf16"], "applies to the fast rollout only"),
        (["rollout.kind=fast", "rollout.precision=int4"], "unknown rollout.precision"),
        (["rollout.draw=inverse_cdf"], "rollout.draw applies to the fast rollout only"),
        (["rollout.kind=fast", "rollout.draw=gumbel"], "unknown rollout.draw"),
        (["rollout.block_short_endings=true"], "rollout.block_short_endings applies to the fast rollout only"),
    ):
        with pytest.raises(RlcwError, match=msg):
            rollout_seam(load_config(GRPORecipeConfig, None, [f"model.name={tiny_model_dir}", *overrides]))
    rollout_seam(load_config(GRPORecipeConfig, None, ["rollout.kind=fast", "rollout.precision=bf16"]))


def test_rollout_func_in_grpo_trainer(tiny_model_dir, tokenizer, tmp_path):
    """Through TRL 1.16 GRPOTrainer: greedy rollouts equal TRL's own path; a sampled training step completes."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from rlcw.rl.grpo.rollout import make_fast_rollout_func

    prompts = [[{"role": "user", "content": t}] for t in ("Write about rain.", "A fox finds a key in the snow.")]
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=10,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        bf16=False,
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    rollout = make_fast_rollout_func()
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
        reward_funcs=lambda completions, **kw: [float(len(c[0]["content"])) for c in completions],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts] * 2),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        rollout_func=rollout,
    )
    repeated = [p for p in prompts for _ in range(2)]
    trainer.generation_config.do_sample = False
    trainer.generation_kwargs["do_sample"] = False
    prompt_ids, _, _ = trainer._tokenize_prompts(repeated)
    trl_ids, _ = trainer._generate_single_turn(prompt_ids, None, {}, 2)
    fast = rollout(repeated, trainer)
    assert fast["prompt_ids"] == prompt_ids
    assert max(map(len, trl_ids)) > 1  # real completions, not an immediate EOS everywhere
    assert fast["completion_ids"] == trl_ids
    trainer.generation_config.do_sample = True
    trainer.generation_kwargs["do_sample"] = True
    trainer.train()
    assert trainer.state.global_step == 1


def test_grpo_stage_with_fast_rollout(runs_root, rm_run, tiny_model_dir):
    """`rlcw grpo rollout.kind=fast rollout.precision=bf16 rollout.draw=inverse_cdf` trains end to
    end with the quickstart's KL to the start in the loss and a LoRA on every layer; clashing settings fail before
    any work."""
    import json
    from pathlib import Path

    from rlcw.config import load_config
    from rlcw.errors import RlcwError
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    base = [
        f"output_dir={runs_root}",
        f"model.name={tiny_model_dir}",
        f"reward.rm_path={rm_run['artifacts']['model']}",
        "train.max_steps=2",
        "train.batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=8",
        "lora.r=4",
        "lora.top_layers=null",
        "train.beta=0.2",
        "train.learning_rate=1e-2",  # far enough in one step for the KL to show
        "data.max_train_prompts=8",
        "eval.every_steps=0",
        "rollout.kind=fast",
        "rollout.precision=bf16",
        "rollout.draw=inverse_cdf",
    ]
    summary = main(load_config(GRPORecipeConfig, None, [*base, "run_name=grpo_fast"]))
    assert summary["status"] == "completed", summary.get("error")
    rows = [
        json.loads(x)
        for x in (Path(summary["artifacts"]["metrics"]).parent / "metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in rows if "reward" in r]
    assert [r["step"] for r in train] == [1, 2]
    # the loss's KL to the start (TRL's `kl`, beta > 0): 0 before the first update (the LoRA B matrices are zero), then
    # positive and equal to the monitor's own k3 against the start model, so TRL's reference is the start model
    assert train[0]["kl"] == pytest.approx(0.0, abs=1e-6) and train[1]["kl"] > 1e-6
    assert train[1]["kl"] == pytest.approx(train[1]["monitor/kl_to_start"], rel=1e-3)
    with pytest.raises(RlcwError, match="rollout.kind=fast cannot be combined with agents.variant"):
        main(load_config(GRPORecipeConfig, None, [*base, "run_name=grpo_fast_bad", "agents.variant=write"]))


class _FactoryWatch(torch.overrides.TorchFunctionMode):
    """Records tensor factory calls made without an explicit device (they would land on the CPU on a GPU host)."""

    FACTORIES = {torch.tensor, torch.zeros, torch.ones, torch.full, torch.empty, torch.arange, torch.as_tensor}

    def __init__(self):
        super().__init__()
        self.deviceless = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FACTORIES and kwargs.get("device") is None:
            self.deviceless.append(func.__name__)
        return func(*args, **kwargs)


def test_sampler_creates_every_tensor_on_the_model_device(policy, tokenizer):
    """A GPU host would fail on any CPU-built tensor mixed with model outputs: every factory call names the device."""
    from transformers import GenerationConfig

    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("Once upon a time", "A dragon", "A dragon")]
    cfg = GenerationConfig(max_new_tokens=4, do_sample=True, top_k=0, pad_token_id=tokenizer.pad_token_id)
    model = MergedPolicy(policy).refresh()
    with _FactoryWatch() as watch:
        sample(model, rows, cfg, eos_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id)
    assert watch.deviceless == []


def test_sampler_logprobs_are_the_sampling_distribution(policy, tokenizer):
    """Each returned log-prob is log softmax(logits / temperature) of the drawn token under the same weights."""
    from transformers import GenerationConfig

    from rlcw.sampling import sample_with_logprobs

    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("Once upon a time", "A dragon who")]
    cfg = GenerationConfig(
        max_new_tokens=6, do_sample=True, temperature=0.7, top_k=0, pad_token_id=tokenizer.pad_token_id
    )
    policy.eval()
    torch.manual_seed(0)
    comps, logps = sample_with_logprobs(
        MergedPolicy(policy).refresh(), rows, cfg, eos_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id
    )
    for prompt, comp, lp in zip(rows, comps, logps, strict=True):
        assert len(lp) == len(comp) > 0
        ids = torch.tensor([prompt + comp])
        with torch.no_grad():
            logits = policy(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7  # (C, V)
        want = torch.log_softmax(logits, -1).gather(1, torch.tensor(comp)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(lp), want, atol=1e-4, rtol=1e-4)


def test_copy_runs_its_own_weights_after_trl_patches_the_forward(policy):
    """GRPOTrainer patches the policy's forward with a closure over the original model (add_fused_lm_head);
    the rollout copy must still run its own (bf16, merged) weights, not the fp32 policy."""
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(policy.get_base_model(), temperature=1.0, cast_lm_head_to_fp32=False, outputs=("log_probs",))
    model = MergedPolicy(policy, "bf16").refresh()
    ids = torch.tensor([[5, 9, 11, 3, 7]])
    with torch.no_grad():
        got = model(input_ids=ids).logits
        want = policy(input_ids=ids).logits
    assert got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() > 0  # bf16 rounding: a different computation from the fp32 policy


def test_static_cache_samples_what_the_dynamic_cache_samples(policy, tokenizer):
    """Same seed, same draws: the in-place KV cache changes where keys and values live, not the samples."""
    from transformers import GenerationConfig

    from rlcw.sampling import sample_with_logprobs

    texts = ["Once upon a time", "A dragon who could not sleep", "A dragon who could not sleep"]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    cfg = GenerationConfig(max_new_tokens=10, do_sample=True, top_k=0, pad_token_id=tokenizer.pad_token_id)
    model = MergedPolicy(policy).refresh()
    got = {}
    for cache in ("static", "dynamic"):
        torch.manual_seed(3)
        got[cache] = sample_with_logprobs(
            model, rows, cfg, eos_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id, cache=cache
        )
    assert got["static"][0] == got["dynamic"][0]
    assert max(map(len, got["static"][0])) > 1
    for a, b in zip(got["static"][1], got["dynamic"][1], strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="static"):
        sample_with_logprobs(model, rows, cfg, eos_ids=[0], pad_id=0, cache="paged")


def test_inverse_cdf_draw_hand_worked_and_its_distribution():
    """u scaled by the row's total picks the first token whose cumulative probability passes it; zero-probability
    tokens are never drawn; frequencies over many draws match the probabilities (as torch.multinomial's)."""
    from rlcw.sampling import inverse_cdf_draw

    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5], [0.2, 0.3, 0.5, 0.0]])
    torch.manual_seed(0)
    u = torch.rand((2, 1))  # what the draw reads after the same seed
    torch.manual_seed(0)
    got = inverse_cdf_draw(probs).tolist()
    want = [1 if u[0, 0] < 0.5 else 3, 0 if u[1, 0] < 0.2 else 1 if u[1, 0] < 0.5 else 2]
    assert got == want
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(1, 50), -1)
    draws = torch.cat([inverse_cdf_draw(p.expand(4000, -1)) for _ in range(5)])  # 20000 draws
    freq = torch.bincount(draws, minlength=50).float() / draws.numel()
    assert (freq - p[0]).abs().max() < 0.02
    assert freq[p[0] < 1e-12].sum() == 0


def test_compacting_ended_rows_keeps_the_inverse_cdf_samples(policy, tokenizer):
    """Rows that ended leave the decode batch (later steps run fewer rows), and with the inverse-CDF draw, which
    takes a uniform for every batch row, the samples and log-probs are those of the uncompacted batch."""
    from transformers import GenerationConfig

    from rlcw.sampling import sample_with_logprobs

    texts = ["Once upon a time", "A dragon who could not sleep", "A dragon who could not sleep", "The sea"]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts] * 2
    cfg = GenerationConfig(max_new_tokens=12, do_sample=True, top_k=0, pad_token_id=tokenizer.pad_token_id)
    eos = list(range(0, len(tokenizer), 4))  # a quarter of the vocabulary ends a row: rows end at different steps
    model = MergedPolicy(policy).refresh()
    got, widths = {}, {}
    for compact in (False, True):
        seen: list[int] = []

        def width(module, args, kwargs, seen=seen):
            seen.append(kwargs["input_ids"].size(0))

        hook = model.register_forward_pre_hook(width, with_kwargs=True)
        torch.manual_seed(5)
        got[compact] = sample_with_logprobs(
            model, rows, cfg, eos_ids=eos, pad_id=tokenizer.pad_token_id, draw="inverse_cdf", compact=compact
        )
        hook.remove()
        widths[compact] = seen[1:]  # decode steps (the first call is the prefill of the distinct prompts)
    lengths = sorted(map(len, got[True][0]))
    assert lengths[0] < lengths[-1]  # rows did end at different steps
    assert got[True][0] == got[False][0]
    for a, b in zip(got[True][1], got[False][1], strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=1e-5)
    assert set(widths[False]) == {len(rows)}
    assert widths[True][0] <= len(rows) and min(widths[True]) < len(rows)
    assert sum(widths[True]) < sum(widths[False])
    with pytest.raises(ValueError, match="dynamic cache"):
        sample_with_logprobs(model, rows, cfg, eos_ids=eos, pad_id=0, cache="static", compact=True)


@pytest.mark.parametrize(
    ("draw", "compact", "expected"),
    [("inverse_cdf", True, True), ("inverse_cdf", False, False), ("multinomial", True, False)],
)
def test_rollout_compact_key_reaches_the_sampler(policy, tokenizer, monkeypatch, draw, compact, expected):
    """make_fast_rollout_func's `compact` turns the sampler's compaction on only with the
    inverse-CDF draw, and off when false."""

    import rlcw.rl.grpo.rollout as rollout

    seen = []
    real = rollout.sample_with_logprobs

    def spy(*args, **kwargs):
        seen.append(kwargs.get("compact"))
        return real(*args, **kwargs)

    monkeypatch.setattr(rollout, "sample_with_logprobs", spy)
    ids = [tokenizer("Once upon a time", add_special_tokens=False)["input_ids"]] * 2
    trainer = fake_trainer(policy, tokenizer, ids, 3, [tokenizer.eos_token_id])
    out = rollout.make_fast_rollout_func("fp32", draw, compact)(["p", "p"], trainer)
    assert seen == [expected] and len(out["completion_ids"]) == 2


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_packed_copy_samples_as_the_plain_copy_and_tracks_the_adapter(policy, tokenizer, precision):
    """prepack=True (rlcw.prepack): the copy's linears run from packed weights, those made from the adapter's
    targets repacked on every refresh (the frozen ones packed once); the policy keeps its own modules; bf16 (the
    same products exactly): the plain copy's samples and log-probs."""
    from transformers import GenerationConfig

    from rlcw.prepack import FusedProjections, PackedLinear, can_prepack

    if not can_prepack(MergedPolicy(policy, precision).refresh()):
        pytest.skip("no oneDNN for this precision here")
    plain, packed = MergedPolicy(policy, precision), MergedPolicy(policy, precision, prepack=True)
    layers = [m for m in packed.model.modules() if isinstance(m, PackedLinear)]
    groups = [g for g in packed.packed if isinstance(g, FusedProjections)]
    assert layers and not any(type(m) is torch.nn.Linear for m in packed.model.modules())
    assert len(groups) == 2 * policy.config.num_hidden_layers  # q/k/v and gate/up hold the targets q, v and up
    repacked = {id(t) for p in packed.packed for t in p.sources()}
    frozen = [packed.model.lm_head, *(m for m in layers if m.fused is None)]  # o_proj, down_proj: no adapter
    assert all(id(m.weight) not in repacked for m in frozen)
    assert not any(isinstance(m, PackedLinear) for m in policy.modules())
    with torch.no_grad():  # a trained adapter after the copies were made: refresh must repack it
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids = torch.tensor([[5, 9, 11, 3, 7]])
    with torch.inference_mode():
        want, got = plain.refresh()(input_ids=ids).logits, packed.refresh()(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    if precision == "fp32":
        return  # fp32: another kernel, so float rounding may flip a sampled token
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["Once upon a time", "A dragon"]]
    cfg = GenerationConfig(
        max_new_tokens=10, do_sample=True, temperature=0.9, top_k=0, top_p=1.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=[tokenizer.eos_token_id], disable_compile=True,
    )  # fmt: skip
    from rlcw.sampling import sample_with_logprobs

    kw = {"eos_ids": [tokenizer.eos_token_id], "pad_id": tokenizer.pad_token_id, "draw": "inverse_cdf"}
    torch.manual_seed(3)
    a = sample_with_logprobs(plain.model, rows, cfg, **kw)
    torch.manual_seed(3)
    b = sample_with_logprobs(packed.model, rows, cfg, **kw)
    assert a == b


@pytest.mark.parametrize("draw", ["multinomial", "inverse_cdf"])
def test_rollout_section_reaches_the_sampler(monkeypatch, draw):
    """`rollout.precision` and `rollout.draw` go from the config through the rollout seam to the sampler, whose
    compaction and packed copy are on (no config keys)."""
    import inspect

    import rlcw.rl.grpo.seam as seam
    from rlcw.config import load_config
    from rlcw.recipes.grpo import GRPORecipeConfig, rollout_seam
    from rlcw.rl.grpo.rollout import make_fast_rollout_func

    seen = []
    monkeypatch.setattr(seam, "make_fast_rollout_func", lambda *a, **k: seen.append((a, k)) or (lambda *_: None))
    cfg = load_config(GRPORecipeConfig, None, ["rollout.kind=fast", "rollout.precision=bf16", f"rollout.draw={draw}"])
    rollout_seam(cfg).trainer_kwargs(None)
    assert seen == [(("bf16", draw), {"block_short_endings": False, "references": None})]
    rollout_seam(
        load_config(GRPORecipeConfig, None, ["rollout.kind=fast", "rollout.block_short_endings=true"])
    ).trainer_kwargs(None)
    assert seen[-1][1] == {"block_short_endings": True, "references": None}
    defaults = inspect.signature(make_fast_rollout_func).parameters
    assert defaults["compact"].default is True and defaults["prepack"].default is True


def test_growing_cache_samples_as_transformers_dynamic_cache(policy, tokenizer, monkeypatch):
    """The sampler's dynamic cache writes each step into buffers allocated once (rlcw.sampling._growing_cache):
    with repeated prompts (the prefill reordered to the rows) and ended rows leaving the batch, the samples and
    log-probs equal those of transformers' concatenating DynamicCache."""
    from transformers import DynamicCache, GenerationConfig

    import rlcw.sampling as sampling

    texts = ["Once upon a time", "Once upon a time", "A dragon who could not sleep", "A dragon who could not sleep"]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    cfg = GenerationConfig(
        max_new_tokens=24, do_sample=True, temperature=1.5, top_k=0, top_p=1.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=[tokenizer.eos_token_id], disable_compile=True,
    )  # fmt: skip
    model = MergedPolicy(policy).refresh()
    eos = [tokenizer.eos_token_id, *range(12000)]  # many stop tokens: rows end (and leave) at different steps
    made = []
    real = sampling._growing_cache
    monkeypatch.setattr(sampling, "_growing_cache", lambda *a: made.append(real(*a)) or made[-1])
    got = {}
    for name in ("growing", "transformers"):
        if name == "transformers":
            monkeypatch.setattr(sampling, "_growing_cache", lambda config, capacity: DynamicCache(config=config))
        torch.manual_seed(5)
        got[name] = sampling.sample_with_logprobs(
            model, rows, cfg, eos_ids=eos, pad_id=tokenizer.pad_token_id, draw="inverse_cdf", compact=True
        )
    assert made and all(type(layer).__name__ == "GrowingLayer" for layer in made[0].layers)
    assert len({len(c) for c in got["growing"][0]}) > 1  # rows did end at different steps
    assert got["growing"] == got["transformers"]


def test_packed_copy_of_a_fully_tuned_model_repacks_its_trained_weights(tiny_model_dir):
    """Full fine-tuning (no adapter), fp32: the packed copy shares the policy's weights and packs them again on
    every refresh, so it follows a training step; the policy keeps its own modules."""
    from transformers import AutoModelForCausalLM

    from rlcw.prepack import can_prepack

    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    if not can_prepack(policy):
        pytest.skip("no oneDNN here")
    merged = MergedPolicy(policy, "fp32", prepack=True)
    assert merged.model is not policy and type(policy.lm_head) is torch.nn.Linear
    with torch.no_grad():  # a training step after the copy was made
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids = torch.tensor([[5, 9, 11, 3, 7]])
    with torch.inference_mode():
        torch.testing.assert_close(
            merged.refresh()(input_ids=ids).logits, policy(input_ids=ids).logits, atol=1e-4, rtol=1e-4
        )


def test_no_row_ends_before_its_min_words(policy, tokenizer):
    """`min_words`: with a quarter of the vocabulary ending a row, a row bound to 4 words draws no EOS id before its
    completion holds 4 words (count_words of its text) and its log-probs are those of the distribution with the EOS
    ids masked out; an unbound row (0) ends as soon as it draws one, as without the bound. Through the rollout
    function, the bounds come from the trainer's `rollout_rows`."""

    from transformers import GenerationConfig

    from rlcw.metrics.text import count_words
    from rlcw.rl.grpo.rollout import make_fast_rollout_func
    from rlcw.sampling import WordCounts, sample_with_logprobs

    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("Once upon a time", "A dragon who")] * 4
    cfg = GenerationConfig(
        max_new_tokens=24, do_sample=True, temperature=0.7, top_k=0, pad_token_id=tokenizer.pad_token_id
    )
    eos = list(range(0, len(tokenizer), 4))
    model = MergedPolicy(policy).refresh()
    words = WordCounts.of(tokenizer, model.config.vocab_size)
    bounds = [4, 0] * 4
    torch.manual_seed(0)
    comps, logps = sample_with_logprobs(
        model, rows, cfg, eos_ids=eos, pad_id=tokenizer.pad_token_id, min_words=bounds, words=words
    )
    ended_early = 0
    for prompt, comp, lp, low in zip(rows, comps, logps, bounds, strict=True):
        for t, tok in enumerate(comp):
            if tok in eos:
                assert count_words(tokenizer.decode(comp[:t])) >= low
                ended_early += t < 3
        ids = torch.tensor([prompt + comp])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7  # (C, V)
        held = torch.tensor([count_words(tokenizer.decode(comp[:t])) < low for t in range(len(comp))])
        logits[held[:, None] & torch.isin(torch.arange(logits.size(-1)), torch.tensor(eos))] = float("-inf")
        want = torch.log_softmax(logits, -1).gather(1, torch.tensor(comp)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(lp), want, atol=1e-4, rtol=1e-4)
    assert ended_early  # the unbound rows did end within 3 tokens: the bound is what held the others
    assert all(any(t in eos for t in c) for c in comps[::2])  # the bound rows ended too, once past 4 words

    rows_of = [{"min_words": 6}, {"min_words": None}] * 4
    trainer = fake_trainer(policy, tokenizer, rows, 24, eos, processing_class=tokenizer, rollout_rows=rows_of)
    torch.manual_seed(1)
    out = make_fast_rollout_func("fp32", "inverse_cdf", block_short_endings=True)(["p"] * 8, trainer)
    for comp in out["completion_ids"][::2]:
        cut = next((t for t, tok in enumerate(comp) if tok in eos), None)
        assert cut is None or count_words(tokenizer.decode(comp[:cut])) >= 6


def _refs(tmp_path, tokenizer, stories: dict[str, str], cap: int = 12):
    from rlcw.data.records import write_stories
    from rlcw.rl.grpo.references import ReferenceInjection

    path = tmp_path / "refs.jsonl"
    recs = [
        {"id": f"r{i}", "prompt": p, "story": s, "system": "reference"} for i, (p, s) in enumerate(stories.items())
    ]
    write_stories(path, recs)
    return ReferenceInjection.load(str(path), tokenizer, tokenizer.eos_token_id, cap)


@pytest.mark.parametrize("penalty", [1.3, 1.0])
def test_teacher_forced_logprobs_are_the_samplers(policy, tokenizer, penalty):
    """Sampled completions, teacher-forced in one padded forward, get the log-probs the sampler returned for them:
    the same processed distribution (temperature, top-k; with a repetition penalty, position by position)."""
    from transformers import GenerationConfig

    from rlcw.rl.grpo.references import teacher_forced_logprobs
    from rlcw.sampling import sample_with_logprobs

    texts = ("Once upon a time", "A dragon who", "The night the lighthouse keeper")
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    cfg = GenerationConfig(
        max_new_tokens=8,
        do_sample=True,
        temperature=0.7,
        top_k=50,
        repetition_penalty=penalty,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = MergedPolicy(policy).refresh().eval()
    got = []
    for row in rows:  # one row a call: the sampler's history has no padding, as the teacher-forced one
        torch.manual_seed(0)
        comps, logps = sample_with_logprobs(
            model, [row], cfg, eos_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id
        )
        got.append((comps[0][: 8 - len(got)], logps[0][: 8 - len(got)]))  # completions of different lengths
    forced = teacher_forced_logprobs(model, rows, [c for c, _ in got], cfg, tokenizer.pad_token_id)
    for (_, lp), tf in zip(got, forced, strict=True):
        torch.testing.assert_close(torch.tensor(tf), torch.tensor(lp), atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        least = int(model(input_ids=torch.tensor([rows[0]])).logits[0, -1].argmin())
    out = teacher_forced_logprobs(model, rows[:2], [[least], got[1][0]], cfg, tokenizer.pad_token_id)
    assert out[0] == [float("-inf")]  # outside the top 50: mu = 0


def test_reference_rows_cap_and_groups(tmp_path, tokenizer):
    from rlcw.errors import RlcwError

    refs = _refs(tmp_path, tokenizer, {"Write about rain.": "It rained.", "A fox.": "The fox ran."})
    assert refs.ids["Write about rain."] == tokenizer("It rained.", add_special_tokens=False)["input_ids"] + [
        tokenizer.eos_token_id
    ]
    texts = ["Write about rain."] * 3 + ["No reference."] * 3 + ["A fox."] * 3
    assert refs.rows(texts, 3) == [2, 8]  # the last row of each group whose prompt has a reference
    assert refs.covered([[{"role": "user", "content": "A fox."}], "Other"]) == 1
    rows = [{"prompt": "Write about rain."}, {"prompt": "x", "messages": [{"role": "user", "content": "A fox."}]}]
    assert refs.check_coverage(rows) == 2 and refs.check_coverage(rows + [{"prompt": "Other"}]) == 2
    with pytest.raises(RlcwError, match="none of the 1 training prompts has a reference"):
        refs.check_coverage([{"prompt": "Other"}])
    with pytest.raises(RlcwError, match="different prompts"):
        refs.rows(["Write about rain.", "A fox."], 2)
    with pytest.raises(RlcwError, match="over the completion cap of 3"):
        _refs(tmp_path, tokenizer, {"Write about rain.": "It rained all day long."}, cap=3)
    with pytest.raises(RlcwError, match="reference file not found"):
        refs.load(str(tmp_path / "missing.jsonl"), tokenizer, tokenizer.eos_token_id, 12)


def test_rollout_puts_each_reference_in_its_groups_last_row(policy, tokenizer, tmp_path):
    """Through the rollout function: the last row of a group with a reference is the reference's ids (not sampled),
    its log-probs teacher-forced on the copy; the other rows are samples, and the trainer learns which rows."""
    from rlcw.rl.grpo.references import teacher_forced_logprobs
    from rlcw.rl.grpo.rollout import make_fast_rollout_func

    refs = _refs(tmp_path, tokenizer, {"Write about rain.": "It rained."})
    prompts = [[{"role": "user", "content": "Write about rain."}]] * 3 + [[{"role": "user", "content": "A fox."}]] * 3
    ids = [tokenizer("rain", add_special_tokens=False)["input_ids"]] * 3
    ids += [tokenizer("fox", add_special_tokens=False)["input_ids"]] * 3
    trainer = fake_trainer(policy, tokenizer, ids, 6, [tokenizer.eos_token_id], num_generations=3)
    torch.manual_seed(0)
    out = make_fast_rollout_func("fp32", references=refs)(prompts, trainer)
    assert trainer.injected_rows == [2]
    assert out["completion_ids"][2] == refs.ids["Write about rain."]
    model = MergedPolicy(policy).refresh().eval()
    cfg = trainer.generation_config
    want = teacher_forced_logprobs(model, [ids[2]], [refs.ids["Write about rain."]], cfg, tokenizer.pad_token_id)[0]
    torch.testing.assert_close(torch.tensor(out["logprobs"][2]), torch.tensor(want), atol=1e-5, rtol=1e-5)
    sampled = [c for i, c in enumerate(out["completion_ids"]) if i != 2]
    assert all(len(c) > 0 for c in sampled) and len(out["logprobs"]) == 6
    assert make_fast_rollout_func("fp32")(prompts, trainer) and trainer.injected_rows == []


def test_grpo_stage_with_reference_injection(tiny_grpo_overrides, tmp_path, short_references):
    """`rlcw grpo rollout.kind=fast rollout.references=FILE`: every group of a step holds its prompt's reference
    (`rollout/references` counts them), the sample log names it; the bundled references do not fit an 8-token cap,
    and the error says so; references without the fast rollout are refused before anything loads."""
    import json
    from pathlib import Path

    from rlcw.config import load_config
    from rlcw.data.records import write_stories
    from rlcw.errors import RlcwError
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    refs = short_references
    more = ("train.max_steps=2", "data.max_train_prompts=8", "eval.every_steps=0", "train.samples_k=4")

    def run(name: str, *extra: str) -> dict:
        return main(load_config(GRPORecipeConfig, None, tiny_grpo_overrides(name, *more, *extra)))

    summary = run("grpo_refs", "rollout.kind=fast", f"rollout.references={refs}")
    assert summary["status"] == "completed", summary.get("error")
    run_dir = Path(summary["artifacts"]["metrics"]).parent
    train = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/references"] for r in train if "reward" in r] == [2.0, 2.0]  # 4 rows = 2 groups a step
    logged = [
        json.loads(x)
        for f in sorted((run_dir / "samples").glob("train_step_*.jsonl"))
        for x in f.read_text().splitlines()
    ]
    assert any(r["system"] == "reference" and r["story"] == "The end." for r in logged)
    with pytest.raises(RlcwError, match="reference-001: the reference for .* over the completion cap of 8"):
        run("grpo_refs_long", "rollout.kind=fast", "rollout.references=bundled")
    with pytest.raises(RlcwError, match="rollout.references applies to the fast rollout only"):
        run("grpo_refs_trl", f"rollout.references={refs}")
    elsewhere = tmp_path / "elsewhere.jsonl"  # references for prompts this run never trains on
    write_stories(
        elsewhere, [{"id": "x", "prompt": "Another dataset's prompt.", "story": "The end.", "system": "reference"}]
    )
    with pytest.raises(RlcwError, match="none of the 8 training prompts has a reference"):
        run("grpo_refs_none", "rollout.kind=fast", f"rollout.references={elsewhere}")
    assert not (run_dir.parent / "grpo_refs_none").exists()  # refused before anything was written
