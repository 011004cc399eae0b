"""Length terms for RL rewards: the prompt's word range and a soft overlong penalty.

    length_penalty(words=35, min_words=40, max_words=60)            # -> -0.25: 5 words short / range 20
    length_penalty(35, 40, 60, miss=1.0)                            # -> -1.25: a miss costs 1 + the distance
    length_penalty(43, 40, 60, floor_margin=0.25)                   # -> -0.1: priced from 45, 2 words short / 20
    overlong_penalty(tokens=90, max_tokens=100, buffer=20)          # -> -0.5: 10 tokens into the last 20
    LengthReward(clip=2.0), OverlongReward(max_tokens=96, buffer=24)  # TRL reward callables
    EndedShortCost(max_tokens=96)                                   # 1 for a story that ended below its range
    ended_short(words=20, n_ids=30, low=40, max_tokens=96)          # -> True: ended (30 < 96 ids), 20 < 40 words

Both are combinable (give both to `rlcw.rewards.factory.build_rewards` with their weights); the
third control, the length-controlled RM score, lives in the RM scorer
(`rlcw.rm.scoring.load_rm(rm_dir, length_control=True)`, option `length_control` of a `bt` reward spec).

- Word range: zero inside the range; outside, minus `miss` (a flat price for leaving the range)
  minus the distance normalised by the range width (a group of completions that all miss the
  range still gets a graded signal), the distance part clipped at `clip`. Why `miss`: the
  distance alone is small where it matters (a 23-word story against 30-60 costs 0.23) while a
  BT RM can pay ~1-2 of its units for a story that ends (the quickstart RM: 1.82 when its pairs
  still told chosen from rejected by the ending, 0.80 after `rlcw.data.corrupt.match_ending`),
  so with miss=0 GRPO collects the RM's ending bonus by writing one-liners. `miss` is in reward units: with weight 1 and miss 1 a story
  outside the range loses at least one RM unit (the quickstart reports its RM's ended-minus-cut
  gap on held-out samples, `heldout/rm_gap_ended_minus_cut`, to compare). Rows without a range get 0. A range that no completion can reach under the completion
  cap gives every completion the same penalty: `range_fits_cap` is what recipes check.
- Floor margin: `floor_margin` raises the floor the term prices by that fraction of the range width (0.25 on 40-60
  prices from 45 words), the distance still in the prompt's range widths; what the held-out measurement calls in
  range or too short stays the prompt's own range. Meant for a policy whose misses fall a few words below the
  priced floor: with a margin they land inside the asked range (in the quickstart its misses spread further on
  some seeds: docs/results/quickstart.md).
- Overlong (DAPO's soft overlong punishment): zero up to `max_tokens - buffer` tokens, then
  falling linearly to -1 at the cap, so completions learn to finish before truncation.
"""

from __future__ import annotations

from rlcw.data.records import message_text
from rlcw.metrics.text import count_words


def ended_short(words: int, n_ids: int, low: int | None, max_tokens: int) -> bool:
    """Whether a completion of `n_ids` ids ended (fewer than the cap `max_tokens`) with fewer words than `low`;
    False for a row without a range."""
    return n_ids < max_tokens and low is not None and words < low


def ended_in_range(words: int, n_ids: int, low: int | None, high: int | None, max_tokens: int) -> bool:
    """Whether a completion ended (fewer ids than the cap) with a word count in [low, high]; True for a row without
    a range (nothing to miss)."""
    if low is None or high is None:
        return True
    return n_ids < max_tokens and low <= words <= high


def length_penalty(
    words: int,
    min_words: int | None,
    max_words: int | None,
    clip: float = 2.0,
    miss: float = 0.0,
    floor_margin: float = 0.0,
) -> float:
    """Minus (`miss` + the distance to [min_words + floor_margin x width, max_words] in range widths, clipped at
    `clip`); 0 inside."""
    if min_words is None or max_words is None:
        return 0.0
    width = max(1, max_words - min_words)
    floor = min_words + floor_margin * width
    if words < floor:
        dist = floor - words
    elif words > max_words:
        dist = words - max_words
    else:
        return 0.0
    return -(miss + min(clip, dist / width))


def overlong_penalty(tokens: int, max_tokens: int, buffer: int) -> float:
    """0 up to `max_tokens - buffer`, then linear down to -1 at `max_tokens` (and -1 beyond)."""
    if buffer <= 0 or buffer > max_tokens:
        raise ValueError(f"buffer must be in 1..max_tokens ({max_tokens}), got {buffer}")
    free = max_tokens - buffer
    if tokens <= free:
        return 0.0
    return -min(1.0, (tokens - free) / buffer)


def range_fits_cap(max_words: int | None, max_tokens: int, tokens_per_word: float = 1.4) -> bool:
    """Whether a story of `max_words` words fits in `max_tokens` completion tokens
    (prose is ~1.3-1.4 SmolLM2/Llama tokens per word; no range -> fits)."""
    return max_words is None or max_words * tokens_per_word <= max_tokens


class LengthReward:
    """TRL reward function: `length_penalty` of each completion against its row's range.

    cut="words" judges a completion cut at the cap by its word count like any other; cut="skip" gives
    it 0 (its true length is unknown: the `overlong` term prices not ending), so the range term only
    judges stories that ended, and `miss` can be set above the RM's ending bonus plus the overlong
    price to make ending outside the range cost more than being cut (see the module docstring). A
    completion of `max_tokens` ids (filled by the recipe from the completion cap) counts as cut."""

    __name__ = "length_range"

    def __init__(
        self,
        clip: float = 2.0,
        miss: float = 0.0,
        cut: str = "words",
        max_tokens: int | None = None,
        floor_margin: float = 0.0,
    ):
        if clip < 0 or miss < 0:
            raise ValueError(f"clip and miss must be >= 0, got clip={clip}, miss={miss}")
        if not 0 <= floor_margin < 1:
            raise ValueError(f"floor_margin is a fraction of the range width in [0, 1), got {floor_margin}")
        if cut not in ("words", "skip"):
            raise ValueError(f"cut must be 'words' or 'skip', got {cut!r}")
        if cut == "skip" and not max_tokens:
            raise ValueError("cut='skip' needs max_tokens (the completion cap) to tell a cut completion")
        self.clip, self.miss, self.cut, self.max_tokens, self.floor_margin = clip, miss, cut, max_tokens, floor_margin

    def __call__(
        self, prompts, completions, min_words=None, max_words=None, completion_ids=None, **kwargs
    ) -> list[float]:
        n = len(completions)
        lows = min_words if min_words is not None else [None] * n
        highs = max_words if max_words is not None else [None] * n
        if self.cut == "skip" and completion_ids is None:
            raise ValueError("length_range with cut='skip' needs completion_ids (TRL passes them to reward functions)")
        cut = [len(ids) >= self.max_tokens for ids in completion_ids] if self.cut == "skip" else [False] * n
        return [
            0.0
            if is_cut
            else length_penalty(count_words(message_text(c)), lo, hi, self.clip, self.miss, self.floor_margin)
            for c, lo, hi, is_cut in zip(completions, lows, highs, cut, strict=False)
        ]


class OverlongReward:
    """TRL reward function: `overlong_penalty` on the completion's token count (`completion_ids`)."""

    __name__ = "overlong"

    def __init__(self, max_tokens: int, buffer: int | None = None):
        self.max_tokens = max_tokens
        self.buffer = buffer if buffer is not None else max(1, max_tokens // 4)
        overlong_penalty(0, self.max_tokens, self.buffer)  # validate now, not at step 1

    def __call__(self, prompts, completions, completion_ids=None, **kwargs) -> list[float]:
        if completion_ids is None:
            raise ValueError("overlong reward needs completion_ids (TRL passes them to reward functions)")
        return [overlong_penalty(len(ids), self.max_tokens, self.buffer) for ids in completion_ids]


class EndedShortCost:
    """TRL reward function (a cost): 1.0 for a completion that ended (fewer than `max_tokens` ids) below its row's
    word range, else 0.0 (rows without a range: 0.0). As a plain reward it takes a negative weight; its use is as
    a constraint: `{type: ended_short, constrain: {limit: start}}` (rlcw.rewards.constrained)."""

    __name__ = "ended_short"

    def __init__(self, max_tokens: int):
        if not max_tokens or max_tokens < 1:
            raise ValueError(f"ended_short needs max_tokens (the completion cap) >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens

    def __call__(self, prompts, completions, min_words=None, completion_ids=None, **kwargs) -> list[float]:
        if completion_ids is None:
            raise ValueError("ended_short needs completion_ids (TRL passes them to reward functions)")
        lows = min_words if min_words is not None else [None] * len(completions)
        return [
            float(ended_short(count_words(message_text(c)), len(ids), lo, self.max_tokens))
            for c, lo, ids in zip(completions, lows, completion_ids, strict=True)
        ]
