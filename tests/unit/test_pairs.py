"""Corruption pairs from stories: chunking, split by story, length matching, determinism."""

from __future__ import annotations

import pytest

from rlcw.data.bundled import bundled_path
from rlcw.data.corrupt import CORRUPTIONS, UNMATCHED
from rlcw.data.pairs import build_corruption_pairs, chunk_story, is_eval_story, length_matched
from rlcw.data.records import read_stories, validate_preference
from rlcw.metrics.text import split_sentences

TEN = " ".join(
    f"Sentence number {w} is here."
    for w in ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
)


@pytest.fixture(scope="module")
def stories():
    return read_stories(bundled_path("stories.jsonl"))


@pytest.fixture(scope="module")
def built(stories):
    return build_corruption_pairs(stories, list(CORRUPTIONS), chunk_sentences=5, seed=0)


def test_chunk_story_ten_sentences_by_four():
    chunks = chunk_story(TEN, 4)
    assert len(chunks) == 2  # the 2-sentence tail is dropped
    assert [len(split_sentences(c)) for c in chunks] == [4, 4]
    assert chunks[0].startswith("Sentence number one") and chunks[0].endswith("number four is here.")
    assert chunks[1].startswith("Sentence number five") and chunks[1].endswith("number eight is here.")


def test_chunk_story_exact_multiple_and_max_chunks():
    assert len(chunk_story(TEN, 5)) == 2
    assert len(chunk_story(TEN, 2)) == 5
    assert chunk_story(TEN, 2, max_chunks=3) == chunk_story(TEN, 2)[:3]


def test_chunk_story_shorter_than_a_chunk_is_one_chunk():
    assert chunk_story("One. Two. Three.", 5) == ["One. Two. Three."]
    assert chunk_story("", 5) == []


def test_chunk_story_normalises_newlines():
    assert chunk_story("A b.\nC d.\n\nE f. G h.", 2) == ["A b. C d.", "E f. G h."]


def test_length_matched_tolerance():
    twenty = " ".join(["w"] * 20)
    assert length_matched(twenty, " ".join(["w"] * 21), 0.05)  # 5% of 20 = 1
    assert not length_matched(twenty, " ".join(["w"] * 22), 0.05)
    assert length_matched("a b", "a b c", 0.0)  # at least one word of slack


def test_is_eval_story_is_deterministic_and_respects_fraction():
    ids = [f"s{i}" for i in range(400)]
    assert [is_eval_story(i, 0.2, 0) for i in ids] == [is_eval_story(i, 0.2, 0) for i in ids]
    share = sum(is_eval_story(i, 0.2, 0) for i in ids) / len(ids)
    assert 0.12 < share < 0.28
    assert not any(is_eval_story(i, 0.0, 0) for i in ids)
    assert all(is_eval_story(i, 1.0, 0) for i in ids)


def test_bundled_pairs_split_by_story(built):
    train, held, _ = built
    assert train and held
    train_ids = {p["meta"]["story_id"] for p in train}
    eval_ids = {p["meta"]["story_id"] for p in held}
    assert not train_ids & eval_ids
    for p in train:
        assert not is_eval_story(p["meta"]["story_id"], 0.2, 0)
    for p in held:
        assert is_eval_story(p["meta"]["story_id"], 0.2, 0)


def test_bundled_pairs_are_length_matched_and_valid(built):
    train, held, _ = built
    for i, p in enumerate(train + held):
        assert validate_preference(p, "pairs", i) == p
        assert p["meta"]["kind"] in CORRUPTIONS
        assert p["source"] == f"corruption:{p['meta']['kind']}"
        matched = p["meta"]["kind"] not in UNMATCHED
        assert p["meta"]["length_matched"] is matched
        assert length_matched(p["chosen"], p["rejected"], 0.05) is matched, p


def test_stop_early_pairs_are_training_only_and_leave_every_other_pair_as_it_was(stories, built):
    train, held, stats = built
    assert {p["meta"]["kind"] for p in held} == set(CORRUPTIONS) - UNMATCHED
    early = [p for p in train if p["meta"]["kind"] == "stop_early"]
    assert early and stats.dropped["stop_early: eval split (length-matched only)"] > 0
    for p in early:
        assert p["chosen"].startswith(p["rejected"]) and len(p["rejected"].split()) <= len(p["chosen"].split()) / 2
    kinds = [k for k in CORRUPTIONS if k not in UNMATCHED]
    without = build_corruption_pairs(stories, kinds, chunk_sentences=5, seed=0)
    assert without[1] == held  # the eval split is unchanged
    key = lambda p: (p["meta"]["story_id"], p["meta"]["chunk"], p["meta"]["kind"])  # noqa: E731
    assert sorted(map(key, without[0])) == sorted(key(p) for p in train if p["meta"]["kind"] != "stop_early")
    assert sorted(without[0], key=key) == sorted((p for p in train if p["meta"]["kind"] != "stop_early"), key=key)


def test_bundled_pairs_stats(built, stories):
    train, held, stats = built
    assert stats.stories == 48
    assert stats.pairs == len(train) + len(held)
    assert sum(stats.per_kind.values()) == stats.pairs
    assert set(stats.per_kind) == set(CORRUPTIONS)  # every kind produced pairs
    expected_chunks = sum(len(chunk_story(s["story"], 5)) for s in stories)
    assert stats.chunks == expected_chunks
    assert stats.pairs + sum(stats.dropped.values()) == stats.chunks * len(CORRUPTIONS)


def test_bundled_pairs_chosen_is_a_chunk_of_its_story(built, stories):
    by_id = {s["id"]: " ".join(s["story"].split()) for s in stories}
    train, held, _ = built
    for p in train + held:
        if p["meta"]["kind"] != "truncate":
            assert p["chosen"] in by_id[p["meta"]["story_id"]]
        assert p["prompt"] in {s["prompt"] for s in stories if s["id"] == p["meta"]["story_id"]}


def test_same_seed_same_pairs_different_seed_differs(stories, built):
    again = build_corruption_pairs(stories, list(CORRUPTIONS), chunk_sentences=5, seed=0)
    assert again[0] == built[0] and again[1] == built[1]
    other = build_corruption_pairs(stories, list(CORRUPTIONS), chunk_sentences=5, seed=1)
    assert other[0] != built[0]


def test_unmatched_build_keeps_more_pairs(stories):
    _, _, matched = build_corruption_pairs(stories[:10], ["truncate"], chunk_sentences=5, seed=0)
    _, _, unmatched = build_corruption_pairs(stories[:10], ["truncate"], chunk_sentences=5, seed=0, match_length=False)
    assert unmatched.pairs >= matched.pairs
    assert unmatched.pairs == unmatched.chunks  # every chunk of >= 10 words can be cut


def test_eval_story_text_does_not_leak_into_train_pairs(built, stories):
    train, held, _ = built
    eval_ids = {p["meta"]["story_id"] for p in held}
    eval_sentences = {
        s for st in stories if st["id"] in eval_ids for s in split_sentences(st["story"]) if len(s.split()) >= 8
    }
    leaked = [s for s in eval_sentences if any(s in p["rejected"] for p in train)]
    assert not leaked, f"{len(leaked)} eval sentences appear in train pairs, e.g. {leaked[0]!r}"
