"""The results pages: docs/results.md holds the figures in force in a page a reader can take in, each topic linking to
its history under docs/results/; every section that reports figures names its date and commit in its heading; every
link into the results pages from the docs and the README lands on a file, and on a heading, that exist."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SUMMARY = DOCS / "results.md"
DETAIL = DOCS / "results"
SUMMARY_LIMIT = 20_000
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
COMMIT = re.compile(r"\bcommits? [0-9a-f]{7,40}\b")
HEADING = re.compile(r"(#{2,3}) (.+)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")  # markdown links, images left out


def _prose(text: str) -> list[str]:
    """The lines of `text` outside fenced code blocks (a heading or link inside one is not one)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        lines.append("" if fenced else line)
    return lines


def sections(text: str) -> list[tuple[int, str, str]]:
    """(level, heading, body up to the next heading) for every `##` and `###` heading."""
    lines = _prose(text)
    marks = [(i, m) for i, line in enumerate(lines) if (m := HEADING.fullmatch(line.rstrip()))]
    out = []
    for k, (i, m) in enumerate(marks):
        end = marks[k + 1][0] if k + 1 < len(marks) else len(lines)
        out.append((len(m.group(1)), m.group(2), "\n".join(lines[i + 1 : end])))
    return out


def reports_figures(body: str) -> bool:
    """A section reports figures when its own text (link targets aside) holds a number."""
    return bool(re.search(r"\d", re.sub(r"\]\([^)]*\)", "]", body)))


def undated(text: str) -> list[str]:
    """Headings of sections that report figures without a date (YYYY-MM-DD) and a commit hash in the heading."""
    return [
        heading
        for _, heading, body in sections(text)
        if reports_figures(body) and not (DATE.search(heading) and COMMIT.search(heading))
    ]


def slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (Python-Markdown's toc slugify of its text)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("**", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(text: str) -> set[str]:
    """Every heading's anchor on a page (a repeated slug gets _1, _2, ... as MkDocs does)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(text):
        if m := re.fullmatch(r"#{1,6} (.+)", line.rstrip()):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}_{n}")
    return out


def is_results_page(path: Path) -> bool:
    return path == SUMMARY.resolve() or DETAIL.resolve() in path.parents


def links(path: Path, text: str) -> list[tuple[Path, str]]:
    """(target file, anchor) of every relative link in `text`, resolved from `path`'s folder."""
    out = []
    for target in LINK.findall("\n".join(_prose(text))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
            continue
        file, _, anchor = target.partition("#")
        out.append(((path.parent / file).resolve() if file else path.resolve(), anchor))
    return out


def broken_results_links(pages: dict[Path, str]) -> list[str]:
    """Links into the results pages whose file is missing, or whose #anchor is no heading of that file."""
    bad = []
    for path, text in pages.items():
        for target, anchor in links(path, text):
            if not is_results_page(target):
                continue
            where = f"{path.relative_to(ROOT)} -> {target.relative_to(ROOT)}"
            if not target.is_file():
                bad.append(f"{where}: no such file")
            elif anchor and anchor not in anchors(target.read_text()):
                bad.append(f"{where}#{anchor}: no such heading")
    return bad


def topics_without_history(text: str, path: Path = SUMMARY) -> list[str]:
    """`##` topics of the summary whose text (their `###` sections included) links to no existing file under
    docs/results/."""
    topics: list[tuple[str, str]] = []
    for level, heading, body in sections(text):
        if level == 2:
            topics.append((heading, body))
        elif topics:
            topics[-1] = (topics[-1][0], topics[-1][1] + body)
    missing = []
    for heading, body in topics:
        targets = [t for t, _ in links(path, body)]
        if not any(DETAIL.resolve() in t.parents and t.is_file() for t in targets):
            missing.append(heading)
    return missing


def detail_pages() -> list[Path]:
    return sorted(DETAIL.glob("*.md"))


def test_the_summary_is_short():
    size = len(SUMMARY.read_text())
    assert size < SUMMARY_LIMIT, f"docs/results.md has {size} characters: move history to a page under docs/results/"


def test_there_are_detail_pages_and_the_summary_has_topics():
    assert len(detail_pages()) >= 5
    assert len([s for s in sections(SUMMARY.read_text()) if s[0] == 2]) >= 5


@pytest.mark.parametrize("page", [SUMMARY, *detail_pages()], ids=lambda p: str(p.relative_to(DOCS)))
def test_every_section_with_figures_names_date_and_commit(page):
    text = page.read_text()
    assert any(reports_figures(body) for _, _, body in sections(text)), "a results page without figures"
    assert not undated(text), f"sections without date and commit in their heading: {undated(text)}"


def test_every_topic_links_to_its_history():
    assert not topics_without_history(SUMMARY.read_text())


def test_every_detail_page_is_linked_from_the_summary():
    targets = {t for t, _ in links(SUMMARY, SUMMARY.read_text())}
    assert not [p.name for p in detail_pages() if p.resolve() not in targets]


def test_links_to_the_results_pages_resolve():
    pages = {p: p.read_text() for p in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]}
    hits = [t for path, text in pages.items() for t, _ in links(path, text) if is_results_page(t)]
    assert len(hits) > 10, "the docs link into the results pages"
    assert not broken_results_links(pages)


# The checks above catch what they are for: each damaged page below fails its check.

DATED = "## Quickstart\n\n### As shipped (2026-11-27, commit bff7158, 2-core Intel Xeon)\n\n| wall | 505 s |\n"


@pytest.mark.parametrize(
    "heading, caught",
    [
        ("As shipped (2026-11-27, commit bff7158, 2-core Intel Xeon)", False),
        ("As shipped (2026-11-27, commits bff7158 and cb61276)", False),
        ("As shipped (commit bff7158, 2-core Intel Xeon)", True),  # no date
        ("As shipped (2026-11-27, 2-core Intel Xeon)", True),  # no commit
        ("As shipped (2026-11-27, commit bff71, 2-core Intel Xeon)", True),  # not a commit hash
    ],
)
def test_undated_catches_a_heading_without_date_or_commit(heading, caught):
    assert bool(undated(f"## Quickstart\n\n### {heading}\n\n| wall | 505 s |\n")) is caught


def test_undated_lets_a_section_without_figures_pass():
    assert undated("## Machines\n\nEvery machine is a CPU box without a GPU.\n\n```\n## 1 2 3\n```\n") == []


def test_topics_without_history_catches_a_topic_with_no_page():
    linked = DATED + f"\nHistory: [Quickstart](results/{detail_pages()[0].name}).\n"
    assert topics_without_history(linked) == []
    assert topics_without_history(DATED) == ["Quickstart"]
    assert topics_without_history(DATED + "\nHistory: [Quickstart](results/no-such-page.md).\n") == ["Quickstart"]


def test_broken_results_links_catches_a_missing_page_or_heading():
    page = DOCS / "commands" / "example.md"
    real = detail_pages()[0]
    heading = next(h for _, h, _ in sections(real.read_text()))
    ok = f"[a](../results/{real.name}) [b](../results/{real.name}#{slug(heading)}) [c](../results.md#quickstart)"
    assert broken_results_links({page: ok}) == []
    for bad in [
        "[a](../results/no-such-page.md)",
        f"[b](../results/{real.name}#no-such-heading)",
        "[c](../results.md#no-such-topic)",
    ]:
        assert len(broken_results_links({page: bad})) == 1, bad
    assert broken_results_links({ROOT / "README.md": "[d](docs/results.md#no-such-topic)"})


def test_slug_is_mkdocs_anchor():
    assert slug("A newcomer's first commands") == "a-newcomers-first-commands"
    assert slug("PPO early stop by `train.target_kl` (2026-11-24/25, 2-core)") == (
        "ppo-early-stop-by-traintarget_kl-2026-11-2425-2-core"
    )
    assert anchors("# T\n\n## Results\n\n## Results\n") == {"t", "results", "results_1"}
