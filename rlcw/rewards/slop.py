"""The slop score as a reward term: `reward.specs.slop = {type: slop, weight: -0.1}`.

    r = SlopReward(human="bundled")              # fingerprint refitted on every batch (default)
    r = SlopReward(phrases="my_slop_list.txt")   # a fixed list: one phrase a line, or a JSON list
    r(prompts, completions)                      # -> per-story slop score (% of words in over-used phrases)

The value is `rlcw.metrics.slop.slop_score`: the percentage of a story's words inside over-represented phrases.
Higher is sloppier, so the term's **weight is negative by convention** (the factory takes the weight
as given; a positive weight would pay for slop). Without `phrases`, the phrases are the batch's
own fingerprint against the human baseline: n-grams written at least `min_count` times across at
least `min_docs` different prompts of the batch (the completions of one prompt count as one
document, so a story's own topic words are not slop), top `top_k` by smoothed frequency ratio.
That target moves with the policy (it penalises whatever the batch over-uses now); a fixed list
is stationary. `human`: 'bundled' (the human stories rlcw ships) or any jsonl of story records.
The batch's mean score and fingerprint size are logged through TRL's `log_metric` as
`slop/score` and `slop/phrases`.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlcw.data.records import message_text
from rlcw.errors import RlcwError
from rlcw.metrics.slop import ORDERS, SlopBaseline


def load_human_texts(path: str = "bundled") -> list[str]:
    """The `story` texts of a jsonl of story records ('bundled' = the human stories rlcw ships)."""
    from rlcw.data.bundled import resolve_data_path
    from rlcw.data.records import read_stories

    return [r["story"] for r in read_stories(resolve_data_path(path, "stories.jsonl"))]


def human_baseline(path: str | None) -> SlopBaseline | None:
    """The slop monitor's baseline over the human stories at `path` ('bundled' = rlcw's own; None = off)."""
    return SlopBaseline(load_human_texts(path)) if path else None


def load_phrases(path: str | Path) -> list[str]:
    """Phrases from a JSON list of strings or a text file with one phrase a line (blank lines skipped)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RlcwError(f"cannot read the phrase list: {exc.strerror}", where=str(path)) from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RlcwError(f"not JSON: {exc}", where=str(path), hint='a JSON list, e.g. ["a testament to"]') from None
        if not isinstance(data, list) or not all(isinstance(p, str) and p.strip() for p in data):
            raise RlcwError("expected a JSON list of non-empty strings", where=str(path))
        phrases = data
    else:
        phrases = [line for line in text.splitlines() if line.strip()]
    if not phrases:
        raise RlcwError("the phrase list is empty", where=str(path))
    return [" ".join(p.lower().split()) for p in phrases]


class SlopReward:
    """TRL reward callable: the slop score of each completion (give it a negative weight)."""

    def __init__(
        self,
        human: str = "bundled",
        phrases: str | None = None,
        orders: list[int] | tuple[int, ...] = ORDERS,
        top_k: int = 20,
        min_count: int = 3,
        min_docs: int = 2,
        alpha: float = 1.0,
    ):
        if not orders or any(int(n) < 1 for n in orders):
            raise ValueError(f"orders must be positive n-gram orders, not {orders!r}")
        self.baseline = SlopBaseline(
            load_human_texts(human),
            orders=[int(n) for n in orders],
            top_k=top_k,
            min_count=min_count,
            min_docs=min_docs,
            alpha=alpha,
        )
        self.phrases = load_phrases(phrases) if phrases else None
        self.__name__ = "slop"

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        texts = [message_text(c) for c in completions]
        groups = [message_text(p) for p in prompts]
        phrases = self.phrases
        if phrases is None:
            phrases = [p.text for p in self.baseline.fingerprint(texts, groups)]
        scores = self.baseline.scores(texts, phrases=phrases)
        log = kwargs.get("log_metric")
        if log is not None and scores:
            log("slop/score", sum(scores) / len(scores))
            log("slop/phrases", float(len(phrases)))
        return scores
