"""RL / evaluation prompts: loading, and the word range a prompt states.

A prompt row is `{"id", "prompt", "min_words", "max_words", "source", "style", "split"}`.
Sources: "bundled" (rlcw/data/bundled/prompts.jsonl) or a jsonl/csv/parquet file with at
least `id` and `prompt` (other names mapped by `fields`). When a row has no range, the
range is parsed from the prompt text ("between 1,300 and 1,350 words", "of 40 to 60
words", "about 950 words" -> +-10%).
"""

from __future__ import annotations

import re
from pathlib import Path

from rlcw.data.bundled import resolve_data_path
from rlcw.errors import RlcwError, location
from rlcw.io import read_table

_NUM = r"(\d{1,3}(?:,\d{3})+|\d+)"
_RANGE = re.compile(rf"{_NUM}\s*(?:-|–|to|and)\s*{_NUM}\s*words?", re.IGNORECASE)
_ABOUT = re.compile(rf"(?:about|around|approximately|roughly|~)\s*{_NUM}\s*words?", re.IGNORECASE)
_EXACT = re.compile(rf"{_NUM}\s*words?", re.IGNORECASE)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_word_range(prompt: str, approx: float = 0.1) -> tuple[int, int] | None:
    """(min_words, max_words) stated by a prompt, or None. 'about N' / 'N words' -> N +- approx."""
    m = _RANGE.search(prompt)
    if m:
        lo, hi = sorted((_int(m.group(1)), _int(m.group(2))))
        return lo, hi
    m = _ABOUT.search(prompt) or _EXACT.search(prompt)
    if m:
        n = _int(m.group(1))
        return round(n * (1 - approx)), round(n * (1 + approx))
    return None


def load_prompts(source: str = "bundled", split: str | None = None, fields: dict[str, str] | None = None) -> list[dict]:
    """Prompt rows from the bundled set or a file, optionally only one `split` ("train"/"eval")."""
    path = resolve_data_path(source, "prompts.jsonl")
    names = {"id": "id", "prompt": "prompt", **(fields or {})}
    out = []
    for line, row in read_table(path):
        for key in ("id", "prompt"):
            if row.get(names[key]) in (None, ""):
                raise RlcwError("missing or empty field", where=location(path, line, names[key]), hint="map your names with data.prompt_fields")
        if not isinstance(row[names["prompt"]], str):
            raise RlcwError("expected text", where=location(path, line, names["prompt"]))
        meta = row.get("meta") or {}
        stated = parse_word_range(row[names["prompt"]])
        lo, hi = row.get("min_words"), row.get("max_words")
        if lo is None and hi is None and stated:
            lo, hi = stated
        item = {
            "id": str(row[names["id"]]), "prompt": row[names["prompt"]], "min_words": lo, "max_words": hi,
            "source": row.get("source") or Path(path).stem, "style": meta.get("style") or row.get("style") or "unknown",
            "split": meta.get("split") or row.get("split"),
        }
        if split is None or item["split"] in (split, None):
            out.append(item)
    if not out:
        raise RlcwError(f"no prompts{' for split ' + repr(split) if split else ''}", where=str(path))
    return out
