"""The two records every stage shares, validated with errors that name file, line and field.

Story record (jsonl): required `id`, `prompt`, `story`, `system` (who wrote it: a run, a
model, "human"); optional `reference`, `source`, `step`, `seed`, `min_words`, `max_words`,
`meta`. Preference record: `prompt`, `chosen`, `rejected`; optional `source`, `meta`.
`message_text` reads the text out of a chat-message list (TRL's conversational layout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError, location
from rlcw.io import atomic_write_jsonl, iter_jsonl


def message_text(value: Any, role: str | None = None) -> str:
    """Plain text of a string or a list of chat messages (`{"role", "content"}` dicts).

    role given: the last message with that role ("" when there is none). No role (a TRL prompt or
    completion): the last user message unless the list ends with the assistant, else the last message."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        if role is not None:
            texts = [m["content"] for m in value if m.get("role") == role]
            return texts[-1] if texts else ""
        users = [m["content"] for m in value if m.get("role") == "user"]
        if users and value[-1].get("role") != "assistant":
            return users[-1]
        return value[-1]["content"]
    raise TypeError(f"cannot read text from {type(value).__name__}")


STORY_REQUIRED = ("id", "prompt", "story", "system")
STORY_OPTIONAL = ("reference", "source", "step", "seed", "min_words", "max_words", "meta")
PREFERENCE_REQUIRED = ("prompt", "chosen", "rejected")
PREFERENCE_OPTIONAL = ("source", "meta")


def _text(obj: dict, key: str, where: str, line: int | None, *, allow_empty: bool = False) -> str:
    if key not in obj:
        raise RlcwError("missing field", where=location(where, line, key), hint=f"every record needs '{key}'")
    value = obj[key]
    if value is None:
        raise RlcwError("is null", where=location(where, line, key), hint="give a text value")
    if not isinstance(value, str):
        raise RlcwError(
            f"expected text, got {type(value).__name__} ({value!r:.40})",
            where=location(where, line, key),
            hint="quote the value so it is a JSON string",
        )
    if not allow_empty and not value.strip():
        raise RlcwError("is empty", where=location(where, line, key), hint="remove the record or fill the text in")
    return value


def _optional_int(obj: dict, key: str, where: str, line: int | None) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RlcwError(f"expected an integer, got {value!r}", where=location(where, line, key))
    return value


def validate_story(obj: dict, where: str = "<record>", line: int | None = None) -> dict[str, Any]:
    """Check one story record; return it with only known fields (unknown ones go to `meta`)."""
    out: dict[str, Any] = {k: _text(obj, k, where, line) for k in STORY_REQUIRED if k != "id"}
    if "id" not in obj or obj["id"] is None or (isinstance(obj["id"], str) and not obj["id"].strip()):
        raise RlcwError("missing or empty id", where=location(where, line, "id"))
    out = {"id": str(obj["id"]), **out}
    for key in ("reference", "source"):
        if obj.get(key) is not None:
            out[key] = _text(obj, key, where, line, allow_empty=True)
    for key in ("step", "seed", "min_words", "max_words"):
        value = _optional_int(obj, key, where, line)
        if value is not None:
            out[key] = value
    if out.get("min_words") is not None and out.get("max_words") is not None and out["min_words"] > out["max_words"]:
        raise RlcwError("min_words is larger than max_words", where=location(where, line, "min_words"))
    if obj.get("meta") is not None and not isinstance(obj["meta"], dict):
        raise RlcwError("expected an object", where=location(where, line, "meta"), hint='e.g. "meta": {"note": "..."}')
    meta = dict(obj.get("meta") or {})
    extra = {k: v for k, v in obj.items() if k not in STORY_REQUIRED + STORY_OPTIONAL}
    if extra:
        meta.update(extra)
    if meta:
        out["meta"] = meta
    return out


def validate_preference(obj: dict, where: str = "<record>", line: int | None = None) -> dict[str, Any]:
    """Check one preference record (prompt may be empty; stories may not; they must differ)."""
    out: dict[str, Any] = {
        "prompt": _text(obj, "prompt", where, line, allow_empty=True),
        "chosen": _text(obj, "chosen", where, line),
        "rejected": _text(obj, "rejected", where, line),
    }
    if out["chosen"].strip() == out["rejected"].strip():
        raise RlcwError(
            "chosen and rejected are the same text",
            where=location(where, line, "rejected"),
            hint="a pair must compare two different stories; drop this row",
        )
    if obj.get("source") is not None:
        out["source"] = str(obj["source"])
    if obj.get("meta"):
        if not isinstance(obj["meta"], dict):
            raise RlcwError("expected an object", where=location(where, line, "meta"))
        out["meta"] = obj["meta"]
    return out


def read_stories(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a story-record jsonl file."""
    return [validate_story(obj, str(path), line) for line, obj in iter_jsonl(path)]


def write_stories(path: str | Path, stories: list[dict]) -> Path:
    """Validate and write story records atomically."""
    return atomic_write_jsonl(path, [validate_story(s, str(path), i) for i, s in enumerate(stories, 1)])


def write_preferences(path: str | Path, pairs: list[dict]) -> Path:
    return atomic_write_jsonl(path, [validate_preference(p, str(path), i) for i, p in enumerate(pairs, 1)])
