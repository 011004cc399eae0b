"""The small data set the rlcw authors wrote and ship (see rlcw/data/bundled/README.md)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED = "bundled"


def bundled_path(name: str) -> Path:
    """Path of a bundled file: 'stories.jsonl' or 'prompts.jsonl'."""
    return Path(str(resources.files("rlcw.data") / "bundled" / name))


def resolve_data_path(value: str, default_name: str) -> Path:
    """'bundled' -> the bundled file of that kind; anything else is a path."""
    return bundled_path(default_name) if value == BUNDLED else Path(value)
