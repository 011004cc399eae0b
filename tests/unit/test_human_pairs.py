"""Human-vs-model pairs: the common word budget, sentence-end cuts, drops, split by prompt (hand-worked texts)."""

from __future__ import annotations

import json

import pytest

from rlcw.data.human_pairs import (
    build_human_pairs,
    common_budget,
    cut_to_budget,
    human_vs_model_pair,
    read_model_stories,
)
from rlcw.data.records import validate_preference
from rlcw.errors import RlcwError

HUMAN = "One two three. Four five six seven. Eight nine ten eleven twelve."  # sentences of 3, 4, 5 words = 12
MODEL_RAMBLE = "The cat sat. It slept all day long on the warm mat"  # 3 words, then 9 with no sentence end = 12
MODEL_TWO = "The cat sat on the mat today. It slept all day long."  # 7 + 5 = 12


def test_common_budget_is_the_smallest_of_both_lengths_and_the_cap():
    assert common_budget(HUMAN, "a b c d e") == 5
    assert common_budget(HUMAN, MODEL_TWO) == 12
    assert common_budget(HUMAN, MODEL_TWO, max_words=10) == 10


def test_cut_at_sentence_end_when_it_keeps_enough_of_the_budget():
    # budget 10: sentence ends at 3 and 7 words (12 > 10); 7 >= (1 - 0.3) * 10 = 7
    assert cut_to_budget(HUMAN, 10, 0.3) == ("One two three. Four five six seven.", True)
    # 7 < (1 - 0.2) * 10 = 8: cut at the word budget instead
    assert cut_to_budget(HUMAN, 10, 0.2) == ("One two three. Four five six seven. Eight nine ten", False)
    assert cut_to_budget(HUMAN, 12, 0.05) == (HUMAN, True)


def test_cut_without_sentence_end_and_with_closing_quote():
    assert cut_to_budget("a b c d e", 3, 0.5) == ("a b c", False)
    # 'He said "go."' ends a sentence (closing quote after the period): 3 >= 0.75 * 4
    assert cut_to_budget('He said "go." Then he left.', 4, 0.25) == ('He said "go."', True)


def test_layout_is_flattened_on_both_sides():
    assert cut_to_budget("\tOne two three.\n\tFour five.", 5, 0.05) == ("One two three. Four five.", True)


def test_pair_cut_to_the_same_sentence_length():
    pair, reason, budget = human_vs_model_pair(HUMAN, MODEL_TWO, tolerance=0.3, min_words=5, max_words=10)
    assert (pair, reason, budget) == (
        ("One two three. Four five six seven.", "The cat sat on the mat today."),
        None,
        10,
    )


def test_pair_dropped_when_cut_lengths_differ_beyond_tolerance():
    # budget 10: human cut at its sentence end (7 words); the model's only sentence end is at 3 < 7,
    # so it is cut at 10 words; |7 - 10| = 3 > max(1, round(0.3 * 7) = 2)
    pair, reason, budget = human_vs_model_pair(HUMAN, MODEL_RAMBLE, tolerance=0.3, min_words=5, max_words=10)
    assert (pair, reason, budget) == (None, "length_mismatch", 10)
    # no cap: budget 12 keeps both whole (human ends a sentence at 12; the model is cut at 12 words = all of it)
    pair, reason, _ = human_vs_model_pair(HUMAN, MODEL_RAMBLE, tolerance=0.3, min_words=5)
    assert pair == (HUMAN, MODEL_RAMBLE) and reason is None


def test_pair_too_short_and_identical():
    assert human_vs_model_pair(HUMAN, MODEL_TWO, tolerance=0.05, min_words=20)[:2] == (None, "too_short")
    assert human_vs_model_pair(HUMAN, "(empty)", tolerance=0.05, min_words=2)[:2] == (None, "too_short")
    assert human_vs_model_pair(HUMAN, HUMAN, tolerance=0.05, min_words=5)[:2] == (None, "identical")


def _rec(i: int, system: str, story: str = MODEL_TWO) -> dict:
    return {"id": f"p{i}", "prompt": f"Write about thing {i}.", "story": story, "system": system, "reference": HUMAN}


def test_build_splits_by_prompt_and_counts_drops():
    recs = [_rec(i, s) for i in range(30) for s in ("base", "tuned")] + [_rec(99, "base", "a b c")]
    train, held, stats = build_human_pairs(recs, tolerance=0.3, min_words=5, max_words=10, eval_fraction=0.5, seed=3)
    assert (
        stats.stories == 61 and stats.pairs == 60 == len(train) + len(held) and dict(stats.dropped) == {"too_short": 1}
    )
    assert train and held and not {p["prompt"] for p in train} & {p["prompt"] for p in held}
    for p in train + held:
        validate_preference(p)
        assert (
            p["chosen"] == "One two three. Four five six seven." and p["rejected"] == "The cat sat on the mat today."
        )
        assert p["meta"]["kind"] == "human_vs_model" and p["meta"]["chosen_system"] == "human"
        assert p["source"] == f"human_vs_model:{p['meta']['rejected_system']}"
    assert stats.chosen_words == stats.rejected_words == [7] * 60
    # the split does not depend on record order
    _, held_rev, _ = build_human_pairs(recs[::-1], tolerance=0.3, min_words=5, max_words=10, eval_fraction=0.5, seed=3)
    assert sorted(p["meta"]["story_id"] for p in held) == sorted(p["meta"]["story_id"] for p in held_rev)


def test_read_model_stories_names_line_without_reference(tmp_path):
    path = tmp_path / "stories.jsonl"
    bad = {k: v for k, v in _rec(1, "base").items() if k != "reference"}
    path.write_text(json.dumps(_rec(0, "base")) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(RlcwError) as err:
        read_model_stories(path)
    assert f"{path}:2 field 'reference'" in str(err.value) and "data.format=tmas" in str(err.value)
