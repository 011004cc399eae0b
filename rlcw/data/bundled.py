"""The small data set the rlcw authors wrote and ship (see rlcw/data/bundled/README.md)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED = "bundled"
# meta.split values of the bundled prompts and their sizes (see bundled/README.md): RL trains on
# `train`; `eval` is the old periodic-evaluation set; `heldout` is the quickstart's final measurement;
# `study` is held out for over-optimisation studies. The last three are never RL or RM data.
PROMPT_SPLITS = {"train": 64, "eval": 16, "heldout": 32, "study": 96}


def bundled_path(name: str) -> Path:
    """Path of a bundled file: 'stories.jsonl' or 'prompts.jsonl'."""
    return Path(str(resources.files("rlcw.data") / "bundled" / name))


def resolve_data_path(value: str, default_name: str) -> Path:
    """'bundled' -> the bundled file of that kind; anything else is a path (`~` is the home folder, also when a
    YAML file or a quoted override keeps it from the shell)."""
    return bundled_path(default_name) if value == BUNDLED else Path(value).expanduser()
