"""Load preference pairs from anywhere into the one preference schema.

Sources: a local jsonl/json/csv/parquet file, or a hub dataset id (needs internet), with a
column mapping for datasets that name things differently. TRL's conversational layout
(`chosen`/`rejected` as message lists) is read by taking the last assistant message, and the
prompt from the user messages.

    load_preferences("runs/qs/pairs/train.jsonl")
    load_preferences("some-org/story-prefs", split="train", columns={"chosen": "better"})
    check_pairs_file("runs/build_pairs/pairs/eval.jsonl", "data.eval_file", optional=True)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcw.data.records import message_text, validate_preference
from rlcw.errors import RlcwError, location
from rlcw.io import TABLE_SUFFIXES, read_table, suffix_hint


def _message_text(value: Any, role: str) -> Any:
    """Text of the last message with `role` in a conversational value; other values pass through (and are
    checked by validate_preference)."""
    try:
        return message_text(value, role) if isinstance(value, list) else value
    except TypeError:
        return value


def to_preference(row: dict, columns: dict[str, str], where: str, line: int) -> dict:
    """Map one raw row (any column names, plain or conversational) to a preference record."""
    missing = [col for col in (columns["chosen"], columns["rejected"]) if col not in row]
    if missing:
        raise RlcwError(
            f"missing column '{missing[0]}' (columns present: {', '.join(map(str, row))})",
            where=location(where, line),
            hint="map your column names, e.g. data.columns.chosen=<name>",
        )
    prompt = row.get(columns["prompt"])
    if prompt is None and isinstance(row[columns["chosen"]], list):  # TRL implicit prompt: user turn inside chosen
        prompt = _message_text(row[columns["chosen"]], "user")
    rec = {
        "prompt": _message_text(prompt, "user") if prompt is not None else "",
        "chosen": _message_text(row[columns["chosen"]], "assistant"),
        "rejected": _message_text(row[columns["rejected"]], "assistant"),
        "source": row.get("source") or Path(where).name,
    }
    if row.get("meta"):
        rec["meta"] = row["meta"]
    return validate_preference(rec, where, line)


def load_preferences(
    source: str, split: str = "train", columns: dict[str, str] | None = None, limit: int | None = None
) -> list[dict]:
    """Preference records from a local file or a hub dataset id."""
    cols = {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected", **(columns or {})}
    path = Path(source).expanduser()
    if path.suffix.lower() in TABLE_SUFFIXES or path.exists():
        rows = read_table(path)
        where = str(path)
    else:
        from datasets import load_dataset

        try:
            ds = load_dataset(source, split=split)
        except Exception as exc:
            raise RlcwError(
                f"cannot load hub dataset '{source}' (split '{split}'): {exc}",
                hint="check the id and your network, or pass a local .jsonl/.csv/.parquet file",
            ) from None
        rows = list(enumerate(ds, start=1))
        where = f"{source}[{split}]"
    out = [to_preference(row, cols, where, line) for line, row in rows[: limit or None]]
    if not out:
        raise RlcwError("no preference pairs found", where=where)
    return out


def check_pairs_file(value: str | None, key: str, optional: bool = False) -> None:
    """A local pairs file (a table suffix, or a path that reads as one) exists: an error naming `key` before a run
    folder is written; a hub id passes. `optional`: the key may be null (no held-out pairs)."""
    path = Path(value).expanduser() if value else None
    local = path is not None and (path.suffix.lower() in TABLE_SUFFIXES or value.startswith((".", "/", "~")))
    if local and path.is_dir():
        want = key.rsplit(".", 1)[-1].removesuffix("_file")  # data.train_file -> train.jsonl first
        found = [p for p in path.glob("**/*.jsonl") if len(p.relative_to(path).parts) <= 2]
        found.sort(key=lambda p: (p.stem != want, str(p)))
        raise RlcwError(
            f"a folder, not a preference pairs file: {value}",
            where=key,
            hint=f"did you mean {found[0]}?" if found else f"point {key} at a .jsonl/.csv/.parquet file",
        )
    if local and path.is_file() and path.suffix.lower() not in TABLE_SUFFIXES:
        raise RlcwError(f"unsupported file type '{path.suffix}': {value}", where=key, hint=suffix_hint(path.suffix))
    if local and not path.is_file():
        raise RlcwError(
            f"preference pairs file not found: {value}",
            where=key,
            hint="run `rlcw build-pairs` first (it writes runs/build_pairs/pairs/train.jsonl and eval.jsonl), or "
            f"point {key} at your pairs file" + (" (null: no held-out pairs)" if optional else ""),
        )
