"""Synthetic agent data by back-translation (paper Section 4.2, Appendix C), as pure text functions.

From a (prompt, story) pair a teacher (1) writes each planning agent's output with the gold story
in its scratchpad ([Creative Writing Task] + [User-Written Response]) and (2) splits the story
into the five sections by returning each section's first sentence, which must occur verbatim in
the story, in order. When it does not, the split falls back, labelled in `method`:
`fuzzy` (the story sentence closest to the teacher's, difflib ratio >= cutoff, still in order) or
`proportional` (the story's paragraphs cut into five parts of about equal word count).

    answer = teacher.generate("splitter", [split_prompt(story)], 256)[0]
    sections, method, found = locate_sections(story, parse_split(answer))
"""

from __future__ import annotations

import difflib
import re

from rlcw.agents.agents import instruction
from rlcw.agents.scratchpad import LABELS, WRITING, Scratchpad, render
from rlcw.metrics.text import split_sentences

_SECTION_HELP = {
    "exposition": "the background the reader needs to step into the story's world; usually at the start.",
    "rising_action": "the choices and events that work against the characters' goals and build towards the climax.",
    "climax": "the main turning point the story has been building to.",
    "falling_action": "what follows the climax: consequences, easing tension, loose ends.",
    "resolution": "the ending: the remaining questions answered and the characters' next step shown.",
}
_HEADER = re.compile(
    r"^\W*(exposition|rising action|climax|falling action|resolution)[\]\*:\-\s]*(.*)$", re.IGNORECASE
)


def teacher_planning_prompt(agent: str, prompt: str, story: str) -> str:
    """A planning agent's prompt with the gold story in the scratchpad (the teacher's task)."""
    pad = Scratchpad([("task", prompt.strip()), ("response", story.strip())])
    return f"{instruction(agent, pad)}\n\n{render(pad.entries)}"


def split_prompt(story: str) -> str:
    """Ask for each section's header followed by its first sentence, copied exactly."""
    lines = ["Divide the story below into five parts:"]
    lines += [f"- [{LABELS[a]}]: {_SECTION_HELP[a]}" for a in WRITING]
    lines += [
        "",
        "For each part write its header ([Exposition], [Rising Action], [Climax], [Falling Action], [Resolution]) "
        "and then the part's first sentence, copied word for word from the story.",
        "",
        f"[{LABELS['response']}] {story.strip()}",
    ]
    return "\n".join(lines)


def parse_split(answer: str) -> dict[str, str]:
    """{section agent: first sentence} from a teacher's answer (missing sections are left out)."""
    names = {LABELS[a].lower(): a for a in WRITING}
    out: dict[str, str] = {}
    for line in answer.splitlines():
        m = _HEADER.match(line.strip())
        if m and m.group(2).strip():
            out.setdefault(names[m.group(1).lower()], m.group(2).strip().strip('*"\u201c\u201d').strip())
    return out


def _sentence_starts(story: str) -> list[tuple[int, str]]:
    """(offset, sentence) for each sentence, offsets into the original story text."""
    out, pos = [], 0
    for sent in split_sentences(story):
        head = sent.split()[0]
        at = story.find(head, pos)
        if at < 0:
            continue
        out.append((at, sent))
        pos = at + len(head)
    return out


def _exact(story: str, firsts: dict[str, str]) -> list[int | None]:
    starts, pos = [], 0
    for agent in WRITING[1:]:
        at = story.find(firsts[agent], pos) if firsts.get(agent) else -1
        starts.append(at if at > 0 else None)
        if at > 0:
            pos = at + 1
    return starts


def _fuzzy(story: str, firsts: dict[str, str], exact: list[int | None], cutoff: float) -> list[int | None]:
    """Fill the boundaries not found verbatim with the closest story sentence after the previous boundary."""
    sents, starts, pos = _sentence_starts(story), [], 0
    for agent, at in zip(WRITING[1:], exact, strict=False):
        if at is None:
            cands = [(difflib.SequenceMatcher(None, firsts.get(agent, ""), s).ratio(), x) for x, s in sents if x > pos]
            ratio, best = max(cands, default=(0.0, None))
            at = best if ratio >= cutoff else None
        starts.append(at)
        pos = at if at is not None else pos
    return starts


def proportional_starts(story: str) -> list[int]:
    """Offsets cutting the story's lines (paragraphs; sentences if fewer than 5 lines) into 5 word-balanced parts."""
    units = [(m.start(), len(m.group(0).split())) for m in re.finditer(r"[^\n]*\S[^\n]*", story)]
    if len(units) < 5:
        units = [(at, len(s.split())) for at, s in _sentence_starts(story)]
    cum = [0]
    for _, n in units:
        cum.append(cum[-1] + n)
    starts, prev = [], 0
    for k in range(1, 5):  # boundary k: the unit whose words-before is closest to k/5 of the story
        lo, hi = prev + 1, len(units) - (5 - k)
        if lo > hi:
            break
        prev = min(range(lo, hi + 1), key=lambda j: abs(cum[j] - cum[-1] * k / 5))
        starts.append(units[prev][0])
    return starts


def locate_sections(
    story: str, firsts: dict[str, str], fallback: str = "fuzzy", cutoff: float = 0.8
) -> tuple[dict[str, str], str, int]:
    """(sections, method, quoted sentences found verbatim and in order, 0-5): method exact, fuzzy or proportional."""
    exact = _exact(story, firsts)
    first_cut = next((x for x in exact if x is not None), len(story))
    opening = firsts.get("exposition", "")
    found = int(bool(opening) and 0 <= story.find(opening) < first_cut) + sum(x is not None for x in exact)
    method, starts = "exact", exact
    if None in starts and fallback == "fuzzy":
        method, starts = "fuzzy", _fuzzy(story, firsts, exact, cutoff)
    if None in starts:
        method, starts = "proportional", proportional_starts(story)
    bounds = [0, *starts, len(story)]
    sections = {a: story[bounds[i] : bounds[i + 1]].strip() for i, a in enumerate(WRITING[: len(bounds) - 1])}
    return sections, method, found
