"""RL / evaluation prompts: loading, and the word range a prompt states.

A prompt row is `{"id", "prompt", "min_words", "max_words", "source", "style", "split"}`.
Sources: "bundled" (rlcw/data/bundled/prompts.jsonl) or a jsonl/csv/parquet file with at
least `id` and `prompt` (other names mapped by `fields`). When a row has no range, the
range is parsed from the prompt text by `parse_word_range` ("between 1,300 and 1,350 words",
"about 950 words" -> +-10%, "under 850 words", "word count should be at least 900").

Any other prompt set (`style: column` in `data.sources`): `load_prompt_column` reads one column
of a jsonl/json/csv/parquet file or of any Hugging Face dataset (hub id or saved folder). A cell
is a plain string or a conversation (a list of {"role", "content"} messages, as TRL's
conversational prompts); a conversation is kept in `messages` and its last user turn is the
row's `prompt` (what hashing, word ranges and reports read).

    rows = load_prompt_column("my_prompts.jsonl")                              # column "prompt"
    rows = load_prompt_column("org/dataset", column="question", hf_split="train")
    rows = source_rows({"style": "column", "prompts": "p.jsonl", "column": "prompt"}, "bundled", "train")
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlcw.data.bundled import resolve_data_path
from rlcw.errors import RlcwError, location
from rlcw.io import check_unique, read_table

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
    table = read_table(path)
    check_unique(((line, row.get(names["id"])) for line, row in table), path, names["id"])
    for line, row in table:
        for key in ("id", "prompt"):
            if row.get(names[key]) in (None, ""):
                raise RlcwError(
                    "missing or empty field",
                    where=location(path, line, names[key]),
                    hint="map your names with data.prompt_fields",
                )
        if not isinstance(row[names["prompt"]], str):
            raise RlcwError("expected text", where=location(path, line, names["prompt"]))
        meta = _meta(row)
        stated = parse_word_range(row[names["prompt"]])
        lo, hi = (_word_cell(row.get(key), location(path, line, key)) for key in ("min_words", "max_words"))
        if lo is not None and hi is not None and lo > hi:
            raise RlcwError(f"min_words {lo} is larger than max_words {hi}", where=location(path, line, "min_words"))
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
        found = sorted({str(_meta(r).get("split") or r.get("split")) for _, r in table} - {"None"})
        raise RlcwError(
            f"no prompts{' for split ' + repr(split) if split else ''}",
            where=str(path),
            hint=f"the file's splits: {', '.join(found)}" if found else "the file's rows have no split",
        )
    return out


def _meta(row: dict) -> dict:
    return row["meta"] if isinstance(row.get("meta"), dict) else {}


def _word_cell(value: Any, where: str) -> int | None:
    """A `min_words`/`max_words` cell as a number of words: a CSV cell's digits ("300") are read, a blank (or a
    parquet NaN) is unset; anything else is an error naming the file, row and field."""
    if (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (isinstance(value, float) and value != value)
    ):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise RlcwError(
        f"expected a whole number of words, got {value!r}",
        where=where,
        hint="write it as a number (e.g. 300), or leave it out to read the range from the prompt's text",
    )


# --- any prompt column (style: column) --------------------------------------------------------

COLUMN_OPTIONS = ("prompts", "style", "weight", "split", "column", "id_column", "hf_split")


def _messages(value: list, where: str) -> list[dict[str, str]]:
    """A conversational prompt checked message by message."""
    out = []
    for i, m in enumerate(value):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise RlcwError(
                f"message {i} is not a {{'role': str, 'content': str}} object",
                where=where,
                hint="a prompt cell is a string or a list of chat messages",
            )
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "user" and m["content"].strip() for m in out):
        raise RlcwError("the conversation has no non-empty user message", where=where)
    return out


def _column_table(source: str, hf_split: str) -> tuple[str, list[tuple[int, dict]]]:
    """(name, rows) from a table file or a Hugging Face dataset (hub id or a saved folder)."""
    path = Path(source).expanduser()
    if path.suffix.lower() in (".jsonl", ".json", ".csv", ".parquet"):
        return path.stem, read_table(path)
    import datasets

    try:
        ds = datasets.load_from_disk(str(path)) if path.is_dir() else datasets.load_dataset(source, split=hf_split)
    except Exception as exc:  # datasets raises many types (FileNotFoundError, DatasetNotFoundError, ValueError)
        raise RlcwError(
            f"cannot load the dataset: {exc}", where=source, hint="a jsonl/parquet file or a hub id"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        if hf_split not in ds:
            raise RlcwError(f"no split '{hf_split}'", where=source, hint=f"splits: {', '.join(ds)}")
        ds = ds[hf_split]
    return path.name or source, list(enumerate(ds, start=1))


def load_prompt_column(
    source: str, *, column: str = "prompt", id_column: str | None = None, hf_split: str = "train"
) -> list[dict]:
    """Prompt rows from one column of any table or HF dataset (plain or conversational cells)."""
    name, table = _column_table(source, hf_split)
    if id_column:
        check_unique(((line, row.get(id_column)) for line, row in table), source, id_column)
    out = []
    for line, row in table:
        where = location(source, line, column)
        value = row.get(column)
        if isinstance(value, str):
            if not value.strip():
                raise RlcwError("empty prompt", where=where)
            prompt, messages = value, None
        elif isinstance(value, list):
            messages = _messages(value, where)
            prompt = [m["content"] for m in messages if m["role"] == "user"][-1]
        else:
            raise RlcwError(
                f"expected a string or a list of messages, got {type(value).__name__}",
                where=where,
                hint=f"columns here: {', '.join(map(str, row))}; choose one with `column`",
            )
        rid = row.get(id_column) if id_column else None
        if id_column and rid in (None, ""):
            raise RlcwError("missing or empty id", where=location(source, line, id_column))
        lo_hi = parse_word_range(prompt)
        out.append(
            {
                "id": str(rid) if id_column else f"{name}-{line:06d}",
                "prompt": prompt,
                "messages": messages,
                "min_words": lo_hi[0] if lo_hi else None,
                "max_words": lo_hi[1] if lo_hi else None,
                "source": name,
                "style": "column",
                "split": None,
            }
        )
    if not out:
        raise RlcwError("no prompts", where=source)
    return out


def source_rows(spec: dict, default_prompts: str, split: str | None) -> list[dict]:
    """The rows of one `data.sources.<name>` entry: `style: column` reads any prompt column; another
    style (tmas, wp) keeps the rlcw prompt rows of that style."""
    unknown = set(spec) - set(COLUMN_OPTIONS)
    if unknown:
        raise RlcwError(f"unknown option '{sorted(unknown)[0]}'", hint=f"options: {', '.join(COLUMN_OPTIONS)}")
    if spec.get("style") == "column":
        if not spec.get("prompts"):
            raise RlcwError("style: column needs `prompts` (a file or a dataset id)")
        return load_prompt_column(
            str(spec["prompts"]),
            column=str(spec.get("column", "prompt")),
            id_column=spec.get("id_column"),
            hf_split=str(spec.get("hf_split", "train")),
        )
    rows = load_prompts(spec.get("prompts", default_prompts), spec.get("split", split))
    return [r for r in rows if r["style"] == spec["style"]] if spec.get("style") else rows


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
