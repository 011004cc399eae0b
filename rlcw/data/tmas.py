"""TELL ME A STORY (Agents' Room paper): prompts and human stories as story records.

The dataset is jsonl with `example_id`, `inputs` (the prompt) and `targets` (the human story;
paragraphs are single-newline-separated, indented lines). `example_id` is unique only within a
split, so a record's `id` is `<split>/<example_id>`; `meta.sha256` hashes prompt + story so the
same example can be recognised across copies. The word range a prompt states is parsed into
`min_words`/`max_words` by `rlcw.data.prompts.parse_word_range`.

    from rlcw.data.tmas import load_tmas, prompt_rows
    stories = load_tmas("../shared/data/tell-me-a-story", ["validation"])   # local folder
    stories = load_tmas("path/to/tell-me-a-story-train.jsonl")               # one file
    stories = load_tmas("<hub id>", ["train"])                               # `datasets` hub id

rlcw ships none of the dataset's text (CC BY 4.0): point configs at your own copy.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from rlcw.data.prompts import parse_word_range
from rlcw.errors import RlcwError, location
from rlcw.io import iter_jsonl

SPLITS = ("train", "validation", "test")
FIELDS = ("example_id", "inputs", "targets")
SOURCE = "tell-me-a-story"


def content_hash(prompt: str, story: str) -> str:
    """Short sha256 of prompt + story (16 hex digits): the same text gives the same hash."""
    return hashlib.sha256(f"{prompt}\n\x00\n{story}".encode()).hexdigest()[:16]


def _split_of(path: Path) -> str:
    found = [s for s in SPLITS if s in path.stem.lower()]
    if len(found) != 1:
        raise RlcwError(
            "cannot tell the split from the file name",
            where=str(path),
            hint=f"name it like tell-me-a-story-<split>.jsonl with <split> in {SPLITS}",
        )
    return found[0]


def _split_file(folder: Path, split: str) -> Path:
    files = sorted(p for p in folder.glob("*.jsonl") if split in p.stem.lower())
    if len(files) != 1:
        raise RlcwError(
            f"expected one jsonl file for split '{split}', found {len(files)}",
            where=str(folder),
            hint="files are named like tell-me-a-story-train.jsonl / tell-me-a-story-validation.jsonl",
        )
    return files[0]


def to_record(row: dict, split: str, where: str, line: int | None, system: str = "human") -> dict:
    """One dataset row -> a story record (bad or missing fields raise, naming file, line and key)."""
    for key in FIELDS:
        value = row.get(key)
        if value is None:
            raise RlcwError(
                "missing field",
                where=location(where, line, key),
                hint=f"TELL ME A STORY rows have {', '.join(FIELDS)}",
            )
        if not isinstance(value, str) or not value.strip():
            raise RlcwError(f"expected non-empty text, got {value!r:.40}", where=location(where, line, key))
    prompt, story = row["inputs"].strip(), row["targets"].rstrip()
    rec = {
        "id": f"{split}/{row['example_id']}",
        "prompt": prompt,
        "story": story,
        "system": system,
        "reference": story,
        "source": SOURCE,
        "meta": {"split": split, "example_id": row["example_id"], "sha256": content_hash(prompt, story)},
    }
    stated = parse_word_range(prompt)
    if stated:
        rec["min_words"], rec["max_words"] = stated
    return rec


def _rows(source: str, split: str | None) -> tuple[list[tuple[int, dict]], str, str]:
    """(numbered rows, split, where) from a file, a folder (one split) or a hub id."""
    path = Path(source).expanduser()
    if path.is_file():
        return list(iter_jsonl(path)), split or _split_of(path), str(path)
    if path.is_dir():
        file = _split_file(path, split or "train")
        return list(iter_jsonl(file)), split or "train", str(file)
    if source.startswith((".", "/", "~")):
        raise RlcwError(
            "TELL ME A STORY path does not exist", where=source, hint="give a folder, a jsonl file or a hub id"
        )
    from datasets import load_dataset  # a hub id (needs the network or the local HF cache)

    ds = load_dataset(source, split=split or "train")
    return list(enumerate(ds.to_list(), start=1)), split or "train", f"{source}[{split}]"


def load_tmas(
    source: str, splits: list[str] | tuple[str, ...] | None = None, max_rows: int | None = None
) -> list[dict]:
    """Story records (system "human") of the given splits (default: the file's split, or train)."""
    out: list[dict] = []
    for split in splits or [None]:
        rows, name, where = _rows(source, split)
        seen: dict[str, int] = {}
        for line, row in rows[: max_rows or None]:
            rec = to_record(row, name, where, line)
            if rec["id"] in seen:
                raise RlcwError(
                    f"example_id repeats (first on row {seen[rec['id']]})", where=location(where, line, "example_id")
                )
            seen[rec["id"]] = line
            out.append(rec)
    return out


def prompt_rows(records: list[dict]) -> list[dict]:
    """Prompt rows (the shape `rlcw.data.prompts.load_prompts` returns) with the human story kept as `reference`."""
    return [
        {
            "id": r["id"],
            "prompt": r["prompt"],
            "min_words": r.get("min_words"),
            "max_words": r.get("max_words"),
            "source": SOURCE,
            "style": "tmas",
            "split": r["meta"]["split"],
            "reference": r["story"],
        }
        for r in records
    ]
