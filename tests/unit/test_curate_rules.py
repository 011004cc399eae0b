"""LitBench curation rules on a synthetic raw file whose expected counts follow from how it is built.

Every story has 60 words unless a rule needs otherwise, so length balancing keeps every pair in the
rules test (all differences are 0); balancing has its own tests with designed differences.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timezone

import pytest

from rlcw.data.curate import Rules, balance_by_length, chosen_longer_share, curate_split, length_bins, split_hashes
from rlcw.data.litbench import parse_time, parse_upvotes, read_posts
from rlcw.errors import RlcwError

DAY = 86400
T0 = datetime(2020, 1, 1, tzinfo=timezone.utc).timestamp()
T_TEST = datetime(2023, 6, 1, tzinfo=timezone.utc).timestamp()
TRAIN_BEFORE = datetime(2023, 1, 1, tzinfo=timezone.utc).timestamp()
TEST_FROM = datetime(2023, 1, 2, tzinfo=timezone.utc).timestamp()


def text(uid: str, words: int = 60, word: str = "word") -> str:
    return " ".join([f"story-{uid}"] + [word] * (words - 1))


def chars_as_tokens(texts: list[str]) -> list[int]:
    """A stand-in tokenizer: one token per 4 characters."""
    return [len(t) // 4 for t in texts]


def post(title: str, stories: list[tuple]) -> dict:
    """A posts-layout row from (text, votes, time) triples."""
    return {
        "post_title": title,
        "post_text": "",
        "post_scores": 1,
        "comment_texts": [s[0] for s in stories],
        "comment_scores": [s[1] for s in stories],
        "comment_times": [s[2] for s in stories],
    }


def raw_rows() -> list[tuple[int, dict]]:
    d = lambda n: T0 + n * DAY  # noqa: E731
    t = lambda n: T_TEST + n * DAY  # noqa: E731
    rows = [
        # P1: a..e pairable (60 words); f..h fail a story filter; i..m are malformed stories.
        post(
            "[WP] P1",
            [
                (text("a"), 100, d(10)),
                (text("b"), 80, d(5)),
                (text("c"), 50, d(3)),
                (text("d"), 20, (d(12)) * 1000),  # milliseconds
                (text("e"), "10", "2020-01-04T00:00:00Z"),  # = d(3): numeric string, ISO time
                (text("f"), 5, d(1)),  # < 10 upvotes
                (text("g", 40), 50, d(1)),  # < 50 words
                (text("h", 60, "x" * 200), 50, d(1)),  # 60 words of 200 chars: ~3000 "tokens"
                ("[removed]", 50, d(1)),
                (text("j"), "abc", d(1)),
                (text("k"), 50, "not a date"),
                ("   ", 50, d(1)),
                (text("m"), None, d(1)),
            ],
        ),
        {**post("[WP] ragged", [(text("r1"), 50, d(1)), (text("r2"), 50, d(2))]), "comment_scores": [50]},
        {**post("[WP] malformed", [(text("r3"), 50, d(1))]), "comment_texts": "not a list"},
        {k: v for k, v in post("[WP] no times", [(text("r4"), 50, d(1))]).items() if k != "comment_times"},
        post("", [(text("r5"), 50, d(1)), (text("r6"), 10, d(0))]),
        # P2: x repeats a's text with other votes (duplicate); y/z pair.
        post("[WP] P2", [(text("a"), 30, d(20)), (text("y"), 40, d(25)), (text("z"), 10, d(22))]),
        # P3: same prompt as the test post T1 -> dropped from train.
        post("[WP] T1", [(text("p3a"), 50, d(30)), (text("p3b"), 10, d(29))]),
        # P4: q1 is the test story t1a (dropped from train); q2/q3 gap 2/12 < 0.25.
        post("[WP] P4", [(text("t1a"), 50, d(40)), (text("q2"), 10, d(39)), (text("q3"), 12, d(38))]),
        # P5: g1 just before the train cut-off; g2 between the cut-offs (in neither split).
        post("[WP] P5", [(text("g1"), 50, TRAIN_BEFORE - 3600), (text("g2"), 100, TRAIN_BEFORE + 3600)]),
        # Test posts (June 2023).
        post("[WP] T1", [(text("t1a"), 100, t(10)), (text("t1b"), 20, t(5))]),
        post("[WP] T2", [(text("t2a"), 50, t(3)), (text("t2b"), 30, t(4)), (text("t2c"), 10, t(1))]),
    ]
    return list(enumerate(rows, start=1))


@pytest.fixture(scope="module")
def curated():
    drops: Counter = Counter()
    posts, layout = read_posts(raw_rows(), "raw.jsonl", "auto", drops)
    rules = Rules(max_tokens=2048)
    test = curate_split(posts, rules, chars_as_tokens, seed=0, start=TEST_FROM)
    ex_stories, ex_prompts = split_hashes(test.pairs)
    train = curate_split(
        posts, rules, chars_as_tokens, seed=0, end=TRAIN_BEFORE, exclude_stories=ex_stories, exclude_prompts=ex_prompts
    )
    return layout, drops, train, test


def test_malformed_rows_and_stories_are_counted_by_name(curated):
    layout, drops, _, _ = curated
    assert layout == "posts"
    assert drops == Counter(
        {
            "ragged_comment_lists": 1,
            "malformed_comment_lists": 1,
            "missing_field": 1,
            "empty_prompt": 1,
            "deleted_story": 1,
            "non_numeric_upvotes": 1,
            "bad_timestamp": 1,
            "empty_story": 1,
            "missing_upvotes": 1,
        }
    )


def test_train_counts_after_each_rule(curated):
    _, _, train, _ = curated
    # 23 parseable stories: P1 a..h (8), P2 3, P3 2, P4 3, P5 2, T1 2, T2 3.
    assert train.counts == {
        "stories": 23,
        "date_window": 17,  # minus 5 test stories and g2
        "min_upvotes": 16,
        "min_words": 15,
        "max_tokens": 14,  # minus f, g, h
        "duplicates": 13,  # minus x (a's text under P2)
        "split_overlap": 10,  # minus P3's two stories (prompt) and q1 (story)
        "candidate_pairs": 12,  # P1: C(5,2)=10, P2: 1, P4: 1
        "upvote_gap": 10,  # a-b 20%, q2-q3 17%
        "later_is_better": 6,  # a-d, b-d, c-d earlier; c-e same time
        "per_post_cap": 6,
        "length_balance": 6,
    }
    assert train.drops["duplicate_story"] == 1
    assert train.drops["prompt_in_other_split"] == 2 and train.drops["story_in_other_split"] == 1
    got = {(p["chosen"].split()[0], p["rejected"].split()[0]) for p in train.pairs}
    want = {("a", "c"), ("b", "c"), ("a", "e"), ("b", "e"), ("d", "e"), ("y", "z")}
    assert got == {(f"story-{hi}", f"story-{lo}") for hi, lo in want}


def test_test_counts_and_records(curated):
    _, _, _, test = curated
    assert test.counts["date_window"] == 5 and test.counts["split_overlap"] == 5
    assert (test.counts["candidate_pairs"], test.counts["upvote_gap"], test.counts["later_is_better"]) == (4, 4, 3)
    assert len(test.pairs) == 3
    rec = next(p for p in test.pairs if p["chosen"].startswith("story-t1a"))
    assert rec["prompt"] == "[WP] T1"
    meta = rec["meta"]
    assert (meta["chosen_upvotes"], meta["rejected_upvotes"]) == (100, 20)
    assert meta["chosen_timestamp"].startswith("2023-06-11") and meta["chosen_words"] == 60
    assert all(p["meta"]["chosen_upvotes"] > p["meta"]["rejected_upvotes"] for p in test.pairs)


def test_cap_per_post_is_seeded():
    stories = [(text(f"s{i}"), 10 * 2**i, T0 + i * DAY) for i in range(4)]  # every pair passes: 6 pairs
    posts, _ = read_posts([(1, post("[WP] cap", stories))], "cap.jsonl")
    picks = [curate_split(posts, Rules(max_pairs_per_post=2), None, seed=s).pairs for s in range(6)]
    assert all(len(p) == 2 for p in picks)
    assert picks[0] == curate_split(posts, Rules(max_pairs_per_post=2), None, seed=0).pairs
    assert len({tuple(x["chosen"] + x["rejected"] for x in p) for p in picks}) > 1


def designed_diffs() -> list[int]:
    # |d| = 100 -> top bin (49): 40 longer, 10 shorter; |d| = 20 -> bin 10: 30 longer, 20 shorter; 5 ties.
    return [100] * 40 + [-100] * 10 + [20] * 30 + [-20] * 20 + [0] * 5


def test_balance_prunes_the_larger_side_of_each_mirrored_bin():
    diffs = designed_diffs()
    assert length_bins([100, -100, 20, -20, 0, 2, 1]) == [49, 49, 10, 10, None, 1, 0]
    assert chosen_longer_share(diffs) == pytest.approx(0.70)
    keep = balance_by_length(diffs, bins=100, seed=0)
    kept = [diffs[i] for i in keep]
    assert Counter(kept) == Counter({100: 10, -100: 10, 20: 20, -20: 20, 0: 5})
    assert chosen_longer_share(kept) == pytest.approx(0.5)
    assert keep == balance_by_length(diffs, bins=100, seed=0)
    assert keep != balance_by_length(diffs, bins=100, seed=1)


def test_balance_of_a_skewed_sample_is_within_two_points_of_half():
    rng = random.Random(3)
    diffs = [round(rng.gauss(40, 120)) for _ in range(3000)]
    assert chosen_longer_share(diffs) > 0.6
    kept = [diffs[i] for i in balance_by_length(diffs, 100, seed=0)]
    assert abs(chosen_longer_share(kept) - 0.5) <= 0.02 and len(kept) > 1500


def test_curate_split_balances_length_biased_posts():
    # 100 two-story posts; the better story is 30 words longer in 70 of them and 30 words shorter in 30.
    rows = []
    for i in range(100):
        longer = i < 70
        rows.append(
            (
                i + 1,
                post(
                    f"[WP] {i}",
                    [
                        (text(f"w{i}", 90 if longer else 60), 50, T0 + 2 * DAY),
                        (text(f"l{i}", 60 if longer else 90), 20, T0 + DAY),
                    ],
                ),
            )
        )
    posts, _ = read_posts(rows, "bias.jsonl")
    res = curate_split(posts, Rules(max_tokens=None), None, seed=0)
    assert chosen_longer_share(res.diffs_before) == pytest.approx(0.7)
    assert len(res.pairs) == 60 and abs(chosen_longer_share(res.diffs_after) - 0.5) <= 0.02


def test_pairs_layout_keep_and_regroup():
    def row(c, r, cu, ru, tc, tr):
        return {
            "prompt": "[WP] same",
            "chosen_story": text(c),
            "rejected_story": text(r),
            "chosen_upvotes": cu,
            "rejected_upvotes": ru,
            "chosen_timestamp": tc,
            "rejected_timestamp": tr,
        }

    a, b, c = datetime(2020, 1, 3), "2020-01-02T00:00:00", 1577836800  # A posted last, C first (2020-01-01)
    rows = list(
        enumerate(
            [row("A", "B", 100, 20, a, b), row("A", "C", 100, "n/a", a, c), row("B", "C", 20, 10, b, c)], start=1
        )
    )
    drops: Counter = Counter()
    posts, layout = read_posts(rows, "pairs.jsonl", "auto", drops)
    assert layout == "pairs" and drops == Counter({"non_numeric_upvotes": 1}) and len(posts) == 3
    kept = curate_split(posts, Rules(max_tokens=None, balance=False), None).pairs
    # row 1: A-B; row 2: C lost its votes, so no pair; row 3: B-C (gap 50%, B posted later)
    # (B is listed twice with the same votes and time: one story, not a duplicate)
    assert [(p["chosen"][:7], p["rejected"][:7]) for p in kept] == [("story-A", "story-B"), ("story-B", "story-C")]
    regrouped, _ = read_posts(rows, "pairs.jsonl", "pairs", Counter(), regroup_pairs=True)
    assert len(regrouped) == 1 and len(regrouped[0].stories) == 3  # A, B, C once each


def test_layout_mismatch_names_file_row_and_key():
    with pytest.raises(RlcwError) as info:
        read_posts([(1, {"title": "x", "comments": []})], "odd.jsonl")
    assert "odd.jsonl:1" in str(info.value) and "post_title" in str(info.value)
    with pytest.raises(RlcwError, match="chosen_story"):
        read_posts([(1, {"prompt": "p"})], "p.jsonl", "pairs")


@pytest.mark.parametrize(
    "value,want",
    [
        (12, 12),
        ("12", 12),
        (12.0, 12),
        ("  7 ", 7),
        (None, "missing_upvotes"),
        ("", "missing_upvotes"),
        (float("nan"), "missing_upvotes"),
        ("abc", "non_numeric_upvotes"),
        (True, "non_numeric_upvotes"),
        (1.5, "non_numeric_upvotes"),
        ([3], "non_numeric_upvotes"),
    ],
)
def test_parse_upvotes(value, want):
    assert parse_upvotes(value) == want


def test_parse_time_accepts_seconds_ms_iso_and_datetimes():
    want = datetime(2021, 5, 6, 7, 8, 9, tzinfo=timezone.utc).timestamp()
    for value in (
        want,
        int(want) * 1000,
        str(int(want)),
        "2021-05-06T07:08:09Z",
        "2021-05-06 07:08:09",
        datetime(2021, 5, 6, 7, 8, 9),
    ):
        assert parse_time(value) == pytest.approx(want)
    assert parse_time("yesterday") == "bad_timestamp" and parse_time(None) == "missing_timestamp"
    assert parse_time(float("inf")) == "bad_timestamp"
