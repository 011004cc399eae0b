"""Length terms: word-range penalty, soft overlong penalty, cap fit, and their TRL callables."""

import pytest

from rlcw.rewards.length import LengthReward, OverlongReward, length_penalty, overlong_penalty, range_fits_cap


@pytest.mark.parametrize(
    "words,expected",
    [
        (50, 0.0),
        (40, 0.0),
        (60, 0.0),  # inside and on the edges of 40-60
        (35, -0.25),  # 5 short / width 20
        (70, -0.5),  # 10 over / 20
        (100, -2.0),  # 40 over / 20 = 2.0, at the clip
        (0, -2.0),  # 40 short / 20 = 2.0
    ],
)
def test_length_penalty_is_the_distance_in_range_widths(words, expected):
    assert length_penalty(words, 40, 60, clip=2.0) == pytest.approx(expected)


def test_length_penalty_clip_and_missing_range():
    assert length_penalty(200, 40, 60, clip=1.0) == -1.0
    assert length_penalty(5, None, None) == 0.0
    assert length_penalty(9, 10, 10) == -1.0  # zero-width range counts as width 1


def test_a_group_that_misses_the_range_still_gets_graded_signal():
    # four completions for a 1,300-1,350-word prompt, all too short: penalties differ by distance
    got = [length_penalty(w, 1300, 1350, clip=100.0) for w in (1200, 1250, 1275, 1300)]
    assert got == pytest.approx([-2.0, -1.0, -0.5, 0.0])


@pytest.mark.parametrize(
    "tokens,expected",
    [
        (0, 0.0),
        (80, 0.0),  # up to max - buffer = 80: free
        (85, -0.25),
        (90, -0.5),
        (100, -1.0),  # linear over the last 20 tokens
        (120, -1.0),  # beyond the cap stays at -1
    ],
)
def test_overlong_penalty_is_soft_in_the_buffer(tokens, expected):
    assert overlong_penalty(tokens, max_tokens=100, buffer=20) == pytest.approx(expected)


def test_overlong_penalty_rejects_a_bad_buffer():
    with pytest.raises(ValueError):
        overlong_penalty(5, max_tokens=10, buffer=0)
    with pytest.raises(ValueError):
        OverlongReward(max_tokens=10, buffer=11)


def test_range_fits_cap():
    assert range_fits_cap(50, 70, tokens_per_word=1.4)  # 70 tokens hold exactly 50 words
    assert not range_fits_cap(51, 70, tokens_per_word=1.4)
    assert not range_fits_cap(1350, 128)  # a TMAS range with a CPU cap
    assert range_fits_cap(None, 8)


def test_length_reward_reads_rows_and_chat_completions():
    reward = LengthReward(clip=2.0)
    completions = [
        [{"role": "assistant", "content": "w " * 35}],
        [{"role": "assistant", "content": "w " * 50}],
        "w " * 10,
    ]
    got = reward(["p"] * 3, completions, min_words=[40, 40, None], max_words=[60, 60, None])
    assert got == pytest.approx([-0.25, 0.0, 0.0])
    assert reward.__name__ == "length_range"


def test_overlong_reward_uses_completion_token_ids():
    reward = OverlongReward(max_tokens=8)  # default buffer: a quarter of the cap = 2
    assert reward.buffer == 2
    got = reward(["p"] * 3, ["a", "b", "c"], completion_ids=[[1] * 6, [1] * 7, [1] * 8])
    assert got == pytest.approx([0.0, -0.5, -1.0])
    with pytest.raises(ValueError, match="completion_ids"):
        reward(["p"], ["a"])


def test_length_reward_cut_skip_judges_only_stories_that_ended():
    # range 40-60 (width 20), miss 3, cap 8 ids: an ended 35-word story costs 3 + 5/20; a completion of 8 ids
    # (cut at the cap) gets 0 whatever its words, so the overlong term alone prices not ending
    reward = LengthReward(clip=2.0, miss=3.0, cut="skip", max_tokens=8)
    completions = ["w " * 35, "w " * 35, "w " * 50, "w " * 70]
    ids = [[1] * 7, [1] * 8, [1] * 5, [1] * 7]
    got = reward(["p"] * 4, completions, min_words=[40] * 4, max_words=[60] * 4, completion_ids=ids)
    assert got == pytest.approx([-3.25, 0.0, 0.0, -3.5])
    words = LengthReward(clip=2.0, miss=3.0)  # the default judges the cut one by its words too
    assert words(["p"] * 2, completions[:2], min_words=[40] * 2, max_words=[60] * 2) == pytest.approx([-3.25] * 2)
    with pytest.raises(ValueError, match="completion_ids"):
        reward(["p"], ["a"], min_words=[1], max_words=[2])
    with pytest.raises(ValueError, match="max_tokens"):
        LengthReward(cut="skip")
    with pytest.raises(ValueError, match="cut must be"):
        LengthReward(cut="drop", max_tokens=8)


def test_floor_margin_prices_from_a_raised_floor_in_the_prompts_range_widths():
    # range 40-60 (width 20), margin 0.25: priced from 45 words; the distance in the prompt's widths
    assert length_penalty(43, 40, 60, floor_margin=0.25) == pytest.approx(-0.1)
    assert length_penalty(43, 40, 60, miss=1.0, floor_margin=0.25) == pytest.approx(-1.1)
    assert length_penalty(45, 40, 60, miss=1.0, floor_margin=0.25) == 0.0
    assert length_penalty(61, 40, 60, miss=1.0, floor_margin=0.25) == pytest.approx(-1.05)  # the ceiling as it was
    assert length_penalty(43, 40, 60, miss=1.0) == 0.0  # no margin: inside
    reward = LengthReward(miss=1.0, cut="skip", max_tokens=8, floor_margin=0.25)
    got = reward(
        ["p"] * 3,
        ["w " * 43] * 3,
        min_words=[40, 40, None],
        max_words=[60, 60, None],
        completion_ids=[[1] * 5, [1] * 8, [1] * 5],
    )
    assert got == pytest.approx([-1.1, 0.0, 0.0])  # the cut one and the row without a range pay nothing here
    with pytest.raises(ValueError, match="floor_margin"):
        LengthReward(floor_margin=1.0)
