"""grpo on a tiny policy with the tiny RM: adapter, samples, periodic evaluation."""

import json
from pathlib import Path

import torch

from rlcw.data.records import read_stories
from rlcw.models import load_causal_lm


def test_grpo_saves_a_loadable_adapter_that_changed(grpo_run, tiny_model_dir):
    final = Path(grpo_run["artifacts"]["policy"])
    assert (final / "adapter_config.json").is_file() and (final / "rlcw_model.json").is_file()
    tuned = load_causal_lm(str(final), merge_lora=True)
    base = load_causal_lm(str(tiny_model_dir))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert not torch.allclose(tuned(input_ids=ids).logits, base(input_ids=ids).logits)


def test_grpo_periodic_eval_and_samples(grpo_run):
    samples = Path(grpo_run["artifacts"]["samples"])
    baseline = read_stories(samples / "baseline.jsonl")
    assert len(baseline) == 2 and all(s["system"] == "baseline" for s in baseline)
    for step in (0, 1, 2):
        stories = read_stories(samples / f"step_{step:06d}.jsonl")
        assert [s["id"] for s in stories] == [b["id"] for b in baseline] and stories[0]["step"] == step
    rows = [json.loads(x) for x in (samples.parent / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/rm/score" in r]
    assert [r["step"] for r in evals] == [0, 1, 2]
    assert {"eval/length/mean_words", "eval/repetition/distinct_3", "eval/rm/win_rate_vs_baseline"} <= set(evals[-1])
    train = [r for r in rows if "reward" in r]
    assert len(train) == 2 and any(k.startswith("rewards/length_range") for k in train[0])
    assert grpo_run["metrics"]["train/steps"] == 2
