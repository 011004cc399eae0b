"""Measured figures live on the dated results pages (docs/results.md and docs/results/), not in rlcw's docstrings
or comments, where they go stale: no speed ratio ("1.24x"), throughput (tok/s, GFLOP/s) or time per step/story."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rlcw"
FIGURE = re.compile(
    r"(?<![\w.{])\d+(\.\d+)?x(?![\w{])"  # a speed ratio: 1.24x, ~30x
    r"|\btok/s\b|\bGFLOP\b|GFLOP/s"  # throughput
    r"|\b\d+(\.\d+)? ?(s|ms) (a|per|for each) (step|story|stories|quickstart|policy|call|token)\b"  # time per unit
    r"|\b\d+(\.\d+)?-s (compile|step|run)\b"
)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module's source."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body and isinstance(node.body[0], ast.Expr):
                first = node.body[0].lineno
                out += [(first + i, line) for i, line in enumerate(doc.splitlines())]
    return out


def figures(source: str) -> list[tuple[int, str]]:
    return [(line, text.strip()) for line, text in prose(source) if FIGURE.search(text)]


def test_the_pattern_finds_figures_and_leaves_code_alone():
    source = '''"""A sampler: 1.24x the old one at 213 tok/s."""

def f(raw):
    # ~4.5 s a step here
    return f"byte 0x{raw:02x}"  # hex, not a ratio
'''
    assert sorted(line for line, _ in figures(source)) == [1, 4]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_measured_figure_in_docstrings_or_comments(path):
    found = figures(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(PACKAGE.parent)}: move these figures to the results pages: {found}"
