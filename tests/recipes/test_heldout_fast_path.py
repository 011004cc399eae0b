"""The held-out measurement on the fast path (bf16 copies, inverse-CDF draw) on the tiny Llama: common random
numbers hold (the same policy sampled twice gives the same stories), and a bad sampler setting fails early.

OMP_NUM_THREADS=1 python -m pytest -q tests/recipes/test_heldout_fast_path.py
"""

from __future__ import annotations

import pytest

from rlcw.errors import RlcwError
from rlcw.measure.heldout import HeldoutSettings, check_sampler, policy_samples

ROWS = [
    {"id": "a", "prompt": "A lighthouse keeper finds a letter.", "min_words": 5, "max_words": 40},
    {"id": "b", "prompt": "Two rivals share a train seat.", "min_words": 5, "max_words": 40},
]


@pytest.mark.parametrize(("precision", "draw"), [("bf16", "inverse_cdf"), ("fp32", "multinomial")])
def test_crn_samples_repeat_exactly(tiny_model_dir, tokenizer, precision, draw):
    s = HeldoutSettings(n_samples=2, max_new_tokens=6, seed=7, precision=precision, draw=draw)
    first, _ = policy_samples(str(tiny_model_dir), tokenizer, ROWS, s)
    again, _ = policy_samples(str(tiny_model_dir), tokenizer, ROWS, s)
    assert [r["id"] for r in first] == ["a#0", "b#0", "a#1", "b#1"]
    assert [r["story"] for r in first] == [r["story"] for r in again]
    assert all(0 < r["tokens"] <= 6 for r in first)


def test_bad_sampler_settings_name_the_key():
    with pytest.raises(RlcwError, match="heldout.precision"):
        check_sampler(HeldoutSettings(precision="int4"))
    with pytest.raises(RlcwError, match="heldout.draw"):
        check_sampler(HeldoutSettings(draw="gumbel"))


def test_quickstart_rejects_a_bad_draw_before_any_stage(tmp_path):
    from rlcw.config import load_config
    from rlcw.recipes.quickstart import QuickstartConfig, main

    cfg = load_config(
        QuickstartConfig, "configs/quickstart/cpu.yaml", [f"output_dir={tmp_path}", "heldout.draw=gumbel"]
    )
    with pytest.raises(RlcwError, match="heldout.draw"):
        main(cfg)
    assert not any(tmp_path.iterdir())


def test_inverse_cdf_sample_indices_in_one_batch_give_each_index_own_samples(tiny_model_dir, tokenizer, monkeypatch):
    """With the inverse-CDF draw the sample indices share one decode batch (crn_completions); each row reads
    the uniforms its index's seed gives, so the stories are those of one batch per index: a tuned policy's
    sample (prompt, k) reads the same noise as the start's whatever the batch holds."""
    import rlcw.measure.heldout as heldout
    from rlcw.models import load_causal_lm

    model = load_causal_lm(str(tiny_model_dir))
    widths: list[int] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].size(0)), with_kwargs=True)

    def stories(rows_per_batch: int) -> tuple[list[list[int]], int]:
        monkeypatch.setattr(heldout, "CRN_BATCH_ROWS", rows_per_batch)
        widths.clear()
        got = heldout.crn_completions(
            model, tokenizer, ROWS, system_prompt=None, n_samples=3, max_new_tokens=8, seed=11, draw="inverse_cdf"
        )
        return [c for _, _, comps, _ in got for c in comps], max(widths)

    (together, wide), (apart, narrow) = stories(128), stories(1)
    hook.remove()
    assert (wide, narrow) == (6, 2)  # 2 prompts x 3 indices in one batch, against 2 rows a batch
    assert together == apart
    assert len(set(map(tuple, together))) > 1


def test_uniforms_need_the_inverse_cdf_draw_and_one_per_row_and_step():
    import torch
    from transformers import GenerationConfig

    from rlcw.sampling import sample_with_logprobs

    cfg = GenerationConfig(do_sample=True, max_new_tokens=4)
    rows = [[1, 2], [3]]
    with pytest.raises(ValueError, match="inverse_cdf"):
        sample_with_logprobs(None, rows, cfg, eos_ids=[0], pad_id=0, uniforms=torch.rand(2, 4))
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        sample_with_logprobs(None, rows, cfg, eos_ids=[0], pad_id=0, draw="inverse_cdf", uniforms=torch.rand(2, 3))


def test_compacting_after_several_endings_gives_the_samples_of_compacting_at_each(tiny_model_dir, tokenizer):
    """`compact_after` (the held-out batch waits for a share of its rows to end before dropping them) moves when
    rows leave the batch, not what they draw: the same tokens, the same log-probs to float rounding."""
    import torch
    from transformers import GenerationConfig

    from rlcw.generation import prompt_token_ids
    from rlcw.models import load_causal_lm
    from rlcw.sampling import sample_with_logprobs

    model = load_causal_lm(str(tiny_model_dir)).eval()
    rows = [{"prompt": f"Story {i}: a fox and {'a key ' * i}."} for i in range(8)]
    ids = prompt_token_ids(tokenizer, rows, None)
    eos = list(range(0, len(tokenizer), 25))  # a random model seldom draws EOS: many tokens end a row here
    cfg = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=24)
    u = torch.rand((8, 24), generator=torch.Generator().manual_seed(3))
    batch_rows: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: batch_rows.append(kw["input_ids"].size(0)), with_kwargs=True
    )

    def sample(after: int):
        batch_rows.clear()
        got = sample_with_logprobs(
            model, ids, cfg, eos_ids=eos, pad_id=tokenizer.pad_token_id, draw="inverse_cdf", uniforms=u,
            compact_after=after,
        )  # fmt: skip
        return got, sorted(set(batch_rows[1:]), reverse=True)

    (each, logp_each), sizes_each = sample(1)
    (later, logp_later), sizes_later = sample(4)
    hook.remove()
    lengths = sorted(map(len, each))
    assert len(set(lengths)) > 3 and lengths[0] < 24  # rows end at different steps
    assert later == each
    for a, b in zip(logp_later, logp_each, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert len(sizes_later) < len(sizes_each)  # fewer compactions
    assert all(x - y >= 4 for x, y in zip(sizes_later, sizes_later[1:], strict=False))


def test_auto_precision_is_a_held_out_sampler_resolved_for_this_machine(monkeypatch):
    import rlcw.measure.heldout as heldout

    check_sampler(HeldoutSettings(precision="auto"))
    for resolved in ("fp32", "bf16"):
        monkeypatch.setattr(heldout, "resolve_cpu_precision", lambda p, r=resolved: (r, "auto: test"))
        assert heldout.resolved(HeldoutSettings(precision="auto")).precision == resolved
    assert heldout.resolved(HeldoutSettings(precision="fp32")).precision == "fp32"
