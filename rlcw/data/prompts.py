"""RL / evaluation prompts: loading, and the word range a prompt states.

A prompt row is `{"id", "prompt", "min_words", "max_words", "source", "style", "split"}`.
Sources: "bundled" (rlcw/data/bundled/prompts.jsonl) or a jsonl/csv/parquet file with at
least `id` and `prompt` (other names mapped by `fields`). When a row has no range, the
range is parsed from the prompt text by `parse_word_range` ("between 1,300 and 1,350 words",
"about 950 words" -> +-10%, "under 850 words", "word count should be at least 900").
"""

from __future__ import annotations

import re
from pathlib import Path

from rlcw.data.bundled import resolve_data_path
from rlcw.errors import RlcwError, location
from rlcw.io import read_table

_NUM = r"(\d{1,3}(?:[,.]\d{3})+|\d+)"  # "1,300", "1300"; "1.250" (a typo in TMAS) reads as 1250
_WORDS = r"\s*-?\s*words?\b"
_COUNT = re.compile(r"\bword[\s-]*(?:count|limit)|\bwordcount", re.IGNORECASE)
_MAX = r"(?:under|below|no more than|not more than|not exceed|at most|less than|fewer than|up to|maximum of)"
_MIN = r"(?:at least|over|more than|no less than|no fewer than|minimum of)"
_ABOUT_WORDS = r"(?:about|around|approximately|roughly|~)"


def _int(text: str) -> int:
    return int(text.replace(",", "").replace(".", ""))


def _word_patterns(suffix: str) -> list[tuple[str, re.Pattern]]:
    return [
        ("range", re.compile(rf"{_NUM}(?:{_WORDS})?\s*(?:-|\u2013|\u2014|to|and)\s*{_NUM}{suffix}", re.IGNORECASE)),
        ("max", re.compile(rf"{_MAX}\s+{_NUM}{suffix}", re.IGNORECASE)),
        ("min", re.compile(rf"{_MIN}\s+{_NUM}{suffix}", re.IGNORECASE)),
        ("about", re.compile(rf"{_ABOUT_WORDS}\s*{_NUM}{suffix}", re.IGNORECASE)),
        ("exact", re.compile(rf"{_NUM}{suffix}", re.IGNORECASE)),
    ]


_STRICT = _word_patterns(_WORDS)  # the number must be followed by "word(s)"
_LOOSE = _word_patterns(f"(?:{_WORDS})?")  # in a sentence about the word count, "words" may be left out


def _bounds(kind: str, m: re.Match, approx: float) -> tuple[int, int]:
    n = _int(m.group(1))
    if kind == "range":
        lo, hi = sorted((n, _int(m.group(2))))
        return lo, hi
    if kind == "max":  # one-sided: close the open side with a band as wide as an "about N" range
        return round(n * (1 - 2 * approx)), n
    if kind == "min":
        return n, round(n * (1 + 2 * approx))
    return round(n * (1 - approx)), round(n * (1 + approx))


def parse_word_range(prompt: str, approx: float = 0.1) -> tuple[int, int] | None:
    """(min_words, max_words) a prompt states, or None.

    Forms (first sentence that states a length wins): "between 1,300 and 1,350 words",
    "1,400-1,500 words", "a 1,000 word story" / "about 950 words" -> N +- approx,
    "no more than / under N words" -> (N*(1-2*approx), N), "at least / over N words" ->
    (N, N*(1+2*approx)). In a sentence naming the "word count" or "word limit" the
    trailing "words" may be missing ("Keep the word count under 850.").
    """
    for sentence in re.split(r"(?<=[.!?])\s+", prompt):
        patterns = _LOOSE if _COUNT.search(sentence) else _STRICT
        for kind, pattern in patterns:
            m = pattern.search(sentence)
            if m:
                return _bounds(kind, m, approx)
    return None


def load_prompts(
    source: str = "bundled", split: str | None = None, fields: dict[str, str] | None = None
) -> list[dict]:
    """Prompt rows from the bundled set or a file, optionally only one `split` ("train"/"eval")."""
    path = resolve_data_path(source, "prompts.jsonl")
    names = {"id": "id", "prompt": "prompt", **(fields or {})}
    out = []
    for line, row in read_table(path):
        for key in ("id", "prompt"):
            if row.get(names[key]) in (None, ""):
                raise RlcwError(
                    "missing or empty field",
                    where=location(path, line, names[key]),
                    hint="map your names with data.prompt_fields",
                )
        if not isinstance(row[names["prompt"]], str):
            raise RlcwError("expected text", where=location(path, line, names["prompt"]))
        meta = row.get("meta") or {}
        stated = parse_word_range(row[names["prompt"]])
        lo, hi = row.get("min_words"), row.get("max_words")
        if lo is None and hi is None and stated:
            lo, hi = stated
        item = {
            "id": str(row[names["id"]]),
            "prompt": row[names["prompt"]],
            "min_words": lo,
            "max_words": hi,
            "source": row.get("source") or Path(path).stem,
            "style": meta.get("style") or row.get("style") or "unknown",
            "split": meta.get("split") or row.get("split"),
        }
        if split is None or item["split"] in (split, None):
            out.append(item)
    if not out:
        raise RlcwError(f"no prompts{' for split ' + repr(split) if split else ''}", where=str(path))
    return out


# --- mixing sources and keeping RL prompts apart from evaluation / RM data (owner: the grpo stage) ---


def prompt_hash(text: str) -> str:
    """Content hash of a prompt: sha256 of its lower-cased words joined by single spaces (16 hex digits)."""
    import hashlib

    return hashlib.sha256(" ".join(text.lower().split()).encode("utf-8")).hexdigest()[:16]


def find_overlap(train_rows: list[dict], others: dict[str, list[dict]]) -> list[tuple[str, str, str]]:
    """(train prompt id, other set's name, other row id) for every train prompt whose hash occurs in another set."""
    seen: dict[str, tuple[str, str]] = {}
    for name, rows in others.items():
        for row in rows:
            seen.setdefault(prompt_hash(row["prompt"]), (name, str(row.get("id", "?"))))
    return [(str(r["id"]), *seen[h]) for r in train_rows if (h := prompt_hash(r["prompt"])) in seen]


def mix_sources(pools: dict[str, list[dict]], weights: dict[str, float], total: int, seed: int = 0) -> list[dict]:
    """`total` rows drawn from named pools in proportion to `weights` (largest remainder rounding).

    Each pool is shuffled once (seeded) and cycled when it must give more rows than it has."""
    import random

    wsum = sum(weights[name] for name in pools)
    if wsum <= 0:
        raise RlcwError("prompt source weights must sum to more than 0", where="data.sources")
    exact = {name: total * weights[name] / wsum for name in pools}
    counts = {name: int(v) for name, v in exact.items()}
    for name in sorted(pools, key=lambda n: exact[n] - counts[n], reverse=True)[: total - sum(counts.values())]:
        counts[name] += 1
    rng = random.Random(seed)
    out = []
    for name, rows in pools.items():
        order = rows[:]
        rng.shuffle(order)
        out += [order[i % len(order)] for i in range(counts[name])] if order else []
    return out
