"""Length-matched human-vs-model pairs (chosen = the human story), for a gold RM (Gao et al. 2022).

Each story record from `rlcw generate data.format=tmas` holds the model's story in `story` and the
human story of the same prompt in `reference`. Both are cut to one word budget,
`min(words(human), words(model), max_words)`: each side ends at its last sentence end at or below
the budget when that keeps at least `(1 - tolerance)` of the budget, else at the budget itself.
Pairs whose budget is under `min_words` are dropped (`too_short`), and pairs whose cut lengths
still differ by more than the corruption pairs' tolerance (`rlcw.data.pairs.length_matched`) are
dropped (`length_mismatch`), so a gold RM cannot learn "longer is human". Cut texts are written
with single spaces (paragraph breaks are not kept on either side: layout would be a free cue).
The train/eval split is by prompt text, so no prompt is on both sides.

    stories = read_model_stories("runs/gen_tmas/samples/stories.jsonl")
    train, held, stats = build_human_pairs(stories, tolerance=0.05, min_words=20, eval_fraction=0.3, seed=0)
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rlcw.data.pairs import is_eval_story, length_matched
from rlcw.data.records import validate_story
from rlcw.errors import RlcwError, location
from rlcw.io import iter_jsonl
from rlcw.metrics.text import count_words, split_sentences

KIND = "human_vs_model"
# a sentence really ends: terminal punctuation, then optional closing quotes/brackets
_ENDS_SENTENCE = re.compile(r"[.!?][\"'\u201d\u2019)\]]*$")


@dataclass
class HumanPairStats:
    stories: int = 0
    pairs: int = 0
    dropped: Counter = field(default_factory=Counter)
    chosen_words: list[int] = field(default_factory=list)
    rejected_words: list[int] = field(default_factory=list)


def read_model_stories(path: str | Path) -> list[dict]:
    """Story records that carry the human story in `reference`; an error names file and line otherwise."""
    out = []
    for line, obj in iter_jsonl(path):
        rec = validate_story(obj, str(path), line)
        if not (rec.get("reference") or "").strip():
            raise RlcwError(
                "story record has no human story in 'reference'",
                where=location(path, line, "reference"),
                hint="generate the model's stories with `rlcw generate data.format=tmas data.source=<TMAS dir> data.split=train`",
            )
        out.append(rec)
    if not out:
        raise RlcwError(
            "no story records", where=str(path), hint="data.stories takes the stories.jsonl of `rlcw generate`"
        )
    return out


def common_budget(human: str, model: str, max_words: int | None = None) -> int:
    """The word budget both sides are cut to: min(words(human), words(model), max_words)."""
    budget = min(count_words(human), count_words(model))
    return min(budget, max_words) if max_words else budget


def cut_to_budget(text: str, budget: int, tolerance: float) -> tuple[str, bool]:
    """(cut text, cut at a sentence end?): the longest prefix of whole sentences within `budget` words
    when it keeps >= (1 - tolerance) x budget words, else the first `budget` words."""
    best = 0
    total = 0
    for sentence in split_sentences(text):
        total += count_words(sentence)
        if total > budget:
            break
        if _ENDS_SENTENCE.search(sentence):
            best = total
    words = text.split()
    if best and best >= (1 - tolerance) * budget:
        return " ".join(words[:best]), True
    return " ".join(words[:budget]), False


def human_vs_model_pair(
    human: str, model: str, *, tolerance: float, min_words: int, max_words: int | None = None
) -> tuple[tuple[str, str] | None, str | None, int]:
    """((chosen, rejected) or None, drop reason or None, the word budget) for one prompt."""
    budget = common_budget(human, model, max_words)
    if budget < min_words:
        return None, "too_short", budget
    chosen, _ = cut_to_budget(human, budget, tolerance)
    rejected, _ = cut_to_budget(model, budget, tolerance)
    if not length_matched(chosen, rejected, tolerance):
        return None, "length_mismatch", budget
    if chosen.strip() == rejected.strip():
        return None, "identical", budget
    return (chosen, rejected), None, budget


def build_human_pairs(
    stories: list[dict],
    *,
    tolerance: float = 0.05,
    min_words: int = 20,
    max_words: int | None = None,
    eval_fraction: float = 0.3,
    seed: int = 0,
) -> tuple[list[dict], list[dict], HumanPairStats]:
    """(train_pairs, eval_pairs, stats): preference records, chosen = human, rejected = the record's model story."""
    stats = HumanPairStats(stories=len(stories))
    train, held = [], []
    for rec in stories:
        pair, reason, budget = human_vs_model_pair(
            rec["reference"], rec["story"], tolerance=tolerance, min_words=min_words, max_words=max_words
        )
        if pair is None:
            stats.dropped[reason] += 1
            continue
        chosen, rejected = pair
        stats.chosen_words.append(count_words(chosen))
        stats.rejected_words.append(count_words(rejected))
        meta = {
            "kind": KIND,
            "story_id": rec["id"],
            "chosen_system": "human",
            "rejected_system": rec["system"],
            "budget": budget,
            "chosen_words": stats.chosen_words[-1],
            "rejected_words": stats.rejected_words[-1],
        }
        split = held if is_eval_story(rec["prompt"], eval_fraction, seed) else train
        split.append(
            {
                "prompt": rec["prompt"],
                "chosen": chosen,
                "rejected": rejected,
                "source": f"{KIND}:{rec['system']}",
                "meta": meta,
            }
        )
    stats.pairs = len(train) + len(held)
    random.Random(seed).shuffle(train)
    return train, held, stats
