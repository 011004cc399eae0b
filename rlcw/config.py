"""Typed configs: dataclass defaults <- YAML file <- `key=value` overrides (OmegaConf, strict).

Knows nothing of the domain. A misspelt key is an error that names the key, where it came
from (file or command line) and the closest valid keys; a wrong type names the expected type.
The loaded config remembers which keys the user set (`user_keys`), so code that rewrites keys
(`assign`) never resets one silently. A dataclass names the keys it no longer has (`retired_keys`), so a config
that still sets one fails with the key's new place.

    cfg = load_config(GRPOConfig, "configs/grpo/cpu.yaml", ["train.max_steps=20"])
    user_keys(cfg)                       # {"train.max_steps", ...every leaf key the YAML sets}
    assign(cfg, "train.max_steps", 20)   # fine: the same value; 30 would be an error naming the key
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlcw.errors import RlcwError

T = TypeVar("T")


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def dataclass_of(tp: Any) -> type | None:
    """The dataclass inside `tp` (also `X | None`), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def flat_keys(cls: type, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Every leaf key of a config dataclass as `dotted.key -> (type, default)`."""
    out: dict[str, tuple[Any, Any]] = {}
    defaults = cls()
    for name, tp in field_types(cls).items():
        sub = dataclass_of(tp)
        key = f"{prefix}{name}"
        if sub is not None and getattr(defaults, name) is not None:
            out.update(flat_keys(sub, key + "."))
        else:
            out[key] = (tp, getattr(defaults, name))
    return out


def _leaves(data: dict, prefix: str) -> list[str]:
    out = []
    for key, value in data.items():
        out += _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [f"{prefix}{key}"]
    return out


def _bad_keys(cls: type, data: dict, prefix: str = "") -> tuple[list[str], list[str]]:
    """(unknown dotted leaf keys, sections given a scalar value)."""
    types = field_types(cls)
    unknown, scalars = [], []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in types:
            unknown += _leaves(value, dotted + ".") if isinstance(value, dict) and value else [dotted]
            continue
        sub = dataclass_of(types[key])
        if sub is not None and isinstance(value, dict):
            u, s = _bad_keys(sub, value, dotted + ".")
            unknown, scalars = unknown + u, scalars + s
        elif sub is not None and value is not None:
            scalars.append(dotted)
    return unknown, scalars


# Short names people type for a key (HF/TRL/PyTorch habits) -> the leaf name they mean.
KEY_ALIASES = {
    "lr": "learning_rate",
    "steps": "max_steps",
    "bs": "batch_size",
    "batch": "batch_size",
    "per_device_train_batch_size": "batch_size",
    "wd": "weight_decay",
    "grad_accum": "gradient_accumulation_steps",
    "epochs": "num_train_epochs",
    "warmup": "warmup_steps",
}


def close_keys(key: str, keys: list[str], n: int = 3) -> list[str]:
    """Valid keys close to a misspelt `key`: the alias's key first (`train.lr` -> train.learning_rate, in the
    most similar section), then keys whose leaf name is close, then the closest whole keys."""
    section, _, leaf = key.rpartition(".")
    ranked: list[str] = []

    def by_section(k: str) -> float:
        return -difflib.SequenceMatcher(None, section, k.rpartition(".")[0]).ratio()

    alias = KEY_ALIASES.get(leaf.lower())
    if alias:
        ranked += sorted((k for k in keys if k.rpartition(".")[2] == alias), key=by_section)
    leaves = {k.rpartition(".")[2] for k in keys}
    for near in difflib.get_close_matches(leaf, list(leaves), n=n, cutoff=0.75):
        ranked += sorted((k for k in keys if k.rpartition(".")[2] == near and k not in ranked), key=by_section)[:1]
    ranked += [k for k in difflib.get_close_matches(key, keys, n=n, cutoff=0.5) if k not in ranked]
    return ranked[:n]


# A config dataclass lists the keys it no longer has, relative to itself, as class variables:
#     MOVED_KEYS: ClassVar[dict[str, str]] = {
#         "train.old_key": "section.new_key",                       # the value moved as it is
#         "train.old_flag": "section.new_key=value",                # the flag set to true is now that value
#         "train.on_flag": "section.new_key=value if it was false",  # the flag set to false is now that value
#     }  # each may end in a note in parentheses: "section.new_key (what changed)"
#     REMOVED_KEYS: ClassVar[dict[str, str]] = {"train.gone": "why it went, and what to do"}
MOVED_KEYS, REMOVED_KEYS = "MOVED_KEYS", "REMOVED_KEYS"
_MOVE = re.compile(r"(?P<key>[\w.]+)(?:=(?P<value>\S+)(?: if it was (?P<when>\S+))?)?(?: \(.*\))?")


def retired_entries(prefix: str, moved: dict[str, str], removed: dict[str, str]) -> dict[str, str]:
    """`{prefix}old.key -> what happened to it` of one dataclass's MOVED_KEYS and REMOVED_KEYS."""
    out = {f"{prefix}{old}": f"moved: use {prefix}{new}" for old, new in moved.items()}
    out.update({f"{prefix}{old}": f"was removed: {why}" for old, why in removed.items()})
    return out


def _retired_tables(cls: type, prefix: str = "") -> Iterator[tuple[str, dict[str, str], dict[str, str]]]:
    """(prefix, MOVED_KEYS, REMOVED_KEYS) of a config dataclass and of each of its nested sections."""
    yield prefix, getattr(cls, MOVED_KEYS, {}), getattr(cls, REMOVED_KEYS, {})
    defaults = cls()
    for name, tp in field_types(cls).items():
        sub = dataclass_of(tp)
        if sub is not None and getattr(defaults, name) is not None:
            yield from _retired_tables(sub, f"{prefix}{name}.")


def retired_keys(cls: type) -> dict[str, str]:
    """Every retired key of a config dataclass and its nested sections as `dotted.key -> what happened to it`."""
    out: dict[str, str] = {}
    for prefix, moved, removed in _retired_tables(cls):
        out.update(retired_entries(prefix, moved, removed))
    return out


def _moved_value(spec: str, old: Any) -> tuple[str, Any] | None:
    """(new key, its value) of a moved key's value `old` by its MOVED_KEYS entry; None when that value has no
    counterpart (a flag at the value that moved nowhere)."""
    found = _MOVE.fullmatch(spec)
    if found is None:
        raise ValueError(
            f"a MOVED_KEYS entry must read 'new.key', 'new.key=value' or 'new.key=value if it was X': {spec!r}"
        )
    if found["value"] is None:
        return found["key"], old
    when = yaml.safe_load(found["when"]) if found["when"] is not None else True
    return (found["key"], yaml.safe_load(found["value"])) if old == when else None


def translate_retired(leaves: dict[str, Any], cls: type) -> dict[str, Any]:
    """A config's dotted leaves (`leaf_values`, e.g. of a run folder's config.yaml written before keys were retired)
    as `cls` now spells them: each moved key's value at its new key (`_moved_value`), removed keys dropped, every
    other key as it was."""
    moved: dict[str, str] = {}
    removed: set[str] = set()
    for prefix, moves, removes in _retired_tables(cls):
        moved.update({f"{prefix}{old}": f"{prefix}{new}" for old, new in moves.items()})
        removed.update(f"{prefix}{old}" for old in removes)
    out: dict[str, Any] = {}
    for key, value in leaves.items():
        if key in removed:
            continue
        if key not in moved:
            out.setdefault(key, value)  # a key already moved into its place keeps the moved value
            continue
        new = _moved_value(moved[key], value)
        if new is not None:
            out[new[0]] = new[1]
    return out


def _raise_retired(unknown: list[str], retired: dict[str, str], source: str) -> None:
    """An error naming the first unknown key that is (or lies under) a retired key, and where it went."""
    for key in unknown:
        old = next((k for k in retired if key == k or key.startswith(k + ".")), None)
        if old is not None:
            raise RlcwError(
                f"config key '{old}' {retired[old]}",
                where=source,
                hint="the retired keys and their new places: docs/migration.md",
            )


def _check_keys(cls: type, data: dict, source: str) -> None:
    unknown, scalars = _bad_keys(cls, data)
    _raise_retired(unknown, retired_keys(cls), source)
    _raise_bad_keys(unknown, scalars, list(flat_keys(cls)), source)


def _static_bad_keys(keys: dict[str, bool], data: dict, prefix: str = "") -> tuple[list[str], list[str]]:
    """`_bad_keys` against `rlcw.config_static.static_keys` (dotted key -> is a section)."""
    unknown, scalars = [], []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if dotted not in keys:
            unknown += _leaves(value, dotted + ".") if isinstance(value, dict) and value else [dotted]
        elif keys[dotted] and isinstance(value, dict):
            u, sc = _static_bad_keys(keys, value, dotted + ".")
            unknown, scalars = unknown + u, scalars + sc
        elif keys[dotted] and value is not None:
            scalars.append(dotted)
    return unknown, scalars


def check_keys_early(
    keys: dict[str, bool],
    config_file: str | Path | None,
    overrides: list[str],
    leaves: dict[str, Any] | None = None,
    retired: dict[str, str] | None = None,
) -> None:
    """The key checks of `load_config` (file, YAML, retired and unknown keys with hints, scalars for sections)
    against keys read from source (`rlcw.config_static`), so they answer before the recipe's heavy imports; with
    `leaves` (`static_leaves`) also the type and `at_least` bound of every value given, with `retired`
    (`static_retired_keys`) the new place of a retired key."""
    names = [k for k, section in keys.items() if not section]
    sources = []
    if config_file is not None:
        sources.append((read_yaml(Path(config_file)), str(config_file)))
    if overrides:
        sources.append((parse_overrides(overrides), "command line"))
    for data, source in sources:
        unknown, scalars = _static_bad_keys(keys, data)
        _raise_retired(unknown, retired or {}, source)
        _raise_bad_keys(unknown, scalars, names, source)
        for key, value in leaf_values(data, "").items():
            leaf = (leaves or {}).get(key)
            if leaf is not None:
                _check_value_early(key, value, leaf, source)


def _check_value_early(key: str, value: Any, leaf: Any, source: str) -> None:
    """A value against its static `Leaf`: converted as OmegaConf converts it for a plain int/float/bool/str key
    (optional with `| None`), then held to the key's `at_least` / `above` bound or `one_of` choices."""
    from omegaconf.nodes import BooleanNode, FloatNode, IntegerNode, StringNode

    nodes = {"int": IntegerNode, "float": FloatNode, "bool": BooleanNode, "str": StringNode}
    parts = leaf.type.split(" | ")
    base = [p for p in parts if p != "None"]
    if len(base) == 1 and base[0] in nodes and not isinstance(value, dict | list):
        try:
            value = nodes[base[0]](value=value, is_optional="None" in parts)._value()
        except OmegaConfBaseException:
            raise RlcwError(f"wrong type for '{key}': expected {leaf.type}, got {value!r}", where=source) from None
    if leaf.choices is not None and isinstance(value, str) and value not in leaf.choices:
        raise choice_error(key, value, leaf.choices, where=source)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if leaf.low is not None and number and out_of_bound(value, leaf.low, leaf.above):
        raise bound_error(key, value, leaf.low, leaf.why, where=source, strict=leaf.above)


def _raise_bad_keys(unknown: list[str], scalars: list[str], all_keys: list[str], source: str) -> None:
    if unknown:
        close = close_keys(unknown[0], all_keys)
        hint = (
            f"did you mean {', '.join(repr(c) for c in close)}?" if close else "`rlcw <command> --help` lists the keys"
        )
        raise RlcwError(f"unknown config key '{unknown[0]}'", where=source, hint=hint)
    if scalars:
        example = next((k for k in all_keys if k.startswith(scalars[0] + ".")), scalars[0] + ".<key>")
        raise RlcwError(
            f"wrong type for '{scalars[0]}': expected a section (mapping), got a single value",
            where=source,
            hint=f"set its keys, e.g. {example}=...",
        )


def _is_list_type(tp: Any) -> bool:
    return typing.get_origin(tp) is list or any(typing.get_origin(a) is list for a in typing.get_args(tp))


def _wrap_scalars(cls: type, data: dict, source: str, prefix: str = "") -> dict:
    """A single value given for a list key is a one-element list (`train.report_to=wandb`, as HF/TRL accept);
    a text with commas there is an error (`data.splits=train,validation` means a list: brackets are needed)."""
    types = field_types(cls)
    out = {}
    for key, value in data.items():
        tp = types.get(key)
        sub = dataclass_of(tp) if tp is not None else None
        if sub is not None and isinstance(value, dict):
            value = _wrap_scalars(sub, value, source, f"{prefix}{key}.")
        elif tp is not None and _is_list_type(tp) and isinstance(value, str | int | float | bool):
            if isinstance(value, str) and "," in value:
                items = ",".join(v.strip() for v in value.split(","))
                raise RlcwError(
                    f"'{prefix}{key}' is a list, given as the text {value!r}",
                    where=source,
                    hint=f"write a list in brackets: {prefix}{key}=[{items}] (quote the whole argument in a shell)",
                )
            value = [value]
        out[key] = value
    return out


def type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _merge(base, other, cls: type, source: str):
    try:
        return OmegaConf.merge(base, other)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        expected = flat_keys(cls).get(key, (None, None))[0]
        got = getattr(exc, "value", None)
        exp = f"expected {type_name(expected)}" if expected is not None else str(exc).splitlines()[0]
        raise RlcwError(f"wrong type for '{key}': {exp}, got {got!r}", where=source) from None


def parse_overrides(overrides: list[str]) -> dict:
    """Parse `a.b=1` dotlist items into a nested dict; a malformed item is an error."""
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise RlcwError(
                f"override '{item}' is not key=value", where="command line", hint="e.g. train.max_steps=20"
            )
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist(list(overrides)))
    except OmegaConfBaseException as exc:
        raise RlcwError(f"cannot parse overrides: {exc}", where="command line") from None


_USER_KEYS = "_rlcw_user_keys"


def user_keys(cfg: Any) -> frozenset[str]:
    """Dotted leaf keys the user set in the YAML file or on the command line (empty for a config built in code)."""
    return getattr(cfg, _USER_KEYS, frozenset())


def leaf_values(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a config (dataclasses and non-empty dicts walked) as `{prefix}.dotted.key -> value` (`dotted.key`
    without a prefix)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, dict) and value:
        items = list(value.items())
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(leaf_values(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def assign(cfg: Any, key: str, value: Any) -> None:
    """Set the dotted `key` of `cfg` to `value` (a leaf or a whole section); an error when that would
    change a value the user set (`user_keys`), so a derived setting never resets an override silently."""
    *path, last = key.split(".")
    parent = cfg
    for part in path:
        parent = getattr(parent, part)
    old, new = leaf_values(getattr(parent, last), key), leaf_values(value, key)
    for k in sorted(user_keys(cfg)):
        if (k == key or k.startswith(key + ".")) and old.get(k, "<unset>") != new.get(k, "<unset>"):
            raise RlcwError(
                f"'{k}' is set to {old.get(k)!r} by you, but this command sets it to {new.get(k, '<unset>')!r}",
                hint=f"remove the override of '{k}': this command derives it (see its wire() docstring)",
            )
    setattr(parent, last, value)


def load_config(cls: type[T], config_file: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Build a `cls` instance from defaults, an optional YAML file and dotlist overrides (keys set: `user_keys`)."""
    base = OmegaConf.structured(cls)
    keys: set[str] = set()
    if config_file is not None:
        path = Path(config_file)
        data = read_yaml(path)
        _check_keys(cls, data, str(path))
        data = _wrap_scalars(cls, data, str(path))
        base = _merge(base, data, cls, str(path))
        keys.update(_leaves(data, ""))
    if overrides:
        data = parse_overrides(overrides)
        _check_keys(cls, data, "command line")
        data = _wrap_scalars(cls, data, "command line")
        base = _merge(base, data, cls, "command line")
        keys.update(_leaves(data, ""))
    try:
        cfg = OmegaConf.to_object(base)
    except OmegaConfBaseException as exc:
        raise RlcwError(f"invalid config: {exc}") from None
    _check_finite(cfg)
    check_bounds(cfg)
    object.__setattr__(cfg, _USER_KEYS, frozenset(keys))
    return cfg


def _check_finite(cfg: Any) -> None:
    """Every number of a config is finite: nan or inf (`weight: .nan`, `lr=inf`) is an error naming the key."""
    for key, value in leaf_values(cfg, "").items():
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise RlcwError(
                f"'{key}' must be a finite number, got {value!r}",
                where=key,
                hint="give a number",
            )


def read_yaml(path: Path) -> dict:
    """A YAML config file as a dict: missing file (closest files named), parse errors (tabs named) and a top
    level that is not a mapping are errors naming the file."""
    if not path.is_file():
        raise RlcwError("config file not found", where=str(path), hint=_closest_file_hint(path))
    try:
        data = OmegaConf.to_container(OmegaConf.load(path)) or {}
    except Exception as exc:  # yaml errors carry their own line numbers
        raise RlcwError(f"cannot parse YAML: {exc}", where=str(path), hint=_yaml_hint(path)) from None
    if not isinstance(data, dict):
        raise RlcwError("top level must be a mapping of keys", where=str(path))
    return data


def _closest_file_hint(path: Path) -> str:
    """Did-you-mean for a missing config file: YAML files in its folder (or the nearest folder that exists)."""
    folder = path.parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    found = sorted(str(p) for p in folder.rglob("*.y*ml"))[:500] if folder.is_dir() else []
    close = difflib.get_close_matches(str(path), found, n=2, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(close)}? (`rlcw configs` lists the shipped configs)"
    return "`rlcw configs` lists the shipped configs (configs/<command>/*.yaml)"


def _yaml_hint(path: Path) -> str | None:
    """Name a tab in a YAML file's indentation (PyYAML says only "found character that cannot start any token")."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    tabs = [i for i, line in enumerate(lines, start=1) if "\t" in line[: len(line) - len(line.lstrip())]]
    if tabs:
        return f"line {tabs[0]} is indented with a tab: YAML indents with spaces only (replace the tab by spaces)"
    return None


def to_yaml(cfg: Any) -> str:
    """The resolved config as YAML (what goes into the run folder)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def check_choice(key: str, value: Any, choices: tuple | list) -> None:
    """An error naming `key` unless `value` is one of `choices` (for `validate(cfg)` functions)."""
    if value not in choices:
        raise RlcwError(f"unknown {key} {value!r}", where=key, hint=f"use one of {', '.join(map(str, choices))}")


def check_at_least(key: str, value: Any, low: float) -> None:
    """An error naming `key` unless `value` >= `low` (None counts as unset: no error)."""
    if value is not None and not value >= low:
        raise RlcwError(f"{key} must be >= {low}, got {value!r}", where=key, hint=f"set {key}={low} or more")


def at_least(low: float, default: Any, why: str = "") -> Any:
    """A dataclass field whose value must be >= `low` (`why` says what a smaller value would break). `load_config`
    checks it, and the CLI checks a value the user gives before the recipe's imports (rlcw.config_static)."""
    return dataclasses.field(default=default, metadata={"min": low, "why": why})


def above(low: float, default: Any, why: str = "") -> Any:
    """A dataclass field whose value must be > `low` (a sampling temperature: 0 itself breaks it); checked as
    `at_least` is."""
    return dataclasses.field(default=default, metadata={"min": low, "above": True, "why": why})


def one_of(choices: tuple[str, ...], default: Any) -> Any:
    """A dataclass field whose value must be one of `choices` (a misspelt value gets the closest one); checked as
    `at_least` is, so `model.dtype=bf16` is refused before torch is imported, not after the model loads."""
    return dataclasses.field(default=default, metadata={"choices": tuple(choices)})


def out_of_bound(value: float, low: float, strict: bool = False) -> bool:
    """True when `value` breaks an `at_least(low)` bound (`above(low)` with `strict`); nan breaks both."""
    return not (value > low if strict else value >= low)


def bound_error(
    key: str, value: Any, low: float, why: str = "", where: str | None = None, strict: bool = False
) -> RlcwError:
    """The error of a value below its `at_least` (or `above`) bound, naming the key."""
    word, more = ("above", "above") if strict else ("at least", "of")
    return RlcwError(
        f"{key} must be {word} {low}, got {value!r}" + (f": {why}" if why else ""),
        where=where,
        hint=f"give {key} a value {more} {low}" + ("" if strict else " or more"),
    )


def choice_error(key: str, value: Any, choices: tuple, where: str | None = None) -> RlcwError:
    """The error of a value that is not one of a `one_of` field's choices, with the closest one."""
    close = difflib.get_close_matches(str(value).lower(), [str(c) for c in choices], n=1, cutoff=0.5)
    return RlcwError(
        f"unknown {key} {value!r}",
        where=where,
        hint=(f"did you mean {close[0]!r}? " if close else "") + f"use one of {', '.join(map(str, choices))}",
    )


def check_bounds(cfg: Any, prefix: str = "") -> None:
    """Every `at_least` / `above` / `one_of` field of a config (nested sections too) holds a value inside its bound
    (None is unset)."""
    for f in dataclasses.fields(cfg):
        value, key = getattr(cfg, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_bounds(value, key + ".")
        elif value is not None and "choices" in f.metadata and value not in f.metadata["choices"]:
            raise choice_error(key, value, f.metadata["choices"])
        elif value is not None and "min" in f.metadata:
            low, strict = f.metadata["min"], f.metadata.get("above", False)
            if out_of_bound(value, low, strict):
                raise bound_error(key, value, low, f.metadata.get("why", ""), strict=strict)
