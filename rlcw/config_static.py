"""A config dataclass read from its source code, without importing its module.

A recipe module imports torch and TRL (seconds); its config is plain dataclass fields. The CLI answers from
what is read here before any heavy import: a misspelt key, a value of the wrong type, out of its bounds or not one
of its choices (`rlcw.config.at_least`, `above`, `one_of`) in a YAML file or a `key=value` override, and
`rlcw <command> --help`. Fields are followed through `from x import Name` statements, base classes and nested
dataclass sections; defaults are evaluated when they are literals, module constants,
`field(default=...)`/`field(default_factory=...)` or `at_least(...)`/`above(...)`/`one_of(...)`. Anything this
reader cannot follow makes it return None and the CLI answers after the import as before (tests hold these keys
equal to `rlcw.config.flat_keys`, and this help equal to `rlcw.config.describe`, for every command).

    keys = static_keys("rlcw.recipes.grpo", "GRPORecipeConfig")   # {"train.max_steps": False, "train": True, ...}
    leaves = static_leaves("rlcw.recipes.grpo", "GRPORecipeConfig")  # key -> Leaf(type "int", low 1, ...)
    retired = static_retired_keys("rlcw.recipes.grpo", "GRPORecipeConfig")  # old key -> its new place
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import io
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rlcw.config import MOVED_KEYS, REMOVED_KEYS, retired_entries

_BUILTIN_LEAVES = {"str", "int", "float", "bool", "list", "dict", "tuple", "Any", "Path", "None"}
_EMPTY_FACTORIES = {"list": list, "dict": dict, "set": set, "tuple": tuple}
_NO_DEFAULT = object()
_BOUNDED = ("at_least", "above", "one_of")  # rlcw.config's field helpers: the default is their second argument


class _Unresolved(Exception):
    """A name, base class or default the reader cannot follow."""


@dataclass(frozen=True)
class Leaf:
    """A leaf key as read from source: its type as `rlcw.config.describe` prints it, its default, the bound of
    an `at_least(low, default, why)` / `above(...)` field or the choices of a `one_of(choices, default)` field,
    and its comment."""

    type: str
    default: Any = _NO_DEFAULT  # _NO_DEFAULT: not evaluated (help falls back to the import)
    low: float | None = None
    why: str = ""
    above: bool = False  # the bound is strict (`above`): `low` itself is out
    choices: tuple | None = None
    comment: str = ""


@dataclass(frozen=True)
class _Field:
    name: str
    annotation: ast.expr
    default: ast.expr | None
    module: str  # where the field is written (names in it resolve there)
    comment: str


@lru_cache(maxsize=64)
def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise _Unresolved(module)
    with open(spec.origin, encoding="utf-8") as fh:
        return fh.read()


@lru_cache(maxsize=64)
def _tree(module: str) -> ast.Module:
    return ast.parse(_source(module))


@lru_cache(maxsize=64)
def _comments(module: str) -> dict[int, tuple[str, bool]]:
    return comment_lines(_source(module))


def comment_lines(source: str) -> dict[int, tuple[str, bool]]:
    """line -> (the comment's text, whether the comment is the whole line) of Python source."""
    return {
        tok.start[0]: (tok.string.lstrip("#").strip(), tok.line.strip().startswith("#"))
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }


def field_comment(stmt: ast.stmt, comments: dict[int, tuple[str, bool]]) -> str:
    """A field's comment: the whole-line comments right above it, then the one beside it."""
    above, line = [], stmt.lineno - 1
    while line in comments and comments[line][1]:
        above.insert(0, comments[line][0])
        line -= 1
    beside = [text for n, (text, whole) in comments.items() if stmt.lineno <= n <= stmt.end_lineno and not whole]
    return " ".join(above + beside)


def _find_class(module: str, name: str, depth: int = 0) -> tuple[ast.ClassDef, str] | None:
    """The class statement `name` of `module`, following `from x import name` (None: not a class there)."""
    if depth > 8:
        raise _Unresolved(name)
    for node in _tree(module).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, module
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    if not node.module.startswith("rlcw"):
                        return None  # a third-party class: never a config section
                    return _find_class(node.module, alias.name, depth + 1)
    return None


def _imported_module(module: str, alias: str) -> str:
    """The rlcw module a name stands for in `module` (`from rlcw.recipes import grpo`, `import rlcw.x as y`)."""
    for node in _tree(module).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rlcw"):
            for a in node.names:
                if (a.asname or a.name) == alias and importlib.util.find_spec(f"{node.module}.{a.name}"):
                    return f"{node.module}.{a.name}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if (a.asname or a.name) == alias and a.name.startswith("rlcw"):
                    return a.name
    raise _Unresolved(alias)


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return True
    return False


def _fields(node: ast.ClassDef, module: str) -> list[_Field]:
    """A dataclass's fields, base classes' first (dataclass order); a subclass's comment wins over its base's
    only when it has one (as `rlcw.config.describe` reads them)."""
    out: dict[str, _Field] = {}
    for base in node.bases:
        if not isinstance(base, ast.Name):
            raise _Unresolved(ast.dump(base))
        found = _find_class(module, base.id)
        if found is None or not _is_dataclass(found[0]):
            raise _Unresolved(base.id)
        out.update({f.name: f for f in _fields(*found)})
    comments = _comments(module)
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if isinstance(stmt.annotation, ast.Subscript) and getattr(stmt.annotation.value, "id", "") == "ClassVar":
                continue
            name = stmt.target.id
            comment = field_comment(stmt, comments) or (out[name].comment if name in out else "")
            out[name] = _Field(name, stmt.annotation, stmt.value, module, comment)
    return list(out.values())


def _section(annotation: ast.expr, module: str) -> tuple[ast.ClassDef, str] | None:
    """The dataclass an annotation names (also `X | None`), else None (a leaf)."""
    if isinstance(annotation, ast.BinOp):
        return _section(annotation.left, module) or _section(annotation.right, module)
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return None
    if isinstance(annotation, ast.Subscript):
        return None  # dict[...], list[...], Optional is not used by rlcw configs
    if isinstance(annotation, ast.Attribute) and isinstance(annotation.value, ast.Name):  # module.Class
        found = _find_class(_imported_module(module, annotation.value.id), annotation.attr)
        return found if found is not None and _is_dataclass(found[0]) else None
    if not isinstance(annotation, ast.Name):
        raise _Unresolved(ast.dump(annotation))
    if annotation.id in _BUILTIN_LEAVES:
        return None
    found = _find_class(module, annotation.id)
    return found if found is not None and _is_dataclass(found[0]) else None


def _type_text(annotation: ast.expr, module: str, top: bool = True) -> str:
    """The type as `rlcw.config.type_name` prints the real one: `dict` for a bare `dict[str, Any]` (a generic
    alias's __name__), `dict[str, Any] | None` inside a union, a class by its module path."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return f"{_type_text(annotation.left, module, False)} | {_type_text(annotation.right, module, False)}"
    if isinstance(annotation, ast.Subscript):
        return _type_text(annotation.value, module) if top else ast.unparse(annotation)
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return "None"
    if isinstance(annotation, ast.Name) and annotation.id in _BUILTIN_LEAVES:
        return annotation.id
    found = _section(annotation, module)
    if found is None:
        raise _Unresolved(ast.unparse(annotation))
    return f"{found[1]}.{found[0].name}"


def _constant(module: str, name: str, depth: int = 0) -> Any:
    """The value of a module-level constant (`NAME = <literal>`), following `from rlcw.x import NAME`."""
    if depth > 8:
        raise _Unresolved(name)
    for node in _tree(module).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            return _value(node.value, module, depth + 1)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rlcw"):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _constant(node.module, alias.name, depth + 1)
    raise _Unresolved(name)


def _call_name(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")


def _value(node: ast.expr | None, module: str, depth: int = 0) -> Any:
    """A default's value: literals and containers of them (`{**NAME, ...}` too), module constants, `field(...)`,
    `at_least(...)`, `above(...)`, `one_of(...)`."""
    if node is None:
        raise _Unresolved("a field without a default")
    if isinstance(node, ast.Call) and _call_name(node) in ("field", *_BOUNDED):
        kw = {k.arg: k.value for k in node.keywords}
        if _call_name(node) in _BOUNDED:
            return _value(node.args[1] if len(node.args) > 1 else kw.get("default"), module, depth)
        if "default" in kw:
            return _value(kw["default"], module, depth)
        factory = kw.get("default_factory")
        if isinstance(factory, ast.Name) and factory.id in _EMPTY_FACTORIES:
            return _EMPTY_FACTORIES[factory.id]()
        if isinstance(factory, ast.Lambda):
            return _value(factory.body, module, depth)
        raise _Unresolved(ast.unparse(node))
    if isinstance(node, ast.Name):
        return _constant(module, node.id, depth)
    if isinstance(node, ast.Call) and _call_name(node) in _EMPTY_FACTORIES and len(node.args) == 1:  # list(NAMES)
        return _EMPTY_FACTORIES[_call_name(node)](_value(node.args[0], module, depth))
    if isinstance(node, ast.Dict):  # `**NAME` entries merge a constant dict in
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            out.update(_value(v, module, depth) if k is None else {_value(k, module, depth): _value(v, module, depth)})
        return out
    if isinstance(node, ast.List | ast.Tuple):
        items = [_value(e, module, depth) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        raise _Unresolved(ast.unparse(node)) from None


def _bound(node: ast.expr | None, module: str) -> tuple[float | None, str, bool, tuple | None]:
    """(low, why, strict, choices) of an `at_least(low, default, why)`, `above(...)` or `one_of(choices, default)`
    default; (None, "", False, None) for any other."""
    name = _call_name(node) if isinstance(node, ast.Call) else ""
    if name not in _BOUNDED:
        return None, "", False, None
    kw = {k.arg: k.value for k in node.keywords}
    if name == "one_of":
        return None, "", False, tuple(_value(node.args[0] if node.args else kw["choices"], module))
    low = ast.literal_eval(node.args[0] if node.args else kw["low"])
    why = node.args[2] if len(node.args) > 2 else kw.get("why")
    return low, ast.literal_eval(why) if why is not None else "", name == "above", None


def _leaf(f: _Field) -> Leaf:
    """A leaf; a type or default this reader cannot evaluate is left unread (only help needs them)."""
    try:
        text, default = _type_text(f.annotation, f.module), _value(f.default, f.module)
    except _Unresolved:
        text, default = "", _NO_DEFAULT
    return Leaf(text, default, *_bound(f.default, f.module), comment=f.comment)


def _walk(node: ast.ClassDef, module: str, prefix: str, out: dict[str, Leaf | None]) -> None:
    for f in _fields(node, module):
        sub = _section(f.annotation, f.module)  # an inherited field names its classes in its own module
        is_none = isinstance(f.default, ast.Constant) and f.default.value is None
        if sub is not None and not is_none:
            out[f"{prefix}{f.name}"] = None  # a section
            _walk(*sub, f"{prefix}{f.name}.", out)
        else:
            out[f"{prefix}{f.name}"] = _leaf(f)


@lru_cache(maxsize=64)
def _read(module: str, cls_name: str) -> dict[str, Leaf | None] | None:
    try:
        found = _find_class(module, cls_name)
        if found is None:
            return None
        out: dict[str, Leaf | None] = {}
        _walk(*found, "", out)
        return out
    except (_Unresolved, SyntaxError, OSError, ImportError, ValueError, KeyError, IndexError):
        return None


def _class_var(node: ast.ClassDef, module: str, name: str) -> Any:
    """The value of the class variable `name` (`NAME: ClassVar[...] = <literal or constant>`), a base class's when
    the class has none (None: no class in the chain sets it)."""
    for stmt in node.body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == name and stmt.value is not None:
            return _value(stmt.value, module)
    for base in node.bases:
        found = _find_class(module, base.id) if isinstance(base, ast.Name) else None
        value = _class_var(*found, name) if found is not None else None
        if value is not None:
            return value
    return None


def _walk_retired(node: ast.ClassDef, module: str, prefix: str, out: dict[str, str]) -> None:
    moved, removed = (_class_var(node, module, name) or {} for name in (MOVED_KEYS, REMOVED_KEYS))
    out.update(retired_entries(prefix, moved, removed))
    for f in _fields(node, module):
        sub = _section(f.annotation, module)
        if sub is not None and not (isinstance(f.default, ast.Constant) and f.default.value is None):
            _walk_retired(*sub, f"{prefix}{f.name}.", out)


def static_retired_keys(module: str, cls_name: str) -> dict[str, str] | None:
    """`rlcw.config.retired_keys` of the class, from source (old dotted key -> what happened to it); None when
    the source cannot be followed."""
    try:
        found = _find_class(module, cls_name)
        if found is None:
            return None
        out: dict[str, str] = {}
        _walk_retired(*found, "", out)
        return out
    except (_Unresolved, SyntaxError, OSError, ImportError, ValueError, KeyError, IndexError):
        return None


def static_keys(module: str, cls_name: str) -> dict[str, bool] | None:
    """Every dotted key of the config dataclass `cls_name` of `module` -> True for a section, False for a leaf
    (what `rlcw.config.flat_keys` gives for leaves); None when the source cannot be followed."""
    read = _read(module, cls_name)
    return None if read is None else {k: leaf is None for k, leaf in read.items()}


def static_leaves(module: str, cls_name: str) -> dict[str, Leaf] | None:
    """Every leaf key -> its `Leaf` (type, default, bound, comment); None when the source cannot be followed."""
    read = _read(module, cls_name)
    return None if read is None else {k: leaf for k, leaf in read.items() if leaf is not None}


def static_help(module: str, cls_name: str, sections: dict[str, str] | None = None) -> str | None:
    """`rlcw.config.describe` of the class, from source; None when a default cannot be evaluated here."""
    leaves = static_leaves(module, cls_name)
    if leaves is None or any(leaf.default is _NO_DEFAULT for leaf in leaves.values()):
        return None
    lines = []
    for key, leaf in leaves.items():
        line = f"  {key}: {leaf.type} = {leaf.default!r}"
        lines.append(f"{line}  # {leaf.comment}" if leaf.comment else line)
        doc = (sections or {}).get(key.rpartition(".")[2]) if isinstance(leaf.default, dict) else None
        if doc:
            lines += [f"      {row}" for row in doc.splitlines()]
    return "\n".join(lines)


def static_doc(module: str) -> str | None:
    """The module's docstring, as `module.__doc__` holds it (None when there is none or it cannot be read)."""
    try:
        return ast.get_docstring(_tree(module), clean=False)
    except (_Unresolved, SyntaxError, OSError, ImportError, ValueError):
        return None


def static_constant(module: str, name: str) -> Any:
    """A module-level literal constant (e.g. a tuple of names) without importing its module; None if unreadable."""
    try:
        return _constant(module, name)
    except (_Unresolved, SyntaxError, OSError, ImportError, ValueError):
        return None


def _parameters(fn: ast.FunctionDef, module: str, skip_first: bool) -> list[inspect.Parameter]:
    a, P = fn.args, inspect.Parameter
    positional = [(arg, P.POSITIONAL_ONLY) for arg in a.posonlyargs] + [
        (arg, P.POSITIONAL_OR_KEYWORD) for arg in a.args
    ]
    defaults = [P.empty] * (len(positional) - len(a.defaults)) + [_value(d, module) for d in a.defaults]
    out = [P(arg.arg, kind, default=d) for (arg, kind), d in zip(positional, defaults, strict=True)]
    out = out[1:] if skip_first else out
    if a.vararg:
        out.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append(P(arg.arg, P.KEYWORD_ONLY, default=P.empty if d is None else _value(d, module)))
    if a.kwarg:
        out.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return out


def static_signature(module: str, name: str) -> inspect.Signature | None:
    """`inspect.signature` of a module-level function or a class with its own `__init__`, read from source (None
    when it cannot be read: another shape, or a default that is not a literal or constant)."""
    try:
        for node in _tree(module).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return inspect.Signature(_parameters(node, module, skip_first=False))
            if isinstance(node, ast.ClassDef) and node.name == name:
                init = [s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
                return inspect.Signature(_parameters(init[0], module, skip_first=True)) if init else None
        return None
    except (_Unresolved, SyntaxError, OSError, ImportError, ValueError):
        return None
