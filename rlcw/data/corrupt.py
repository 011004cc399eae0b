"""Controlled corruptions of a story, for preference pairs (original = chosen, corrupted = rejected).

After the UNION story-evaluation work (Guan & Huang, 2020): sentence shuffling, incoherent
splices, word substitution, repetition and truncation. With `match_length=True` every
corruption keeps the word count within `tolerance` of the original, so a reward model cannot
win by measuring length, and `corrupt` closes a corrupted text the way the original closes
(`match_ending`), so it cannot win by looking at the last character either: length-matched
splices and repeats stop at a word count, mid-sentence, and an RM trained on them learned
"a story that stops mid-sentence is the worse one" (58% of the quickstart's pairs carried that
cue), which it then paid GRPO ~2 RM units for ending at any length. `truncate` is the
one kind whose point is the unfinished ending. `stop_early` is the one kind that is never length-matched: the
rejected side is the chunk's first sentences, ended cleanly, so an RM learns that a story which stops after a
sentence or two is worse than the whole one (a policy otherwise collects the RM's ending bonus by ending early;
the pair builder keeps these pairs out of the eval split, so held-out accuracy stays a length-matched figure).
All functions are pure given the `random.Random` passed in; each
returns the corrupted text or None when the text is too short for that corruption.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from rlcw.metrics.text import count_words, split_sentences

CORRUPTIONS = ("shuffle", "splice", "substitute", "repeat", "truncate", "stop_early")
UNMATCHED = frozenset({"stop_early"})  # kinds whose point is the length gap: never length-matched


def _join(sents: list[str]) -> str:
    return " ".join(sents)


def _cycle_words(text: str, n: int) -> list[str]:
    """The first n words of `text` repeated as often as needed."""
    words = text.split()
    return (words * (n // len(words) + 1))[:n] if words and n > 0 else []


def shuffle(text: str, other: str, rng: random.Random, match_length: bool) -> str | None:
    """Permute the sentences (never the identity); keeps length exactly."""
    sents = split_sentences(text)
    if len(sents) < 3:
        return None
    order = list(range(len(sents)))
    while order == sorted(order):
        rng.shuffle(order)
    return _join([sents[i] for i in order])


def splice(text: str, other: str, rng: random.Random, match_length: bool) -> str | None:
    """Replace the second half of the sentences with sentences from another story."""
    sents, donor = split_sentences(text), split_sentences(other)
    if len(sents) < 2 or len(donor) < 2:
        return None
    keep = len(sents) // 2
    head = sents[:keep]
    start = rng.randrange(len(donor))
    tail = donor[start:] + donor[:start]
    if not match_length:
        return _join(head + tail[: len(sents) - keep])
    need = count_words(text) - count_words(_join(head))
    return _join(head) + " " + " ".join(_cycle_words(_join(tail), need))


def substitute(text: str, other: str, rng: random.Random, match_length: bool, rate: float = 0.3) -> str | None:
    """Replace a share of the words by words drawn from another story (same count of words)."""
    words, pool = text.split(), other.split()
    if len(words) < 5 or not pool:
        return None
    k = max(1, round(rate * len(words)))
    for i in rng.sample(range(len(words)), k):
        words[i] = rng.choice(pool)
    return " ".join(words)


def repeat(text: str, other: str, rng: random.Random, match_length: bool) -> str | None:
    """Repeat earlier sentences; length-matched, the repeats replace the later sentences."""
    sents = split_sentences(text)
    if len(sents) < 3:
        return None
    keep = max(1, len(sents) // 2)
    head = sents[:keep]
    if not match_length:
        return _join(sents + head)
    return " ".join(_cycle_words(_join(head), count_words(text)))


def truncate(text: str, other: str, rng: random.Random, match_length: bool) -> str | None:
    """End abruptly mid-sentence. Length-matched: the chosen side is cut to the same length by
    the pair builder (`truncate_pair`); here the unmatched form keeps 40-70% of the words."""
    words = text.split()
    if len(words) < 10:
        return None
    cut = max(3, round(len(words) * rng.uniform(0.4, 0.7)))
    out = " ".join(words[:cut]).rstrip(".!?\"'\u201d")
    return out


def truncate_pair(text: str, rng: random.Random) -> tuple[str, str] | None:
    """Length-matched truncation: (clean text ending on sentence i, same-length abrupt cut).

    rejected = the same sentences up to i-1, then as many words as sentence i has, taken from
    the start of the longer sentence i+1, so it stops mid-sentence with no closing mark.
    """
    sents = split_sentences(text)
    spots = [i for i in range(1, len(sents) - 1) if count_words(sents[i + 1]) > count_words(sents[i]) + 1]
    if not spots:
        return None
    i = rng.choice(spots[len(spots) // 2 :])  # prefer late cuts: most of the story survives
    chosen = _join(sents[: i + 1])
    cut = sents[i + 1].split()[: count_words(sents[i])]
    rejected = (_join(sents[:i]) + " " + " ".join(cut)).rstrip(".!?,;:\"'\u201d")
    return chosen, rejected


def stop_early(text: str, other: str, rng: random.Random, match_length: bool, keep: float = 0.5) -> str | None:
    """The longest run of whole first sentences with at most `keep` of the words (at least one sentence, fewer
    than all): the story stopped early but ended cleanly. None when even the first sentence is longer."""
    sents = split_sentences(text)
    total, words, out = count_words(text), 0, []
    for sent in sents[:-1]:
        words += count_words(sent)
        if words > keep * total:
            break
        out.append(sent)
    return _join(out) if out else None


_CLOSERS = "\"'\u201d\u2019)]"


def ending(text: str) -> str:
    """The sentence-final mark a text closes with ("." of 'He left.' and of '"Go."'), or "" if it stops mid-sentence."""
    tail = text.rstrip().rstrip(_CLOSERS)
    return tail[-1] if tail and tail[-1] in ".!?" else ""


def match_ending(original: str, corrupted: str) -> str:
    """`corrupted`, closed with the original's sentence-final mark when the original ends a sentence and it does not.

    match_ending("He left.", "He left the")   # -> "He left the."   (word count unchanged)
    """
    mark = ending(original)
    if not mark or ending(corrupted):
        return corrupted
    return corrupted.rstrip().rstrip(",;:-\u2014 ") + mark


FUNCS: dict[str, Callable[..., str | None]] = {
    "shuffle": shuffle,
    "splice": splice,
    "substitute": substitute,
    "repeat": repeat,
    "truncate": truncate,
    "stop_early": stop_early,
}


def corrupt(kind: str, text: str, other: str, rng: random.Random, match_length: bool) -> tuple[str, str] | None:
    """Return (chosen, rejected) for one corruption kind, or None if the text is too short; the rejected side
    closes like the chosen one (`match_ending`) for every kind but `truncate`."""
    if kind not in FUNCS:
        raise ValueError(f"unknown corruption '{kind}'; choose from {', '.join(CORRUPTIONS)}")
    if kind == "truncate" and match_length:
        return truncate_pair(text, rng)
    bad = FUNCS[kind](text, other, rng, match_length)
    if bad is not None and kind != "truncate":
        bad = match_ending(text, bad)
    if bad is None or bad == text:
        return None
    return text, bad
