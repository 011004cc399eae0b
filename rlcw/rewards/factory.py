"""Reward specs -> TRL reward callables and their weights.

    funcs, weights = build_rewards([
        {"type": "bt", "rm_path": "runs/train_rm/model", "weight": 1.0, "length_control": True},
        {"type": "length_range", "weight": 0.5, "clip": 2.0},
        {"type": "overlong", "weight": 0.5, "max_tokens": 96, "buffer": 24},
    ])
    GRPOTrainer(reward_funcs=funcs, args=GRPOConfig(reward_weights=weights, ...), ...)
    build_rewards({"vocab": {"type": "python", "target": "my_pkg.rewards:score", "weight": 1.0, "k": 3}})

`python` specs name any callable with TRL's signature by import path; their other options are
passed to it on every call (rlcw.rewards.imported).

A spec is a mapping with `type` (one of REWARD_TYPES), optional `weight` (default 1.0; 0 drops
the reward), optional `name` (the name TRL logs it under: `rewards/<name>/mean`) and the
constructor's options. `defaults` fills options a spec leaves out when its constructor takes
them (the recipe passes `rm_path`, `num_generations`, `max_tokens`, `seed`). Constructors are
imported only when a spec uses them, so a missing optional piece fails only the runs that ask
for it, with a clear error.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError

# type -> ("module:callable", the option that carries the first positional argument); the callable's
# parameters are the spec's options
REWARD_TYPES: dict[str, tuple[str, str | None]] = {
    "bt": ("rlcw.rm.scoring:load_rm", "rm_path"),  # the RM's scorer, a reward through WRAPPERS
    "genrm": ("rlcw.rewards.genrm:GenRMReward", "rm_path"),
    "remote": ("rlcw.rewards.remote:RemoteReward", "urls"),
    "length_range": ("rlcw.rewards.length:LengthReward", None),
    "overlong": ("rlcw.rewards.length:OverlongReward", None),
    "ended_short": ("rlcw.rewards.length:EndedShortCost", None),  # a cost: 1 if it ended below its range
    "python": ("rlcw.rewards.imported:python_reward", "target"),  # {target: "pkg.mod:fn", ...kwargs}
    "rubric": ("rlcw.rewards.rubric:RubricReward", None),  # a judge's yes/no criteria, weighted mean
    "slop": ("rlcw.rewards.slop:SlopReward", None),  # % of words in over-used phrases: weight < 0
}
# type -> "module:class" whose instance around what REWARD_TYPES' callable returns is the reward callable
WRAPPERS = {"bt": "rlcw.rewards.bt:BTScorer"}
_COMMON = ("type", "weight", "name", "anchor", "constrain", "gate")
# recipe-wide defaults that fill a constructor argument of the same name when a spec leaves it out
_FILLED = ("max_tokens", "num_generations", "seed", "batch_size")


def _constructor(kind: str):
    return _imported(kind, REWARD_TYPES[kind][0])


def _imported(kind: str, target: str):
    module_name, attr = target.split(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RlcwError(f"reward type '{kind}' is not available: {exc}", hint=f"it is provided by {target}") from None


def _options(kind: str, spec: dict, defaults: dict, where: str) -> tuple[list, dict]:
    """(positional args, keyword args) for the constructor, with unknown options rejected."""
    ctor = _constructor(kind)
    first = REWARD_TYPES[kind][1]
    params = inspect.signature(ctor).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    opts = {k: v for k, v in spec.items() if k not in _COMMON}
    if first and first not in opts and defaults.get(first) is not None:
        opts[first] = defaults[first]
    for name in _FILLED:
        if name in params and name not in opts and defaults.get(name) is not None:
            opts[name] = defaults[name]
    args = []
    if first:
        if opts.get(first) in (None, "", []):
            raise RlcwError(f"reward type '{kind}' needs option '{first}'", where=where)
        args.append(opts.pop(first))
    allowed = [n for n in list(params)[1 if first else 0 :] if params[n].kind is not inspect.Parameter.VAR_KEYWORD]
    unknown = [k for k in opts if k not in allowed]
    if unknown and not accepts_any:
        raise RlcwError(
            f"unknown option '{unknown[0]}' for reward type '{kind}'",
            where=where,
            hint=f"options: {', '.join(list(_COMMON) + ([first] if first else []) + allowed)}",
        )
    return args, opts


@dataclass(frozen=True)
class RewardSpec:
    """One reward spec, parsed and checked (`parse_spec`): what `build` constructs, with no file re-read."""

    where: str  # the user's key, e.g. reward.specs.rm
    type: str
    weight: float
    name: str | None  # the spec's `name`, else its key in a mapping of specs
    args: tuple  # the constructor's positional argument (REWARD_TYPES' first option), if any
    options: dict  # the constructor's keyword options, defaults filled in
    anchor: dict | None  # `anchor_options`: PAR's references, or None
    constrain: dict | None = None  # `constrain_options`: a Lagrangian limit on a cost, or None
    gate: dict | None = None  # `gate_options`: {gate, max_tokens} (rlcw.rewards.gated), or None


def _check_type(spec, where: str) -> str:
    if not isinstance(spec, dict) or "type" not in spec:
        raise RlcwError(
            "a reward spec must be a mapping with a 'type'", where=where, hint=f"types: {', '.join(REWARD_TYPES)}"
        )
    if spec["type"] not in REWARD_TYPES:
        raise RlcwError(
            f"unknown reward type '{spec['type']}'", where=where, hint=f"known types: {', '.join(REWARD_TYPES)}"
        )
    return spec["type"]


def parse_spec(spec: dict[str, Any], defaults: dict | None = None, where: str = "reward spec") -> RewardSpec:
    """One spec checked without building it: type, weight, anchor, options (the constructor is imported to read
    its signature; nothing loads)."""
    kind = _check_type(spec, where)
    weight = spec_weight(spec, where)
    anchor = anchor_options(spec, where)
    constrain = constrain_options(spec, weight, where)
    gate = gate_options(spec, defaults or {}, where)
    args, options = _options(kind, spec, defaults or {}, where)
    return RewardSpec(where, kind, weight, spec.get("name") or None, tuple(args), options, anchor, constrain, gate)


def parse_specs(specs, defaults: dict | None = None, key: str = "rewards") -> list[RewardSpec]:
    """Every spec of a list or a mapping name -> spec, parsed, in order; a spec with `weight: 0` is left out
    (unchecked beyond its type and weight) and no reward at all is an error. `key` is where the specs sit in
    the user's config (recipes pass "reward.specs"), so every error names the key to fix."""
    items = list(specs.items()) if isinstance(specs, dict) else [(None, s) for s in specs]
    parsed = []
    for i, (name, spec) in enumerate(items):
        where = f"{key}.{name}" if name else f"{key}[{i}]"
        _check_type(spec, where)
        if spec_weight(spec, where) == 0.0:
            continue
        one = parse_spec(spec, defaults, where)
        parsed.append(dataclasses.replace(one, name=one.name or name))
    if not parsed:
        raise RlcwError(
            "no reward left: every reward spec is missing or has weight 0",
            where=key,
            hint=f"add one, e.g. {key}.rm.type=bt; types: {', '.join(REWARD_TYPES)}",
        )
    return parsed


def build(spec: RewardSpec):
    """The reward callable of a parsed spec (anchored when it has an `anchor`), named by its `name`."""
    try:
        func = _constructor(spec.type)(*spec.args, **spec.options)
    except (ValueError, TypeError) as exc:  # a constructor's own check of an option value, named by the spec's key
        raise RlcwError(str(exc), where=spec.where, hint=f"fix the option in {spec.where}") from None
    if spec.type in WRAPPERS:
        func = _imported(spec.type, WRAPPERS[spec.type])(func)
    if spec.anchor is not None:
        from rlcw.rewards.anchored import AnchoredReward, load_references

        anchor = spec.anchor
        refs = load_references(anchor["references"], anchor["human"], anchor["per_prompt"])
        func = AnchoredReward(func, refs, source=f"{spec.where}.anchor.references ({anchor['references']})")
    if spec.gate is not None:
        from rlcw.rewards.gated import Gate

        func = Gate(func, spec.gate["max_tokens"], spec.gate["gate"])
    if spec.constrain is not None:  # its values were checked when the spec was parsed (`constrain_options`)
        from rlcw.rewards.constrained import ConstrainedReward

        func = ConstrainedReward(func, **spec.constrain)
    if spec.name:
        func.__name__ = str(spec.name)
    elif not getattr(func, "__name__", None):
        func.__name__ = spec.type
    return func


def build_reward(spec: dict[str, Any], defaults: dict | None = None, where: str = "reward spec"):
    """One reward callable from one spec (see module docstring)."""
    return build(parse_spec(spec, defaults, where))


def anchor_options(spec: dict, where: str) -> dict | None:
    """A spec's `anchor` (PAR, `rlcw.rewards.anchored`) as {references, human, per_prompt}, checked without
    reading the file's stories; None when the spec has none."""
    from rlcw.rewards.anchored import ANCHOR_OPTIONS

    anchor = spec.get("anchor")
    if anchor is None:
        return None
    example = "anchor: {references: runs/refs/samples/stories.jsonl}"
    if not isinstance(anchor, dict) or not anchor.get("references"):
        raise RlcwError("anchor needs `references`: a story-record file", where=f"{where}.anchor", hint=example)
    unknown = sorted(set(anchor) - set(ANCHOR_OPTIONS))
    if unknown:
        raise RlcwError(
            f"unknown anchor option {unknown[0]!r}", where=f"{where}.anchor", hint=f"options: {ANCHOR_OPTIONS}"
        )
    if not Path(anchor["references"]).is_file():
        raise RlcwError(
            f"no reference file at {anchor['references']}",
            where=f"{where}.anchor.references",
            hint="start-model stories for the training prompts: `rlcw generate` writes them (samples/stories.jsonl)",
        )
    per = anchor.get("per_prompt")
    if per is not None and (not isinstance(per, int) or isinstance(per, bool) or per < 1):
        raise RlcwError(f"per_prompt must be >= 1, got {per!r}", where=f"{where}.anchor.per_prompt")
    return {"references": str(anchor["references"]), "human": bool(anchor.get("human", False)), "per_prompt": per}


def constrain_options(spec: dict, weight: float, where: str) -> dict | None:
    """A spec's `constrain` (a Lagrangian limit on its value as a cost, `rlcw.rewards.constrained`) as the
    options given, checked; None when the spec has none. The term is `-multiplier * cost`, so its weight must be
    positive (a negative weight would pay for the cost)."""
    from rlcw.rewards.constrained import CONSTRAIN_OPTIONS, ConstrainedReward

    constrain = spec.get("constrain")
    if constrain is None:
        return None
    if not isinstance(constrain, dict):
        raise RlcwError(
            "constrain must be a mapping", where=f"{where}.constrain", hint="e.g. constrain: {limit: start, lr: 2.0}"
        )
    unknown = sorted(set(constrain) - set(CONSTRAIN_OPTIONS))
    if unknown:
        raise RlcwError(
            f"unknown constrain option {unknown[0]!r}",
            where=f"{where}.constrain",
            hint=f"options: {CONSTRAIN_OPTIONS}",
        )
    if weight < 0:
        raise RlcwError(
            f"a constrained spec's weight must be positive, got {weight}",
            where=f"{where}.weight",
            hint="the term is already -multiplier * cost; give the cost itself (e.g. slop, ended_short) and weight 1",
        )
    try:  # the values checked now, not when the (perhaps slow) reward is built
        ConstrainedReward(lambda *a, **k: [], **constrain)
    except ValueError as exc:
        raise RlcwError(str(exc), where=f"{where}.constrain") from None
    return dict(constrain)


def gate_options(spec: dict, defaults: dict, where: str) -> dict | None:
    """A spec's `gate` (rlcw.rewards.gated: the reward counts only for stories that ended inside their word range,
    or did not end short of it) as {gate, max_tokens}, checked; None when the spec has none. It needs the completion
    cap (`max_tokens`: the recipe's, or the spec's where its type takes one) to tell a cut story, and does not go
    with `constrain` (a gate ranks, a constraint prices a cost)."""
    from rlcw.rewards.gated import GATES, Gate

    gate = spec.get("gate")
    if gate is None:
        return None
    if gate not in GATES:
        raise RlcwError(f"unknown gate {gate!r}", where=f"{where}.gate", hint=f"gates: {', '.join(GATES)}")
    if spec.get("constrain") is not None:
        raise RlcwError(
            "gate and constrain do not go together",
            where=f"{where}.gate",
            hint="gate a reward (e.g. the RM); constrain a cost (ended_short, slop) in a spec of its own",
        )
    max_tokens = spec.get("max_tokens", defaults.get("max_tokens"))
    try:  # the wrapper's own check, now rather than when the (perhaps slow) reward is built
        Gate(lambda *a, **k: [], max_tokens, gate)
    except ValueError as exc:
        raise RlcwError(
            str(exc), where=f"{where}.gate", hint="grpo and rloo pass their completion cap to every reward spec"
        ) from None
    return {"gate": gate, "max_tokens": max_tokens}


def innermost(func):
    """The reward a wrapper (rlcw.rewards.anchored, rlcw.rewards.gated: each keeps it as `inner`) wraps, to the
    last layer: a BT spec's BTScorer."""
    while hasattr(func, "inner"):
        func = func.inner
    return func


@dataclass
class RewardSet:
    """What `build_reward_set` built: the reward callables, their weights, and `scorer`: the RM scorer
    (`rlcw.rm.scoring`) of the first `bt` reward of the recipe's own `rm_path` (`defaults["rm_path"]`, left
    out of the spec or the same), else None; the `rm` evaluator reuses its loaded model."""

    funcs: list
    weights: list[float]
    scorer: Any = None


def build_rewards(specs, defaults: dict | None = None, key: str = "rewards") -> tuple[list, list[float]]:
    """(reward callables, weights) from a list of specs or a mapping name -> spec.

    A spec with `weight: 0` is left out; no reward at all is an error. `key` is where the specs sit in
    the user's config (recipes pass "reward.specs"), so every error names the key to fix."""
    built = build_reward_set(specs, defaults, key)
    return built.funcs, built.weights


def build_reward_set(specs, defaults: dict | None = None, key: str = "rewards") -> RewardSet:
    """`build_rewards` that also keeps the scorer of the recipe's `rm_path` as it builds it (see RewardSet).
    Every spec is parsed before any (slow) constructor runs."""
    default_rm = (defaults or {}).get("rm_path")
    parsed = parse_specs(specs, defaults, key)
    funcs, scorer = [], None
    for spec in parsed:
        funcs.append(build(spec))
        own_rm = spec.type == "bt" and default_rm and Path(spec.args[0]) == Path(default_rm)
        if scorer is None and own_rm:
            scorer = innermost(funcs[-1]).scorer  # an anchored or gated reward's own RM scorer
    names = [f.__name__ for f in funcs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise RlcwError(f"two rewards share the name '{dup}'", where=key, hint="give each spec its own `name`")
    return RewardSet(funcs, [s.weight for s in parsed], scorer)


# types whose constructor loads a model: `check_rewards` checks their folder instead of building them
_MODEL_TYPES = ("bt", "genrm")


def spec_weight(spec: dict, where: str) -> float:
    """A spec's `weight` as a finite float (default 1.0); nan, inf, text or a bool is an error naming it."""
    value = spec.get("weight", 1.0)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        raise RlcwError(
            f"weight must be a finite number, got {value!r}",
            where=f"{where}.weight",
            hint="e.g. weight: 1.0 (0 drops the reward)",
        )
    return float(value)


def check_rewards(specs, defaults: dict | None = None, key: str = "rewards") -> None:
    """Every check `build_rewards` makes, before anything loads: the specs parsed (`parse_specs`: types,
    weights, options, anchors), a bt/genrm spec's RM folder (its rlcw_rm.json), a python target (imported and
    its signature checked). Cheap constructors (length shaping, python, remote URLs) are built and dropped; no
    model loads."""
    for spec in parse_specs(specs, defaults, key):
        if spec.type in _MODEL_TYPES:
            check_rm_folder(spec.args[0], f"{spec.where}.rm_path")
            continue
        try:
            func = build(spec)
        except RlcwError as exc:  # a library's own location (e.g. "reward spec (type python)") -> the user's key
            if exc.where and exc.where.startswith(spec.where):
                raise
            raise RlcwError(exc.message, where=spec.where, hint=exc.hint) from None
        if spec.type == "remote":
            check_servers(func.urls, func.timeout_s, spec.where)


def check_rm_folder(path, where: str) -> None:
    """An error naming `where` unless `path` is a reward-model folder rlcw wrote (its rlcw_rm.json reads)."""
    from rlcw.rm.render import load_spec

    if not Path(path).is_dir():
        raise RlcwError(
            f"no reward model at {path}",
            where=where,
            hint="train one first with `rlcw train-rm` (it writes <run>/model; configs/train_rm/cpu.yaml on a CPU), "
            "or point rm_path at an RM folder",
        )
    load_spec(path)


# What each type's reward looks like by default (`rlcw <command> --help` prints it beside the options).
REWARD_SCALES = {
    "bt": "the RM's score (a logit, unbounded; the length-controlled residual when the RM folder holds a fit)",
    "genrm": "mean win probability against groupmates, 0..1",
    "remote": "whatever the reward servers return",
    "length_range": "0 inside the prompt's word range, down to -(miss + clip) outside it",
    "overlong": "0 up to max_tokens - buffer, then down to -1 at the cap",
    "python": "whatever the target returns",
    "rubric": "weighted mean of P(yes) (or parsed Yes = 1 / No = 0) over the criteria, 0..1; NaN with no valid verdict",
    "slop": "% of a story's words inside over-used phrases, 0..100: give it a negative weight",
    "ended_short": "1 for a story that ended below the prompt's word range, else 0: a negative weight or `constrain`",
}
# constructor arguments a recipe fills or that take objects, never spec options
_NOT_OPTIONS = ("device", "model", "tokenizer", "spec", "scorer", "transport")


def describe_types() -> str:
    """Every reward type with its options (= defaults) and default scale, for `--help`."""
    lines = [
        "spec keys: type (required), weight (default 1.0; 0 drops it), name (logged as rewards/<name>/mean), "
        "anchor ({references: FILE, human, per_prompt}: sigmoid(r - r_ref) over start stories, PAR), "
        "constrain ({limit: start | number, lr, start_calls, max_multiplier}: the value as a cost held under "
        "the limit by a Lagrange multiplier)"
    ]
    for kind, (target, first) in REWARD_TYPES.items():
        try:
            params = inspect.signature(_constructor(kind)).parameters.values()
        except RlcwError:
            lines.append(f"{kind}: not available here ({target})")
            continue
        opts = []
        for i, p in enumerate(params):
            if p.name in _NOT_OPTIONS or p.kind is p.VAR_KEYWORD:
                continue
            if i == 0 and first:  # the constructor's first argument is the spec's `first` option
                opts.append(first + (" (default reward.rm_path)" if first == "rm_path" else ""))
                continue
            opts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
        extra = " + any keyword of the target" if kind == "python" else ""
        lines.append(f"{kind}: {', '.join(opts)}{extra}")
        lines.append(f"    scale: {REWARD_SCALES.get(kind, 'see ' + target)}")
    return "\n".join(lines)


def check_servers(urls: list[str], timeout_s: float, where: str) -> None:
    """One GET <url>/health per reward server (its own timeout) before a run starts: down or silent is an
    error naming the spec and the URL."""
    import httpx

    for url in urls:
        try:
            httpx.get(f"{url}/health", timeout=timeout_s)
        except httpx.TimeoutException:
            raise RlcwError(
                f"the reward server {url} did not answer within timeout_s={timeout_s} s",
                where=where,
                hint="start it (or wait until it has loaded), or raise the spec's timeout_s",
            ) from None
        except httpx.HTTPError as exc:
            raise RlcwError(
                f"cannot reach the reward server {url}: {exc}",
                where=where,
                hint="start it with `rlcw serve-rm`, or fix the spec's urls",
            ) from None
