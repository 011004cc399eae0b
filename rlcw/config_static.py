"""The keys of a config dataclass read from its source code, without importing its module.

A recipe module imports torch and TRL (seconds); its config keys are plain dataclass fields. The CLI checks a
YAML file and `key=value` overrides against the keys read here first, so a misspelt key answers before any
heavy import. Fields are followed through `from x import Name` statements, base classes and nested dataclass
sections; anything this reader cannot follow makes it return None and the CLI checks after the import as
before (a test holds these keys equal to `rlcw.config.flat_keys` for every command).

    keys = static_keys("rlcw.recipes.grpo", "GRPORecipeConfig")   # {"train.max_steps", ...} or None
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache

_BUILTIN_LEAVES = {"str", "int", "float", "bool", "list", "dict", "tuple", "Any", "Path", "None"}


class _Unresolved(Exception):
    """A name or base class the reader cannot follow."""


@lru_cache(maxsize=64)
def _tree(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise _Unresolved(module)
    with open(spec.origin, encoding="utf-8") as fh:
        return ast.parse(fh.read())


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


def _fields(node: ast.ClassDef, module: str) -> list[tuple[str, ast.expr, ast.expr | None]]:
    """(name, annotation, default) of a dataclass's fields, base classes' first (dataclass order)."""
    out: dict[str, tuple[str, ast.expr, ast.expr | None]] = {}
    for base in node.bases:
        if not isinstance(base, ast.Name):
            raise _Unresolved(ast.dump(base))
        found = _find_class(module, base.id)
        if found is None or not _is_dataclass(found[0]):
            raise _Unresolved(base.id)
        out.update({f[0]: f for f in _fields(*found)})
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if isinstance(stmt.annotation, ast.Subscript) and getattr(stmt.annotation.value, "id", "") == "ClassVar":
                continue
            out[stmt.target.id] = (stmt.target.id, stmt.annotation, stmt.value)
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


def _keys(node: ast.ClassDef, module: str, prefix: str, out: dict[str, bool]) -> None:
    for name, annotation, default in _fields(node, module):
        sub = _section(annotation, module)
        is_none = isinstance(default, ast.Constant) and default.value is None
        if sub is not None and not is_none:
            out[f"{prefix}{name}"] = True  # a section
            _keys(*sub, f"{prefix}{name}.", out)
        else:
            out[f"{prefix}{name}"] = False


def static_keys(module: str, cls_name: str) -> dict[str, bool] | None:
    """Every dotted key of the config dataclass `cls_name` of `module` -> True for a section, False for a leaf
    (what `rlcw.config.flat_keys` gives for leaves); None when the source cannot be followed."""
    try:
        found = _find_class(module, cls_name)
        if found is None:
            return None
        out: dict[str, bool] = {}
        _keys(*found, "", out)
        return out
    except (_Unresolved, SyntaxError, OSError, ImportError, ValueError):
        return None
