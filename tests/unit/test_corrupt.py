"""Controlled corruptions: each kind changes the text, length-matched where asked, deterministic."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from rlcw.data.corrupt import (
    CORRUPTIONS,
    UNMATCHED,
    corrupt,
    ending,
    match_ending,
    repeat,
    shuffle,
    splice,
    stop_early,
    substitute,
    truncate,
    truncate_pair,
)
from rlcw.metrics.text import count_words, split_sentences

# 7 sentences with word counts 6, 4, 12, 12, 12, 4, 12 (62 words).
S = [
    "The lighthouse keeper woke before dawn.",
    "Rain hammered the glass.",
    "He climbed the spiral stairs with a lantern in his shaking hand.",
    "The lamp had gone dark for the first time in forty years.",
    "Far below, a small boat fought the heavy waves near the rocks.",
    "He struck a match.",
    "The flame caught and the beam swept out across the black water.",
]
TEXT = " ".join(S)
N_WORDS = 62
# A donor story of 6 sentences (for splices and substitutions).
D = [
    "Mina baked bread every Sunday.",
    "Her oven was older than the village.",
    "One morning the dough refused to rise.",
    "She sang to it quietly.",
    "Slowly, the loaf grew golden and tall.",
    "Neighbours followed the smell to her door.",
]
OTHER = " ".join(D)


def _within(c: str, r: str) -> bool:
    a, b = count_words(c), count_words(r)
    return abs(a - b) <= max(1, round(0.05 * a))


def test_fixture_text_is_what_the_comments_say():
    assert split_sentences(TEXT) == S
    assert [count_words(s) for s in S] == [6, 4, 12, 12, 12, 4, 12]
    assert count_words(TEXT) == N_WORDS
    assert split_sentences(OTHER) == D


@pytest.mark.parametrize("kind", CORRUPTIONS)
@pytest.mark.parametrize("match_length", [True, False])
def test_every_kind_changes_the_text(kind, match_length):
    for seed in range(5):
        pair = corrupt(kind, TEXT, OTHER, random.Random(seed), match_length)
        assert pair is not None
        chosen, rejected = pair
        assert rejected != chosen
        assert rejected.strip() and chosen.strip()


@pytest.mark.parametrize("kind", [k for k in CORRUPTIONS if k not in UNMATCHED])
def test_match_length_keeps_word_counts_within_tolerance(kind):
    for seed in range(10):
        chosen, rejected = corrupt(kind, TEXT, OTHER, random.Random(seed), True)
        assert _within(chosen, rejected), (kind, seed, count_words(chosen), count_words(rejected))


@pytest.mark.parametrize("kind", ["shuffle", "splice", "substitute", "repeat"])
def test_non_truncate_kinds_keep_the_original_as_chosen(kind):
    chosen, _ = corrupt(kind, TEXT, OTHER, random.Random(0), True)
    assert chosen == TEXT


def test_shuffle_keeps_the_multiset_of_sentences_and_never_the_identity():
    for seed in range(10):
        out = shuffle(TEXT, OTHER, random.Random(seed), True)
        assert Counter(split_sentences(out)) == Counter(S)
        assert split_sentences(out) != S


def test_substitute_keeps_word_count_and_changes_about_30_percent():
    k = round(0.3 * N_WORDS)  # 19
    for seed in range(10):
        out = substitute(TEXT, OTHER, random.Random(seed), True)
        new, old = out.split(), TEXT.split()
        assert len(new) == len(old) == N_WORDS
        changed = sum(a != b for a, b in zip(old, new, strict=False))
        assert 1 <= changed <= k
        donor_words = set(OTHER.split())
        assert all(b in donor_words for a, b in zip(old, new, strict=False) if a != b)


def test_substitute_rate_of_one_word_minimum():
    out = substitute("one two three four five", "x", random.Random(0), True, rate=0.01)
    assert out.split().count("x") == 1


def test_splice_length_matched_keeps_first_half_and_fills_from_donor():
    out = splice(TEXT, OTHER, random.Random(3), True)
    head = " ".join(S[:3])  # 7 // 2 = 3 sentences, 22 words
    assert out.startswith(head + " ")
    tail = out[len(head) + 1 :].split()
    assert len(tail) == N_WORDS - 22
    assert set(tail) <= set(OTHER.split())


def test_splice_unmatched_replaces_second_half_with_donor_sentences():
    out = splice(TEXT, OTHER, random.Random(3), False)
    sents = split_sentences(out)
    assert sents[:3] == S[:3]
    assert len(sents) == 7
    assert all(s in D for s in sents[3:])


def test_repeat_length_matched_cycles_the_first_half():
    out = repeat(TEXT, OTHER, random.Random(0), True)
    head_words = " ".join(S[:3]).split()  # 22 words
    assert out.split() == (head_words * 3)[:N_WORDS]


def test_repeat_unmatched_appends_the_first_half():
    out = repeat(TEXT, OTHER, random.Random(0), False)
    assert split_sentences(out) == S + S[:3]


def test_truncate_pair_is_length_matched_and_ends_abruptly():
    # Only i=5 qualifies among the late spots: sentence 6 has 4 words, sentence 7 has 12.
    chosen, rejected = truncate_pair(TEXT, random.Random(0))
    assert chosen == " ".join(S[:6])
    assert rejected == " ".join(S[:5]) + " The flame caught and"
    assert count_words(chosen) == count_words(rejected) == 50


def test_truncate_with_match_length_via_corrupt():
    for seed in range(5):
        chosen, rejected = corrupt("truncate", TEXT, OTHER, random.Random(seed), True)
        assert chosen.rstrip()[-1] in ".!?"
        assert rejected.rstrip()[-1] not in ".!?"
        assert count_words(chosen) == count_words(rejected)
        assert TEXT.startswith(chosen)


def test_truncate_unmatched_keeps_40_to_70_percent_of_the_words():
    lo, hi = round(0.4 * N_WORDS), round(0.7 * N_WORDS)  # 25, 43
    for seed in range(10):
        out = truncate(TEXT, OTHER, random.Random(seed), False)
        assert lo <= count_words(out) <= hi
        assert out[-1] not in ".!?"
        assert TEXT.startswith(out)


@pytest.mark.parametrize("kind", ["shuffle", "splice", "substitute"])
def test_same_seed_same_output_different_seeds_differ(kind):
    a = corrupt(kind, TEXT, OTHER, random.Random(11), True)
    b = corrupt(kind, TEXT, OTHER, random.Random(11), True)
    assert a == b
    outs = {corrupt(kind, TEXT, OTHER, random.Random(seed), True)[1] for seed in range(8)}
    assert len(outs) >= 2


def test_truncate_unmatched_seeds_differ():
    outs = {truncate(TEXT, OTHER, random.Random(seed), False) for seed in range(8)}
    assert len(outs) >= 2


def test_unknown_kind_is_value_error():
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt("reverse", TEXT, OTHER, random.Random(0), True)


@pytest.mark.parametrize("kind", CORRUPTIONS)
@pytest.mark.parametrize("match_length", [True, False])
def test_too_short_text_gives_none(kind, match_length):
    assert corrupt(kind, "Hi there.", OTHER, random.Random(0), match_length) is None


def test_specific_short_limits():
    rng = random.Random(0)
    two = "First one here. Second one here."
    assert shuffle(two, OTHER, rng, True) is None  # needs 3 sentences
    assert repeat(two, OTHER, rng, True) is None
    assert splice(TEXT, "Only one donor sentence.", rng, True) is None  # donor needs 2
    assert substitute("a b c d", OTHER, rng, True) is None  # needs 5 words
    assert substitute(TEXT, "", rng, True) is None  # empty donor pool
    assert truncate("one two three four five six seven eight nine", OTHER, rng, False) is None  # < 10 words
    # every sentence the same length: no cut point for a length-matched truncation
    assert truncate_pair("Aa bb cc. Dd ee ff. Gg hh ii. Jj kk ll.", rng) is None


def test_shuffle_of_identical_sentences_is_dropped():
    same = "It rained. It rained. It rained. It rained."
    assert corrupt("shuffle", same, OTHER, random.Random(0), True) is None


def test_ending_reads_the_sentence_final_mark_through_closing_quotes():
    assert ending("He left.") == "."
    assert ending('She said "Go!"') == "!"
    assert ending("Why? ") == "?"
    assert ending("He left the") == ""
    assert ending("He left,") == ""


def test_match_ending_closes_a_cut_corruption_like_the_original_and_keeps_its_word_count():
    assert match_ending("He left.", "He left the") == "He left the."
    assert match_ending("Run!", "Run away,") == "Run away!"
    assert match_ending("He left.", "He stayed.") == "He stayed."  # already closed: unchanged
    assert match_ending("He left the", "He went") == "He went"  # original open: nothing to match
    assert count_words(match_ending(TEXT, "a b c d,")) == 4


@pytest.mark.parametrize("kind", ["shuffle", "splice", "substitute", "repeat"])
def test_no_kind_but_truncate_lets_the_ending_tell_chosen_from_rejected(kind):
    # length-matched splices and repeats stop at a word count, mid-sentence: before the fix the RM learned
    # "stops mid-sentence = rejected" from them; every rejected side must close like the chosen one
    for seed in range(20):
        chosen, rejected = corrupt(kind, TEXT, OTHER, random.Random(seed), True)
        assert ending(rejected) == ending(chosen) == ".", (kind, seed, rejected[-30:])


def test_truncate_keeps_its_unfinished_ending():
    for seed in range(5):
        chosen, rejected = corrupt("truncate", TEXT, OTHER, random.Random(seed), True)
        assert ending(chosen) == "." and ending(rejected) == ""


def test_stop_early_keeps_the_longest_run_of_first_sentences_within_half_the_words():
    # sentences of 6, 4, 12, 12, ... words: 6 + 4 + 12 = 22 <= 31 (half of 62), + 12 = 34 > 31
    for match_length in (True, False):
        chosen, rejected = corrupt("stop_early", TEXT, OTHER, random.Random(0), match_length)
        assert chosen == TEXT
        assert rejected == " ".join(S[:3])
        assert count_words(rejected) == 22
        assert ending(rejected) == ending(chosen) == "."  # ended cleanly: only the length tells them apart
    assert stop_early(TEXT, OTHER, random.Random(0), True, keep=0.15) == S[0]  # 6 <= 9.3 < 6 + 4


def test_stop_early_needs_a_first_sentence_short_enough_and_more_than_one_sentence():
    rng = random.Random(0)
    assert stop_early("A very long first sentence goes on and on here. Short.", OTHER, rng, True) is None
    assert stop_early("Only one sentence with several words in it.", OTHER, rng, True) is None
    assert stop_early("Short one. A second sentence that is much longer than the first one.", OTHER, rng, True) == (
        "Short one."
    )


def test_stop_early_draws_nothing_from_the_rng():
    rng = random.Random(5)
    corrupt("stop_early", TEXT, OTHER, rng, True)
    assert rng.random() == random.Random(5).random()
