"""GenRM scoring logic with hand-checkable fakes: verdict probabilities, order averaging, groups, rewards."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch

from rlcw.errors import RlcwError
from rlcw.rewards.genrm import GenRMReward, GenRMScorer, group_comparisons, groups_of, win_rates
from rlcw.rm.render import GENRM_SYSTEM_PROMPT, RMSpec, verdict_token_ids

APPLE, FIG = "apple", "fig"  # single tokens in the SmolLM2 vocabulary


class FakeJudge(torch.nn.Module):
    """Logits that prefer story A with p=0.8 when 'apple' is shown before 'fig', else p=0.3.

    Only a position right after 'Preferred:' carries that verdict; every other position
    (padding included) carries the opposite, so reading the wrong position changes the result.
    A large logit on an unrelated token checks the renormalisation over " A" and " B"."""

    def __init__(self, tokenizer):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.vocab = len(tokenizer)
        self.apple = tokenizer(APPLE, add_special_tokens=False)["input_ids"][0]
        self.fig = tokenizer(FIG, add_special_tokens=False)["input_ids"][0]
        self.colon_after = tokenizer("Preferred:", add_special_tokens=False)["input_ids"][-2:]  # ["red", ":"]
        self.a, self.b = verdict_token_ids(tokenizer)

    def forward(self, input_ids, attention_mask=None):
        bsz, width = input_ids.shape
        logits = torch.zeros(bsz, width, self.vocab)
        logits[:, :, 7] = 10.0  # an unrelated, very likely token
        for r in range(bsz):
            row = input_ids[r].tolist()
            p = 0.8 if row.index(self.apple) < row.index(self.fig) else 0.3
            for t in range(width):
                at_verdict = t > 0 and row[t - 1 : t + 1] == self.colon_after
                q = p if at_verdict else 1 - p
                logits[r, t, self.a], logits[r, t, self.b] = math.log(q) + 3, math.log(1 - q) + 3
        return SimpleNamespace(logits=logits)


def make_scorer(tokenizer, cot=False, batch_size=4):
    spec = RMSpec(
        type="genrm", system_prompt=GENRM_SYSTEM_PROMPT, max_length=256, extra={"cot": cot, "max_rationale_tokens": 16}
    )
    return GenRMScorer("unused", batch_size=batch_size, model=FakeJudge(tokenizer), tokenizer=tokenizer, spec=spec)


def test_verdict_probability_is_read_after_the_prefix_and_renormalised(tokenizer):
    scorer = make_scorer(tokenizer)
    # different story lengths in one batch: right padding must not move the read position
    got = scorer.prefer_ordered(
        ["p", "p", "p"],
        [APPLE, f"{FIG} and more words here", APPLE],
        [FIG, APPLE, f"{FIG} plus a long tail of extra words"],
    )
    assert got == pytest.approx([0.8, 0.3, 0.8], abs=1e-6)


def test_prefer_averages_both_orders(tokenizer):
    scorer = make_scorer(tokenizer, batch_size=1)
    # apple first: P(A)=0.8; fig first: P(A)=0.3 -> P(apple better | fig first) = 0.7; mean 0.75
    assert scorer.prefer(["p"], [APPLE], [FIG]) == pytest.approx([0.75], abs=1e-6)
    assert scorer.prefer(["p"], [FIG], [APPLE]) == pytest.approx([0.25], abs=1e-6)


def test_cot_verdict_parsing_and_missing_prefix(tokenizer, monkeypatch):
    scorer = make_scorer(tokenizer, cot=True)
    replies = iter([["Reasoning: Story A is vivid.\n\nPreferred: A", "Reasoning: rambling without an answer"]])
    monkeypatch.setattr(scorer, "generate_rationales", lambda prompts: next(replies))
    assert scorer.prefer_ordered(["p", "p"], [APPLE, APPLE], [FIG, FIG]) == [pytest.approx(0.8, abs=1e-6), None]


def test_prefer_needs_a_verdict_in_both_orders(monkeypatch, tokenizer):
    # the two-order rule (rlcw.metrics.pairwise): (0.8 + 1 - 0.3) / 2 = 0.75; one missing order -> None
    scorer = make_scorer(tokenizer)
    replies = iter([[0.8, None, 0.9, None], [0.3, 0.4, None, None]])
    monkeypatch.setattr(scorer, "prefer_ordered", lambda prompts, a, b: next(replies))
    assert scorer.prefer(["p"] * 4, ["a"] * 4, ["b"] * 4) == [pytest.approx(0.75), None, None, None]


def test_groups_whole_and_split():
    prompts = ["x", "x", "y", "y"]
    assert [list(b) for b in groups_of(prompts, 2)] == [[0, 1], [2, 3]]
    assert [list(b) for b in groups_of(prompts, None)] == [[0, 1], [2, 3]]
    with pytest.raises(RlcwError, match="not a multiple of num_generations=4") as info:
        groups_of(["x", "x", "x", "y", "y", "y"], 4)
    assert "train.batch_size" in str(info.value)
    with pytest.raises(RlcwError, match="do not share one prompt"):
        groups_of(["x", "x", "x", "y"], 2)
    with pytest.raises(RlcwError, match="cannot infer"):
        groups_of(["x", "x", "y"], None)


def test_group_comparisons_counts():
    assert group_comparisons(4, "all_pairs", 1, random.Random(0)) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    sampled = group_comparisons(4, "groupmates", 1, random.Random(0))
    assert all(i < j for i, j in sampled) and {m for c in sampled for m in c} == {0, 1, 2, 3}  # everyone compared
    assert len(group_comparisons(4, "groupmates", 3, random.Random(0))) == 6  # k = size-1 -> all pairs


def test_win_rates_hand_example():
    # (0 vs 1): 0 wins 0.8; (0 vs 2): 0 wins 0.6; (1 vs 2): no verdict
    assert win_rates(3, [(0, 1), (0, 2), (1, 2)], [0.8, 0.6, None]) == [
        pytest.approx(0.7),
        pytest.approx(0.2),
        pytest.approx(0.4),
    ]


class QualityScorer:
    """P(a beats b) = qa / (qa + qb), qualities written in the story text as 'q=<n>'."""

    def prefer(self, prompts, a, b):
        q = lambda s: float(s.split("=")[1])  # noqa: E731
        return [q(x) / (q(x) + q(y)) for x, y in zip(a, b, strict=False)]


def test_reward_all_pairs_and_reference():
    reward = GenRMReward("unused", mode="all_pairs", num_generations=3, scorer=QualityScorer())
    got = reward(["p"] * 3 + ["r"] * 3, ["q=1", "q=2", "q=3", "q=1", "q=1", "q=2"])
    # group 1: q=1 -> (1/3 + 1/4)/2; q=2 -> (2/3 + 2/5)/2; q=3 -> (3/4 + 3/5)/2
    assert got[:3] == pytest.approx([(1 / 3 + 1 / 4) / 2, (2 / 3 + 2 / 5) / 2, (3 / 4 + 3 / 5) / 2])
    assert got[3:] == pytest.approx([(1 / 2 + 1 / 3) / 2, (1 / 2 + 1 / 3) / 2, 2 / 3])
    ref = GenRMReward("unused", mode="reference", scorer=QualityScorer())
    assert ref(["p", "p"], ["q=1", "q=3"], reference=["q=1", "q=1"]) == pytest.approx([0.5, 0.75])
    with pytest.raises(RlcwError, match="reference"):
        ref(["p"], ["q=1"])


def test_reward_groupmates_checks_groups_and_conversational_prompts():
    reward = GenRMReward("unused", mode="groupmates", k=1, num_generations=2, scorer=QualityScorer())
    chat = lambda t: [{"role": "system", "content": "s"}, {"role": "user", "content": t}]  # noqa: E731
    got = reward(
        [chat("a"), chat("a")], [[{"role": "assistant", "content": "q=1"}], [{"role": "assistant", "content": "q=3"}]]
    )
    assert got == pytest.approx([0.25, 0.75])
    with pytest.raises(RlcwError, match="groups are not whole"):
        reward([chat("a"), chat("b")], ["q=1", "q=2"])
    with pytest.raises(RlcwError, match="unknown GenRM reward mode"):
        GenRMReward("unused", mode="pairs", scorer=QualityScorer())
