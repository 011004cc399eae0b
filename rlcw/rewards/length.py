"""Length terms: a penalty for leaving the word range the prompt states.

    length_penalty(words=35, min_words=40, max_words=60)  # -> -0.25: 5 words short / range 20

Zero inside the range; outside, minus the distance normalised by the range width (so a
group of completions gets a graded signal), clipped at -clip. Rows without a range get 0.
"""

from __future__ import annotations

from rlcw.metrics.text import count_words
from rlcw.rewards.bt import message_text


def length_penalty(words: int, min_words: int | None, max_words: int | None, clip: float = 2.0) -> float:
    if min_words is None or max_words is None:
        return 0.0
    width = max(1, max_words - min_words)
    if words < min_words:
        dist = min_words - words
    elif words > max_words:
        dist = words - max_words
    else:
        return 0.0
    return -min(clip, dist / width)


class LengthReward:
    """TRL reward function: `length_penalty` of each completion against its row's range."""

    __name__ = "length_range"

    def __init__(self, clip: float = 2.0):
        self.clip = clip

    def __call__(self, prompts, completions, min_words=None, max_words=None, **kwargs) -> list[float]:
        n = len(completions)
        lows = min_words if min_words is not None else [None] * n
        highs = max_words if max_words is not None else [None] * n
        return [length_penalty(count_words(message_text(c)), lo, hi, self.clip) for c, lo, hi in zip(completions, lows, highs)]
