"""A reward that counts only for stories that ended inside their asked word range.

    rm = InRangeGate(BTScorer(...), max_tokens=88)
    rm(prompts, completions, min_words=..., max_words=..., completion_ids=...)   # per completion

Each call is one RL batch. A story that ended (fewer than `max_tokens` ids) inside its row's [min_words, max_words]
keeps the wrapped reward's value; a story that ended outside the range, or was cut at the cap, gets the batch's
lowest value of the wrapped reward instead (over every story of the batch, inside or not: a floor no story inside
the range is below). Rows without a range keep their value.

Why: an RM that pays for ending pays a story that stops after two sentences nearly as much as one that ends inside
its range, so a length term added to it leaves stopping short close to ending well, and GRPO finds the short
ending first. Gated, the RM ranks only the stories that did what the prompt asked; every other story is tied at
the floor, whatever it says, and pays the length terms on top. In a reward spec: `gate: in_range` on any spec
(rlcw.rewards.factory). Logged per batch through TRL's `log_metric`: `gate/<name>/inside` (the share kept).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rlcw.data.records import message_text
from rlcw.metrics.text import count_words

GATES = ("in_range",)


def inside_range(completion, ids, low: int | None, high: int | None, max_tokens: int) -> bool:
    """Whether a completion ended (fewer than `max_tokens` ids) with a word count in [low, high]; True for a row
    without a range (nothing to gate on)."""
    if low is None or high is None:
        return True
    return len(ids) < max_tokens and low <= count_words(message_text(completion)) <= high


class InRangeGate:
    """TRL reward callable: the wrapped reward inside the range, the batch's floor outside (module docstring)."""

    def __init__(self, reward: Callable, max_tokens: int):
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"gate: in_range needs the completion cap, max_tokens >= 1; got {max_tokens!r}")
        self.inner, self.max_tokens = reward, max_tokens
        self.__name__ = getattr(reward, "__name__", "reward")

    def __call__(self, prompts, completions, min_words=None, max_words=None, completion_ids=None, **kwargs):
        if completion_ids is None:
            raise ValueError("gate: in_range needs completion_ids (TRL passes them to reward functions)")
        values = self.inner(
            prompts, completions, min_words=min_words, max_words=max_words, completion_ids=completion_ids, **kwargs
        )
        n = len(completions)
        lows = min_words if min_words is not None else [None] * n
        highs = max_words if max_words is not None else [None] * n
        keep = [
            inside_range(c, ids, lo, hi, self.max_tokens)
            for c, ids, lo, hi in zip(completions, completion_ids, lows, highs, strict=True)
        ]
        finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        log = kwargs.get("log_metric")
        if log is not None and n:
            log(f"gate/{self.__name__}/inside", sum(keep) / n)
        if not finite:
            return list(values)
        floor = min(finite)
        return [v if k else floor for v, k in zip(values, keep, strict=True)]
