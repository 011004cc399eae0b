"""Preference pairs by controlled corruption of stories (chosen = original chunk).

Stories are cut into chunks of `chunk_sentences` sentences (short texts train fast on CPU);
each chunk is corrupted by every requested kind, with a chunk of a different story as donor
for splices and substitutions. The split is by story, so evaluation pairs come from stories
the RM never saw. With `match_length`, pairs whose word counts differ by more than
`tolerance` (a share of the chosen length, at least one word) are dropped and counted; the kinds whose point is
the length gap (`rlcw.data.corrupt.UNMATCHED`: `stop_early`) are kept unmatched and go to the training split
only, so held-out accuracy stays a figure on length-matched pairs.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field

from rlcw.data.corrupt import UNMATCHED, corrupt
from rlcw.metrics.text import count_words, split_sentences


@dataclass
class PairBuildStats:
    stories: int = 0
    chunks: int = 0
    pairs: int = 0
    dropped: Counter = field(default_factory=Counter)
    per_kind: Counter = field(default_factory=Counter)


def chunk_story(story: str, chunk_sentences: int, max_chunks: int | None = None) -> list[str]:
    """Consecutive, non-overlapping chunks of `chunk_sentences` sentences (a short tail is dropped)."""
    sents = split_sentences(story)
    chunks = [
        " ".join(sents[i : i + chunk_sentences]) for i in range(0, len(sents) - chunk_sentences + 1, chunk_sentences)
    ]
    if not chunks and sents:
        chunks = [" ".join(sents)]
    return chunks[:max_chunks] if max_chunks else chunks


def is_eval_story(story_id: str, eval_fraction: float, seed: int) -> bool:
    """Deterministic split by story id hash (independent of file order)."""
    digest = hashlib.sha256(f"{seed}:{story_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


def length_matched(chosen: str, rejected: str, tolerance: float) -> bool:
    c, r = count_words(chosen), count_words(rejected)
    return abs(c - r) <= max(1, round(tolerance * c))


def build_corruption_pairs(
    stories: list[dict],
    kinds: list[str],
    *,
    chunk_sentences: int = 5,
    max_chunks_per_story: int | None = None,
    match_length: bool = True,
    tolerance: float = 0.05,
    eval_fraction: float = 0.2,
    seed: int = 0,
) -> tuple[list[dict], list[dict], PairBuildStats]:
    """Return (train_pairs, eval_pairs, stats) as preference records with `meta.kind`."""
    rng = random.Random(seed)
    stats = PairBuildStats(stories=len(stories))
    chunked = [(s, chunk_story(s["story"], chunk_sentences, max_chunks_per_story)) for s in stories]
    in_eval = [is_eval_story(str(s["id"]), eval_fraction, seed) for s in stories]
    train, held = [], []
    for index, (story, chunks) in enumerate(chunked):
        # donors (splice/substitute) come from the same split: no eval sentence leaks into training pairs
        donors = [c for j, (_, cs) in enumerate(chunked) if j != index and in_eval[j] == in_eval[index] for c in cs]
        split = held if in_eval[index] else train
        for ci, chunk in enumerate(chunks):
            stats.chunks += 1
            for kind in kinds:
                unmatched = kind in UNMATCHED
                # stop_early takes no donor and no random draw: adding it leaves every other pair as it was
                donor = rng.choice(donors) if donors and not unmatched else ""
                pair = corrupt(kind, chunk, donor, rng, match_length)
                if pair is None:
                    stats.dropped[f"{kind}: text too short"] += 1
                    continue
                chosen, rejected = pair
                if match_length and not unmatched and not length_matched(chosen, rejected, tolerance):
                    stats.dropped[f"{kind}: length not matched"] += 1
                    continue
                if unmatched and split is held:
                    stats.dropped[f"{kind}: eval split (length-matched only)"] += 1
                    continue
                meta = {
                    "kind": kind,
                    "story_id": str(story["id"]),
                    "chunk": ci,
                    "length_matched": match_length and not unmatched,
                }
                split.append(
                    {
                        "prompt": story["prompt"],
                        "chosen": chosen,
                        "rejected": rejected,
                        "source": f"corruption:{kind}",
                        "meta": meta,
                    }
                )
                stats.per_kind[kind] += 1
    stats.pairs = len(train) + len(held)
    rng.shuffle(train)
    return train, held, stats
