"""A reward that counts only for stories that ended as asked: inside their word range, or at least not short of it.

    rm = Gate(BTScorer(...), max_tokens=88)                     # gate: in_range
    rm = Gate(BTScorer(...), max_tokens=88, kind="not_short")   # gate: not_short
    rm(prompts, completions, min_words=..., max_words=..., completion_ids=...)   # per completion

Each call is one RL batch. A story the gate keeps has the wrapped reward's value; every other story gets the
batch's lowest value of the wrapped reward instead (over every story of the batch, kept or not: a floor no kept
story is below). Rows without a range are always kept. The gates (a story "ended" with fewer than `max_tokens` ids):

- `in_range` keeps a story that ended inside its row's [min_words, max_words]; one that ended outside the range
  or was cut at the cap is floored.
- `not_short` floors only a story that ended below its row's min_words; one cut at the cap, too long or inside
  keeps its value.

Why: an RM that pays for ending pays a story that stops after two sentences nearly as much as one that ends inside
its range, so a length term added to it leaves stopping short close to ending well, and GRPO finds the short
ending first. `in_range` lets the RM rank only the stories that did what the prompt asked, which leaves no signal
where few stories end inside their range (most of a group ties at the floor); `not_short` takes away exactly the
short ending's pay and leaves the RM's ranking of every other story, cut ones included. The length terms are paid
on top. In a reward spec: `gate: in_range` or `gate: not_short` on any spec (rlcw.rewards.factory). Logged per batch
through TRL's `log_metric`: `gate/<name>/kept` (the share kept).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rlcw.data.records import message_text
from rlcw.metrics.text import count_words
from rlcw.rewards.length import ended_in_range, ended_short

GATES = ("in_range", "not_short")


class Gate:
    """TRL reward callable: the wrapped reward for the stories the gate keeps, the batch's floor for the others
    (module docstring)."""

    def __init__(self, reward: Callable, max_tokens: int, kind: str = "in_range"):
        if kind not in GATES:
            raise ValueError(f"unknown gate {kind!r}; gates: {', '.join(GATES)}")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"gate: {kind} needs the completion cap, max_tokens >= 1; got {max_tokens!r}")
        self.inner, self.max_tokens, self.kind = reward, max_tokens, kind
        self.__name__ = getattr(reward, "__name__", "reward")

    def keeps(self, completion, ids, low: int | None, high: int | None) -> bool:
        words = count_words(message_text(completion))
        if self.kind == "in_range":
            return ended_in_range(words, len(ids), low, high, self.max_tokens)
        return not ended_short(words, len(ids), low, self.max_tokens)

    def __call__(self, prompts, completions, min_words=None, max_words=None, completion_ids=None, **kwargs):
        if completion_ids is None:
            raise ValueError(f"gate: {self.kind} needs completion_ids (TRL passes them to reward functions)")
        values = self.inner(
            prompts, completions, min_words=min_words, max_words=max_words, completion_ids=completion_ids, **kwargs
        )
        n = len(completions)
        lows = min_words if min_words is not None else [None] * n
        highs = max_words if max_words is not None else [None] * n
        keep = [
            self.keeps(c, ids, lo, hi) for c, ids, lo, hi in zip(completions, completion_ids, lows, highs, strict=True)
        ]
        finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        log = kwargs.get("log_metric")
        if log is not None and n:
            log(f"gate/{self.__name__}/kept", sum(keep) / n)
        if not finite:
            return list(values)
        floor = min(finite)
        return [v if k else floor for v, k in zip(values, keep, strict=True)]
