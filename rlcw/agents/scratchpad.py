"""The scratchpad: the writing task followed by each agent's labelled contribution.

Rendered as `[Label] text` blocks in call order (the paper's Appendix B.1 layout). An agent's
own prompt is never stored in it. When the rendered scratchpad would not fit the context
budget, `fit` shortens it instead of letting the model silently truncate its input:
repeatedly halve the longest section other than the task (planning notes keep their start,
story sections keep their end, since the next writer continues from it), marking the cut with
`[...]`, and record a warning. If the task alone does not fit, it is an error.

    pad = Scratchpad.start("Write a story about ...")
    pad.add("conflict", "The keeper wants ...")
    text, warnings = fit(pad, budget=1500, count_tokens=lambda s: len(s.split()))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rlcw.errors import RlcwError

# agent name -> scratchpad label (Appendix B.1); "response" is the gold story in synthetic data.
LABELS = {
    "task": "Creative Writing Task",
    "conflict": "Central Conflict",
    "character": "Character Descriptions",
    "setting": "Setting",
    "plot": "Key Plot Points",
    "exposition": "Exposition",
    "rising_action": "Rising Action",
    "climax": "Climax",
    "falling_action": "Falling Action",
    "resolution": "Resolution",
    "finalizer": "Story",
    "e2e": "Story",
    "response": "User-Written Response",
}
PLANNING = ("conflict", "character", "setting", "plot")
WRITING = ("exposition", "rising_action", "climax", "falling_action", "resolution")
CUT = "[...]"


@dataclass
class Scratchpad:
    """Ordered (agent, text) entries; the first is always ("task", prompt)."""

    entries: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def start(cls, prompt: str) -> Scratchpad:
        return cls([("task", prompt.strip())])

    def add(self, agent: str, text: str) -> None:
        if agent not in LABELS:
            raise RlcwError(f"unknown agent '{agent}'", hint=f"known: {', '.join(LABELS)}")
        self.entries.append((agent, text.strip()))

    def agents(self) -> list[str]:
        return [a for a, _ in self.entries]

    def get(self, agent: str) -> str | None:
        return next((t for a, t in self.entries if a == agent), None)

    def to_json(self) -> list[dict]:
        return [{"agent": a, "label": LABELS[a], "text": t} for a, t in self.entries]


def render(entries: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"[{LABELS[a]}] {t}" for a, t in entries)


def _halve(agent: str, text: str) -> str:
    words = text.replace(CUT, "").split()
    keep = max(1, len(words) // 2)
    return f"{CUT} " + " ".join(words[-keep:]) if agent in WRITING else " ".join(words[:keep]) + f" {CUT}"


def fit(pad: Scratchpad, budget: int, count_tokens: Callable[[str], int]) -> tuple[str, list[str]]:
    """The rendered scratchpad within `budget` tokens, and a warning per shortened section."""
    entries = list(pad.entries)
    warnings: list[str] = []
    while count_tokens(render(entries)) > budget:
        candidates = [i for i, (a, t) in enumerate(entries) if a != "task" and len(t.replace(CUT, "").split()) > 1]
        if not candidates:
            raise RlcwError(
                f"the writing task alone needs more than {budget} tokens of context",
                hint="raise the context budget (generate: agents.context_tokens; train-agents: train.max_length) or lower the token caps",
            )
        i = max(candidates, key=lambda j: len(entries[j][1].split()))
        agent, text = entries[i]
        entries[i] = (agent, _halve(agent, text))
        before, after = (len(t.replace(CUT, "").split()) for t in (text, entries[i][1]))
        warnings.append(f"shortened [{LABELS[agent]}] from {before} to {after} words to fit {budget} tokens")
    return render(entries), warnings
