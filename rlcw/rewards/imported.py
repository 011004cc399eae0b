"""Rewards given by import path: `reward.specs.<name> = {type: python, target: "pkg.mod:fn", weight, ...}`.

    f = python_reward("my_rewards:shouting", threshold=0.5)   # f(prompts, completions, **kw) -> list[float]

`target` names a callable with TRL's reward signature `(prompts, completions, **kwargs) ->
list[float]`; the spec's other options are passed to it as keyword arguments on every call. A
class is constructed once with those options instead, and the instance is the reward. A bad
target (no `:`, a module that does not import, a missing attribute, something not callable, an
option the function does not take) is an RlcwError when the run starts, not at step 1.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from rlcw.errors import RlcwError


def resolve_target(target: str, where: str = "reward spec") -> Any:
    """The object named by `pkg.mod:attr` (attr may be dotted, e.g. `mod:Class.method`)."""
    if not isinstance(target, str) or target.count(":") != 1 or not all(target.split(":")):
        raise RlcwError(
            f"target {target!r} is not 'package.module:function'", where=where, hint="e.g. my_rewards:score"
        )
    module_name, attr = target.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RlcwError(
            f"cannot import module '{module_name}' of target '{target}': {exc}",
            where=where,
            hint="is the package installed or on PYTHONPATH?",
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RlcwError(f"'{module_name}' has no attribute '{attr}'", where=where, hint=f"target {target!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise RlcwError(f"target '{target}' is not callable ({type(obj).__name__})", where=where)
    return obj


def _check_call(fn, options: dict, target: str, where: str) -> None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature: trust the caller
        return
    kinds = [p.kind for p in params.values()]
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
    ]
    if len(positional) < 2 and inspect.Parameter.VAR_POSITIONAL not in kinds:
        raise RlcwError(
            f"target '{target}' does not take (prompts, completions, **kwargs)",
            where=where,
            hint="TRL's reward signature: def reward(prompts, completions, **kwargs) -> list[float]",
        )
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        unknown = [k for k in options if k not in params]
        if unknown:
            raise RlcwError(f"target '{target}' takes no option '{unknown[0]}'", where=where)


class ImportedReward:
    """A reward function found by import path, with the spec's options bound as keyword arguments."""

    def __init__(self, fn, options: dict, name: str):
        self.fn, self.options, self.__name__ = fn, options, name

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        out = self.fn(prompts, completions, **{**kwargs, **self.options})
        if not isinstance(out, list | tuple) or len(out) != len(completions):
            raise RlcwError(
                f"reward '{self.__name__}' returned {type(out).__name__} of length "
                f"{len(out) if hasattr(out, '__len__') else '?'} for {len(completions)} completions",
                hint="a reward returns one float (or None) per completion",
            )
        return list(out)


def python_reward(target: str, **options):
    """The reward callable for a `python` spec (see the module docstring)."""
    where = "reward spec (type python)"
    obj = resolve_target(target, where)
    name = target.split(":")[1].split(".")[-1]
    if inspect.isclass(obj):
        try:
            inst = obj(**options)
        except TypeError as exc:
            raise RlcwError(f"cannot construct '{target}' with {sorted(options)}: {exc}", where=where) from None
        _check_call(inst.__call__, {}, target, where)
        return ImportedReward(inst, {}, name)
    _check_call(obj, options, target, where)
    return ImportedReward(obj, options, name)
