"""On-policy pairs labelled by a scorer, the prompt split, and agreement with the gold, by hand."""

from __future__ import annotations

import pytest

from rlcw.outcome.pairs import agreement_with, labelled_pairs, split_by_prompt


def _rec(p, k, gold, proxy, story=None):
    return {
        "prompt_id": p,
        "sample_index": k,
        "prompt": f"prompt {p}",
        "story": story or f"story {p} {k}",
        "scores": {"gold": gold, "proxy": proxy},
    }


def test_noiseless_labels_put_the_higher_gold_first_and_drop_identical_texts():
    recs = [_rec("a", 0, 1.0, 0.0), _rec("a", 1, 3.0, 0.0), _rec("a", 2, 2.0, 0.0, story="story a 0")]
    pairs, info = labelled_pairs(recs, "gold", k=3, per_prompt=None, temperature=0.0, seed=0)
    # (0,1): 1 wins; (0,2): 2 wins but both texts are "story a 0" -> dropped; (1,2): 1 wins
    assert [(p["meta"]["chosen_index"], p["meta"]["rejected_index"]) for p in pairs] == [(1, 0), (1, 2)]
    assert info.pairs == 2 and info.identical == 1 and info.label_noise == 0.0
    assert pairs[0]["chosen"] == "story a 1" and pairs[0]["source"] == "gold_labelled"


def test_sampled_labels_state_their_noise():
    # one pair, gold margin 0: P = 0.5 -> noise 0.5; margin ln 3 at T = 1: P = 0.75 -> noise 0.25
    recs = [_rec("a", 0, 0.0, 0.0), _rec("a", 1, 0.0, 0.0), _rec("b", 0, 0.0, 0.0), _rec("b", 1, 1.0986123, 0.0)]
    _, info = labelled_pairs(recs, "gold", k=2, per_prompt=None, temperature=1.0, seed=0)
    assert info.label_noise == pytest.approx((0.5 + 0.25) / 2, abs=1e-6)


def test_split_keeps_each_prompt_on_one_side():
    pairs = [{"meta": {"prompt_id": f"p{i % 10}"}} for i in range(40)]
    train, held = split_by_prompt(pairs, 0.3, seed=0)
    assert len(train) + len(held) == 40 and held
    assert not {p["meta"]["prompt_id"] for p in train} & {p["meta"]["prompt_id"] for p in held}


def test_agreement_by_hand():
    # prompt a: gold 0 < 1 < 2; proxy agrees on (0,1) and (0,2), reverses (1,2) -> 2/3
    # prompt b: gold tie on (0,1) -> left out
    recs = [_rec("a", 0, 0.0, 0.0), _rec("a", 1, 1.0, 2.0), _rec("a", 2, 2.0, 1.0)]
    recs += [_rec("b", 0, 5.0, 0.0), _rec("b", 1, 5.0, 1.0), _rec("b", 2, 6.0, 1.0)]
    a = agreement_with(recs, "proxy", "gold", k=3, per_prompt=None, n_resamples=200)
    # b: (0,2) agrees, (1,2) proxy tie = 0.5 -> outcomes a: 1, 1, 0; b: 1, 0.5 -> 3.5 / 5
    assert a.accuracy == pytest.approx(3.5 / 5) and a.pairs == 5 and a.prompts == 2 and a.gold_ties == 1
    # the prompt bootstrap draws a or b wholes: a alone 2/3, b alone 0.75
    assert 2 / 3 - 1e-9 <= a.ci_low <= a.accuracy <= a.ci_high <= 0.75 + 1e-9


def test_accuracy_by_prompt_by_hand():
    from rlcw.outcome.pairs import accuracy_by_prompt

    # p1: right, right; p2: wrong, tie -> (1 + 1 + 0 + 0.5) / 4
    acc = accuracy_by_prompt([2.0, 3.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], ["p1", "p1", "p2", "p2"], n_resamples=200)
    assert acc.accuracy == pytest.approx(0.625) and acc.prompts == 2 and acc.pairs == 4
    assert acc.ci_low == pytest.approx(0.25) and acc.ci_high == pytest.approx(1.0)  # p2 twice / p1 twice
