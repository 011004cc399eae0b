"""Outcome measurement on the tiny model: sampled ids kept with EOS, chunked CRN, KL 0 against itself."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from rlcw.models import load_causal_lm, load_tokenizer

    return load_causal_lm(str(tiny_model_dir)), load_tokenizer(str(tiny_model_dir), padding_side="left")


ROWS = [
    {"id": f"p{i}", "prompt": f"Write a story about the number {i}.", "min_words": 5, "max_words": 9} for i in range(3)
]


@pytest.mark.parametrize("draw", ["multinomial", "inverse_cdf"])  # measure.draw
def test_samples_keep_their_ids_and_chunks_read_the_same_noise(tiny, draw):
    from rlcw.outcome.measure import sample_stories

    model, tok = tiny
    kw = {"n_samples": 2, "max_new_tokens": 10, "seed": 7, "system_prompt": None, "draw": draw}
    full = sample_stories(model, tok, ROWS, batch_size=2, **kw)
    assert [r["id"] for r in full] == ["p0#0", "p1#0", "p2#0", "p0#1", "p1#1", "p2#1"]
    for r in full:
        ids = r["completion_ids"]
        assert 1 <= len(ids) <= 10 and r["finished"] == (ids[-1] == tok.eos_token_id)
        assert tok.eos_token_id not in ids[:-1]  # cut after the first EOS, which is kept
    # the first chunk alone draws the same stories: each chunk has its own seed
    head = sample_stories(model, tok, ROWS[:2], batch_size=2, **kw)
    assert [r["completion_ids"] for r in head] == [r["completion_ids"] for r in full if r["prompt_id"] != "p2"]
    # the same call again: the same samples (CRN across checkpoints rests on this)
    assert [r["completion_ids"] for r in sample_stories(model, tok, ROWS, batch_size=2, **kw)] == [
        r["completion_ids"] for r in full
    ]


@pytest.mark.parametrize("draw", ["multinomial", "inverse_cdf"])
def test_sampler_logprobs_equal_a_forward_so_kl_to_itself_is_zero(tiny, draw):
    import torch

    from rlcw.measure.kl import sampled_logprobs
    from rlcw.outcome.measure import add_kl, add_scores, sample_stories

    model, tok = tiny
    recs = sample_stories(
        model, tok, ROWS, n_samples=2, max_new_tokens=6, seed=1, system_prompt=None, keep_logps=True, draw=draw
    )
    logp, mask = sampled_logprobs(
        model, [r["prompt_ids"] for r in recs], [r["completion_ids"] for r in recs], pad_id=0
    )
    for i, r in enumerate(recs):  # the draw's own log-prob is the full-distribution log-prob of that id
        n = len(r["completion_ids"])
        assert mask[i].sum() == n and torch.allclose(logp[i, :n], torch.tensor(r["completion_logps"]), atol=1e-4)
    add_kl(recs, model, pad_id=tok.pad_token_id, batch_size=2)  # policy = the sampler's log-probs
    assert all(abs(r["kl_k3"]) < 1e-4 and abs(r["kl_k1"]) < 1e-4 for r in recs)
    add_kl(recs, model, pad_id=tok.pad_token_id, batch_size=2, policy=model)  # policy by a forward
    assert all(r["kl_k3"] == pytest.approx(0.0, abs=1e-6) and r["kl_k1"] == pytest.approx(0.0, abs=1e-6) for r in recs)

    class Chars:
        def score(self, prompts, stories):
            return [float(len(s)) for s in stories]

    add_scores(recs, {"chars": Chars()})
    assert all(r["scores"]["chars"] == len(r["story"]) and r["words"] >= 0 and 0 <= r["rep"] <= 1 for r in recs)


def test_gold_from_any_sequence_classification_folder(tmp_path, tokenizer):
    import torch
    from transformers import LlamaForSequenceClassification

    from rlcw.errors import RlcwError
    from rlcw.models import tiny_llama_config
    from rlcw.outcome.measure import load_gold_scorer

    torch.manual_seed(0)
    cfg = tiny_llama_config(
        len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForSequenceClassification(cfg).save_pretrained(tmp_path / "rm")  # no rlcw_rm.json: not an rlcw RM
    tokenizer.save_pretrained(tmp_path / "rm")
    gold = load_gold_scorer(str(tmp_path / "rm"))
    scores = gold.score(["Write a story.", "Write a story."], ["A short one.", "Another, longer story here."])
    assert len(scores) == 2 and scores[0] != scores[1]
    with pytest.raises(RlcwError, match="gold.rm_path"):
        load_gold_scorer(str(tmp_path / "missing"))
