"""Text statistics and pairwise accuracy on hand-worked examples."""

from __future__ import annotations

import pytest

from rlcw.metrics.pairwise import length_baseline_accuracy, pairwise_accuracy
from rlcw.metrics.text import count_words, distinct_n, ngrams, repetition_rate, split_sentences, tokens


@pytest.mark.parametrize(
    "text, expected",
    [
        ("She opened the door. Nobody answered!", ["She opened the door.", "Nobody answered!"]),
        (
            'She opened the door. "Who is there?" she asked. Nobody answered!',
            ["She opened the door.", '"Who is there?" she asked.', "Nobody answered!"],
        ),
        ('"Run!" Tom shouted. Is it over? Yes.', ['"Run!"', "Tom shouted.", "Is it over?", "Yes."]),
        ("He said \u201cGo.\u201d Then silence.", ["He said \u201cGo.\u201d", "Then silence."]),
        ("(He left.) She stayed.", ["(He left.)", "She stayed."]),
        ("It cost 3.50 dollars. Then he left.", ["It cost 3.50 dollars.", "Then he left."]),
        ("Chapter one ended. 2 years passed.", ["Chapter one ended.", "2 years passed."]),
        ("wait. lowercase does not split. Capital does.", ["wait. lowercase does not split.", "Capital does."]),
        ("One.\nTwo.\n\n  Three", ["One.", "Two.", "Three"]),
        ("No final stop", ["No final stop"]),
        ("", []),
        ("   \n ", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_round_trips_words():
    text = 'A fox ran. "Stop!" cried Bea. Why? Because.'
    assert " ".join(split_sentences(text)) == text


@pytest.mark.parametrize(
    "text, n", [("  a  b\nc\td  ", 4), ("", 0), ("don't stop-now", 2), ("Hello, world!", 2), ("one", 1)]
)
def test_count_words(text, n):
    assert count_words(text) == n


def test_tokens_lowercase_without_punctuation():
    assert tokens("Hello, World! It's 3pm.") == ["hello", "world", "it's", "3pm"]


def test_ngrams():
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams(["a"], 2) == []


def test_repetition_rate_hand_worked():
    # trigrams abc, bca, cab, abc -> 3 unique of 4 -> 1 - 3/4
    assert repetition_rate("a b c a b c", n=3) == pytest.approx(0.25)
    # case and punctuation are ignored: same trigrams
    assert repetition_rate("A b c. a B, c!", n=3) == pytest.approx(0.25)
    # bigrams (the cat), (cat the), (the cat) -> 1 - 2/3
    assert repetition_rate("the cat the cat", n=2) == pytest.approx(1 / 3)
    assert repetition_rate("one two three four", n=3) == 0.0
    assert repetition_rate("too short", n=3) == 0.0
    assert repetition_rate("", n=3) == 0.0


def test_distinct_n_hand_worked():
    # bigrams: ab, bc | ab, bd -> 3 unique of 4
    assert distinct_n(["a b c", "a b d"], n=2) == pytest.approx(0.75)
    # unigrams a b c a b d -> 4 unique of 6
    assert distinct_n(["a b c", "a b d"], n=1) == pytest.approx(4 / 6)
    assert distinct_n(["x y z"], n=3) == 1.0
    assert distinct_n([], n=2) == 0.0
    assert distinct_n(["a"], n=2) == 0.0


def test_pairwise_accuracy_ties_count_half():
    # wins: 3>1 yes, 1>2 no, 2=2 half, 5>0 yes -> 2.5 / 4
    assert pairwise_accuracy([3, 1, 2, 5], [1, 2, 2, 0]) == pytest.approx(0.625)
    assert pairwise_accuracy([1.0], [1.0]) == 0.5
    assert pairwise_accuracy([0.0, 0.0], [1.0, 2.0]) == 0.0


@pytest.mark.parametrize("c, r", [([1, 2], [1]), ([], [])])
def test_pairwise_accuracy_rejects_bad_lists(c, r):
    with pytest.raises(ValueError):
        pairwise_accuracy(c, r)


def test_length_baseline_accuracy_hand_worked():
    pairs = [
        {"chosen": "one two three", "rejected": "one two"},  # longer chosen: win
        {"chosen": "one two", "rejected": "a b c d"},  # shorter chosen: loss
        {"chosen": "x y z", "rejected": "p q r"},  # tie: half
    ]
    assert length_baseline_accuracy(pairs) == pytest.approx(0.5)
    assert length_baseline_accuracy(pairs[:1]) == 1.0


def test_is_junk_tells_collapsed_output_from_prose():
    from rlcw.metrics.text import is_junk

    collapsed = [
        "[[[[[[[[[[[[",
        "# \n[ \n[ \n[ \n[",
        "*\n* * *\n* * * * *",
        "[[[[[[[[[[[[column_2: [[[[[[[[",
        "",
        "  \n",
    ]
    prose = ['"Go!" he said, and left at dawn.', "Это короткая история.", "She counted 1, 2, 3 and ran."]
    assert [is_junk(t) for t in collapsed] == [True] * len(collapsed)
    assert [is_junk(t) for t in prose] == [False] * len(prose)
    assert is_junk("ab[[[") and not is_junk("abc[[")  # the line: letters against the other visible characters
