"""The agents and the prompts they build from the scratchpad (Appendix B, in rlcw's own words).

Planning agents (conflict, character, setting, plot) write only to the scratchpad; writing agents
(exposition, rising action, climax, falling action, resolution) write a part of the story, which
also goes to the scratchpad. The finalizer writes the whole story from the plan (the `plan`
variant); `e2e` writes the whole story from the task alone (the baseline). Every prompt starts
with what the scratchpad holds ("Using the Creative Writing Task and the Content Plan (Central
Conflict, Setting), ..."), then the agent's instruction, then the scratchpad.
"""

from __future__ import annotations

from rlcw.agents.scratchpad import LABELS, PLANNING, WRITING, Scratchpad

KINDS = {
    **{a: "planning" for a in PLANNING},
    **{a: "writing" for a in WRITING},
    "finalizer": "writing",
    "e2e": "writing",
}

_PLAN_ASK = {
    "conflict": (
        "lay out the story's central conflict in detail, in more than five sentences. Say what the protagonist "
        "is trying to achieve, why it matters to them, and what stands in their way."
    ),
    "character": (
        "describe each character as a bulleted list, with more than five sentences per character: how they "
        "talk (chatty or quiet, their slang, their humour), how they look and move and what people notice first, "
        "and what drives them inside (wants, flaws, values, fears) and how they change by the end."
    ),
    "setting": (
        "describe the setting in detail, in more than five sentences: where the story happens (an invented world "
        "or somewhere ordinary), when it happens (the period, the decade) and how much time passes in it."
    ),
    "plot": "list the key plot points as detailed bullets.",
}
_SECTION = {a: LABELS[a] for a in WRITING}


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def identifiers(pad: Scratchpad) -> str:
    """What the scratchpad holds, in words ("the Creative Writing Task, the Content Plan (...) and ...")."""
    have = pad.agents()
    parts = ["the Creative Writing Task"]
    plan = [LABELS[a] for a in PLANNING if a in have]
    story = [LABELS[a] for a in WRITING if a in have]
    if "response" in have:
        parts.append("the User-Written Response")
    if plan:
        parts.append(f"the Content Plan ({', '.join(plan)})")
    if story:
        parts.append(f"the Previous Parts of the Story ({', '.join(story)})")
    return _join(parts)


def instruction(agent: str, pad: Scratchpad, last_writer: str = "resolution") -> str:
    """The agent's instruction for this scratchpad (without the scratchpad itself)."""
    given = f"Using {identifiers(pad)} below, "
    if agent in _PLAN_ASK:
        return given + _PLAN_ASK[agent]
    if agent == "finalizer":
        return given + "write the complete story, drawing on the plan."
    if agent == "e2e":
        return pad.get("task") or ""
    section = _SECTION[agent]
    text = given + f"write the {section} part of the story, continuing it."
    if any(a in WRITING for a in pad.agents()):
        text += (
            " Pick up exactly where the previous part stops, in the same voice, vocabulary and mood."
            " Do not retell what has already happened."
        )
    if agent != last_writer:
        text += f" Write only the {section}: leave the later parts for others and do not end the story."
    return text


def agent_prompt(agent: str, pad: Scratchpad, scratchpad_text: str, last_writer: str = "resolution") -> str:
    """The user message an agent is called with: instruction, then the (fitted) scratchpad."""
    if agent == "e2e":
        return instruction(agent, pad)
    return f"{instruction(agent, pad, last_writer)}\n\n{scratchpad_text}"
