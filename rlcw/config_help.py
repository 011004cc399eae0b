"""What `rlcw <command> --help` prints about a config class: one line per key, `key: type = default  # comment`,
the comment read from the dataclass source (the lines right above a field and the one beside it).

    print(describe(GRPORecipeConfig, {"specs": "type -> options"}))

`rlcw.config_static.static_help` prints the same text from source without importing the class (a test holds the
two equal for every command).
"""

from __future__ import annotations

import dataclasses

from rlcw.config import dataclass_of, field_types, flat_keys, type_name


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the dataclass source: the comment lines right above it and the one beside it."""
    import ast
    import inspect
    import textwrap

    from rlcw.config_static import comment_lines, field_comment

    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments = comment_lines(source)
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = field_comment(node, comments)
            if text:
                out[node.target.id] = text
    return out


def _all_comments(cls: type, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass's comment wins over its base's
        if dataclasses.is_dataclass(klass):
            out.update({f"{prefix}{k}": v for k, v in field_comments(klass).items()})
    for name, tp in field_types(cls).items():
        sub = dataclass_of(tp)
        if sub is not None:
            out.update(_all_comments(sub, f"{prefix}{name}."))
    return out


def describe(cls: type, sections: dict[str, str] | None = None) -> str:
    """One line per key, `key: type = default  # its comment in the dataclass`, for `rlcw <command> --help`;
    `sections` maps a dict-valued key's leaf name to a text that documents the mapping it holds."""
    comments = _all_comments(cls)
    lines = []
    for key, (tp, default) in flat_keys(cls).items():
        line = f"  {key}: {type_name(tp)} = {default!r}"
        lines.append(f"{line}  # {comments[key]}" if key in comments else line)
        doc = (sections or {}).get(key.rpartition(".")[2]) if isinstance(default, dict) else None
        if doc:
            lines += [f"      {row}" for row in doc.splitlines()]
    return "\n".join(lines)
