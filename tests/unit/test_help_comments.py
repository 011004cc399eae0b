"""Every config key of every command has a comment, so `rlcw <command> --help` documents it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import pytest

from rlcw.cli import COMMANDS, is_built
from rlcw.config import flat_keys
from rlcw.config_help import _all_comments, describe

CONFIG_COMMANDS = [name for name, (_, cls_name, _) in COMMANDS.items() if cls_name and is_built(name)]


def uncommented(cls: type) -> list[str]:
    comments = _all_comments(cls)
    return [key for key in flat_keys(cls) if key not in comments]


@pytest.mark.parametrize("name", CONFIG_COMMANDS)
def test_every_key_has_a_comment(name):
    module_name, cls_name, _ = COMMANDS[name]
    cls = getattr(importlib.import_module(module_name), cls_name)
    missing = uncommented(cls)
    assert not missing, f"rlcw {name}: {len(missing)} keys without a comment in their dataclass: {', '.join(missing)}"


@dataclass
class _Inner:
    depth: int = 2  # how deep
    width: int = 3


@dataclass
class _Outer:
    # the name, above the field
    name: str = "x"
    inner: _Inner = field(default_factory=_Inner)
    seed: int = 0


def test_uncommented_keys_are_found_nested_and_named():
    assert uncommented(_Outer) == ["inner.width", "seed"]
    help_text = describe(_Outer)
    assert "name: str = 'x'  # the name, above the field" in help_text
    assert "inner.depth: int = 2  # how deep" in help_text
    assert [line for line in help_text.splitlines() if "seed" in line] == ["  seed: int = 0"]
