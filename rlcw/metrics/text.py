"""Text statistics every stage shares: words, sentences, n-gram repetition and diversity, and whether a text is
prose at all (`is_junk`).

Word = whitespace-separated token (what `len(text.split())` counts), so "word ranges" in
prompts, length rewards, reports and monitors all agree.
"""

from __future__ import annotations

import re
from collections import Counter

_SENT_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_WORD = re.compile(r"[a-z0-9']+")


def count_words(text: str) -> int:
    """Number of whitespace-separated words."""
    return len(text.split())


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences on ., ! or ? followed by space and a capital (quotes kept)."""
    text = " ".join(text.split())
    if not text:
        return []
    parts, start = [], 0
    for m in _SENT_END.finditer(text):
        parts.append(text[start : m.start() + len(m.group(0).rstrip())].strip())
        start = m.end()
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens without punctuation (for n-gram statistics)."""
    return _WORD.findall(text.lower())


def ngrams(toks: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]


def repetition_rate(text: str, n: int = 3) -> float:
    """Share of n-grams in one text that repeat an earlier n-gram of the same text (0..1)."""
    grams = ngrams(tokens(text), n)
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def distinct_n(texts: list[str], n: int = 3) -> float:
    """Unique n-grams / all n-grams pooled over several texts (1 = no n-gram shared or repeated)."""
    counts: Counter = Counter()
    for t in texts:
        counts.update(ngrams(tokens(t), n))
    total = sum(counts.values())
    return len(counts) / total if total else 0.0


def is_junk(text: str) -> bool:
    """No prose: fewer letters than other visible characters, or nothing visible (a policy that collapsed into
    bracket or symbol runs such as "[[[[..." or "# \\n[ \\n[ ..."; prose in any alphabet is ~95% letters).

    is_junk("[[[[[[[[")  # -> True        is_junk("She left at dawn.")  # -> False"""
    visible = [c for c in text if not c.isspace()]
    return sum(c.isalpha() for c in visible) * 2 < len(visible) or not visible
