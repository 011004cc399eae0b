"""The docs: the MkDocs site builds strictly, every command has a page and a README row, the README stays a short
guide, the results page dates every figure, and nothing in the repository points at files or trackers outside it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlcw.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_LIMIT = 15_000
# References to things a user of this repository does not have: tracker issues, review rounds, lab notes.
# Written with character classes so this file's own source does not match it.
OUTSIDE = re.compile(r"issue[ -]\d|round[- ]\d|field[- ]notes|closing[ ]note", re.IGNORECASE)
SCANNED = ["rlcw", "configs", "docs", "tests", "scripts", "slurm", "README.md", "mkdocs.yml", "pyproject.toml"]
SKIP_DIRS = {"__pycache__", ".pytest_cache"}


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_mkdocs_is_installed():
    """The dev extra carries mkdocs and the Material theme; without them the build test below cannot run."""
    import material  # noqa: F401
    import mkdocs  # noqa: F401


def test_docs_site_builds_strictly(tmp_path):
    done = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ["index.html", "results/index.html", "commands/grpo/index.html", "troubleshooting/index.html"]:
        assert (tmp_path / "site" / page).is_file(), page


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda docs: (docs / "orphan.md").write_text("# Orphan\n"), "orphan.md"),
        (lambda docs: (docs / "index.md").open("a").write("\n[gone](no-such-page.md)\n"), "no-such-page.md"),
        (lambda docs: (docs / "index.md").open("a").write("\n[gone](results.md#no-such-anchor)\n"), "no-such-anchor"),
    ],
    ids=["page-outside-nav", "broken-link", "broken-anchor"],
)
def test_strict_build_fails_on_a_broken_site(tmp_path, damage, message):
    """The validation settings in mkdocs.yml turn these into failures (MkDocs only logs some of them by default)."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    damage(tmp_path / "docs")
    done = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert message in done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_a_page_and_a_readme_row(name):
    page = ROOT / "docs" / "commands" / f"{name}.md"
    assert page.is_file(), f"add {page.relative_to(ROOT)} and list it in mkdocs.yml's nav"
    assert page.read_text().startswith(f"# {name}\n")
    assert re.search(rf"^\| \[?`{re.escape(name)}`", README.read_text(), re.MULTILINE), f"README table lacks {name}"


def test_readme_is_a_short_guide_whose_links_resolve():
    text = README.read_text()
    assert len(text) <= README_LIMIT, (
        f"README.md has {len(text)} characters (limit {README_LIMIT}): move depth to docs/"
    )
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_markdown_table_rows_match_their_header():
    """A `|` inside a table cell (even in backticks) splits the cell and shifts the row; MkDocs does not warn."""
    bad = []
    for path in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        header = None
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.startswith("|"):
                header = None
                continue
            if header is None:
                header = line.count("|")
            elif line.count("|") != header:
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line[:80]}")
    assert not bad, "table rows with another number of cells than their header:\n" + "\n".join(bad)


def test_results_page_dates_every_section():
    """Each section that holds figures names its date (YYYY-MM-DD) and commit in its heading."""
    lines = (ROOT / "docs" / "results.md").read_text().splitlines()
    headings = [(i, line) for i, line in enumerate(lines) if re.match(r"#{2,4} ", line)]
    undated = []
    for k, (i, line) in enumerate(headings):
        level = len(line.split(" ", 1)[0])
        nxt = headings[k + 1] if k + 1 < len(headings) else None
        body = lines[i + 1 : nxt[0] if nxt else len(lines)]
        if nxt and len(nxt[1].split(" ", 1)[0]) > level and not any(s.strip() for s in body):
            continue  # a topic heading directly followed by its dated subsections
        if not (re.search(r"\d{4}-\d{2}-\d{2}", line) and re.search(r"commits? [0-9a-f]{7}", line)):
            undated.append(line)
    assert len(headings) >= 10
    assert not undated, f"results sections without date and commit: {undated}"


def _doc_texts() -> dict[str, str]:
    files = [README, *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "configs").rglob("*.yaml"))]
    return {str(f.relative_to(ROOT)): f.read_text() for f in files}


def _resolves(dotted: str) -> bool:
    """`rlcw.a.b` is a module, or an attribute chain of the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except ModuleNotFoundError:  # a parent that is a module, not a package
            continue
        obj = importlib.import_module(module)
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_module_names_in_the_docs_exist():
    """Docs and README name rlcw modules and objects; a module that moved must be renamed there too."""
    named = {
        (where, name)
        for where, text in _doc_texts().items()
        for name in re.findall(r"\brlcw(?:\.[A-Za-z_]\w*)+", text)
        if not where.startswith("configs/")
    }
    assert len(named) > 10
    stale = sorted(f"{where}: {name}" for where, name in named if not _resolves(name))
    assert not stale, "names that do not resolve:\n" + "\n".join(stale)


def test_repository_paths_in_the_docs_exist():
    """Paths into the repository (configs, scripts, slurm, rlcw, tests, docs) named by the docs, README and configs."""
    pattern = r"(?<![\w/.-])((?:rlcw|configs|scripts|slurm|tests|docs)/[\w./<>{}*-]*[\w/>*}])"
    named = {
        (where, path)
        for where, text in _doc_texts().items()
        for path in re.findall(pattern, text)
        if not set(path) & set("<>{}*")  # placeholders such as configs/<command>/*.yaml
    }
    assert len(named) > 20
    missing = sorted(f"{where}: {path}" for where, path in named if not (ROOT / path).exists())
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def _scanned_files():
    for entry in SCANNED:
        path = ROOT / entry
        if path.is_file():
            yield path
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            yield from (Path(folder) / f for f in files)


def test_nothing_points_outside_the_repository():
    hits = []
    for path in _scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary assets
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "say the fact itself, not where it was discussed:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "line, caught",
    [
        ("see " + "issue" + " 14 for the table", True),
        ("(the " + "issue" + "-14 run)", True),
        ("as in the " + "round" + "-2 notes", True),
        ("FIELD" + "-NOTES, GRPO calibration", True),
        ("the " + "closing" + " note says", True),
        ("100 bins symmetric about zero", False),
        ("an issue with the tokenizer", False),
    ],
)
def test_the_outside_reference_pattern(line, caught):
    assert bool(OUTSIDE.search(line)) is caught
