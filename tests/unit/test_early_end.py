"""Short endings: rlcw.sampling.WordCounts keeps word counts token by token equal to count_words of the joined text;
the ending terms of the GRPO loss, hand-worked; the recipe refuses train.early_end_unlikelihood where it cannot read
the end's log-probability."""

from __future__ import annotations

import random

import torch

from rlcw.metrics.text import count_words
from rlcw.sampling import WordCounts

TEXTS = [" Once", " upon", "\n", "The", "end.", "  ", "a b", " ", "", "x", "\n\n", " y ", "ing", "\tz"]


def running(counts: WordCounts, ids: list[int]) -> int:
    words, after_space = counts.start(1)
    for t in ids:
        words, after_space = counts.step(torch.tensor([t]), words, after_space)
    return int(words[0])


def test_hand_worked():
    counts = WordCounts(TEXTS)
    assert running(counts, [0, 1]) == 2  # " Once upon"
    assert running(counts, [3, 12]) == 1  # "The" + "ing": one word
    assert running(counts, [3, 2, 3]) == 2  # "The\nThe": a word after a newline starts without a space
    assert running(counts, [3, 8, 12]) == 1  # an empty text (a special token) joins nothing
    assert running(counts, [6, 11]) == 3  # "a b y ": a text may start words inside it
    assert running(counts, []) == 0


def test_before_counts_the_words_ahead_of_each_position():
    counts = WordCounts(TEXTS)
    ids = torch.tensor([[0, 1, 2, 3, 4], [3, 12, 8, 0, 1]])
    words = counts.before(ids)
    assert words.tolist() == [[0, 1, 2, 2, 3], [0, 1, 1, 1, 2]]
    # the trainer's held positions: fewer words ahead than the row's bound
    assert (words < torch.tensor([[2], [0]])).tolist() == [[True, True, False, False, False], [False] * 5]
    assert (words < torch.tensor([[3], [2]])).tolist()[1] == [True, True, True, True, False]


def test_the_ending_terms_hand_worked():
    """Held positions add -log(1 - p); in-range positions add KL(Bernoulli(r) || Bernoulli(p)), 0 where p = r; the
    sum is per completion token, and the metrics say the mean p of each kind of position."""
    import math
    from collections import defaultdict
    from types import SimpleNamespace

    import pytest

    from rlcw.rl.grpo.trainer import RlcwGRPOTrainer

    p = torch.tensor([[0.1, 0.2, 0.05, 0.5]])
    inputs = {
        "end_held": torch.tensor([[True, True, False, False]]),
        "end_in_range": torch.tensor([[False, False, True, True]]),
        "completion_mask": torch.tensor([[1, 1, 1, 1]]),
    }
    fake = SimpleNamespace(end_rate_in_range=0.05, model=SimpleNamespace(training=True))
    fake._metrics = {"train": defaultdict(list)}
    term = RlcwGRPOTrainer._early_end_term(fake, p.log(), inputs)
    held = -math.log(0.9) - math.log(0.8)
    kl_half = 0.05 * math.log(0.05 / 0.5) + 0.95 * math.log(0.95 / 0.5)  # position 3; position 2 sits at the rate: 0
    assert float(term) == pytest.approx((held + kl_half) / 4, rel=1e-5)
    m = fake._metrics["train"]
    assert m["early_end/p_end_held"] == [pytest.approx(0.15)]
    assert m["early_end/p_end_in_range"] == [pytest.approx(0.275)]
    inputs.pop("end_in_range")  # the rate off: the held positions alone
    assert float(RlcwGRPOTrainer._early_end_term(fake, p.log(), inputs)) == pytest.approx(held / 4, rel=1e-5)


def test_random_sequences_match_count_words():
    counts, rng = WordCounts(TEXTS, size=len(TEXTS) + 2), random.Random(0)  # ids past the texts: empty
    for _ in range(500):
        ids = [rng.randrange(len(TEXTS) + 2) for _ in range(rng.randrange(12))]
        assert running(counts, ids) == count_words("".join(TEXTS[t] if t < len(TEXTS) else "" for t in ids))


def test_grpo_refuses_early_end_unlikelihood_without_rlcws_head_in_one_process():
    """train.early_end_unlikelihood reads pi(end) from rlcw's LM head: TRL's head, DeepSpeed and Agents' Room
    rollouts are refused before anything loads; a negative weight is refused by the config; the rollout's mask is
    refused without the term."""
    import pytest

    from rlcw.config import load_config
    from rlcw.errors import RlcwError
    from rlcw.recipes.grpo import GRPORecipeConfig, validate

    on = "train.early_end_unlikelihood=1.0"
    validate(load_config(GRPORecipeConfig, None, [on, "rollout.kind=fast", "rollout.block_short_endings=true"]))
    for more in ("train.lm_head=trl", "train.deepspeed=configs/deepspeed/zero2.json", "agents.variant=write"):
        with pytest.raises(RlcwError) as err:
            validate(load_config(GRPORecipeConfig, None, [on, more]))
        assert err.value.where == "train.early_end_unlikelihood"
    with pytest.raises(RlcwError, match="early_end_unlikelihood"):
        load_config(GRPORecipeConfig, None, ["train.early_end_unlikelihood=-1"])
    with pytest.raises(RlcwError, match="grow unchecked") as err:  # the mask alone: the policy learned to end at once
        validate(load_config(GRPORecipeConfig, None, ["rollout.kind=fast", "rollout.block_short_endings=true"]))
    assert err.value.where == "rollout.block_short_endings"
    for bad in (["train.end_rate_in_range=0.05"], [on, "train.end_rate_in_range=1.0"]):  # no weight; not a rate
        with pytest.raises(RlcwError) as err:
            validate(load_config(GRPORecipeConfig, None, bad))
        assert err.value.where == "train.end_rate_in_range"
    validate(load_config(GRPORecipeConfig, None, [on, "train.end_rate_in_range=0.05"]))
