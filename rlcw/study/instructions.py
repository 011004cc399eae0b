"""Rater instructions: the Agents' Room rubric (its appendix D), retold in rlcw's words."""

from __future__ import annotations

INTRO = [
    "You will read a writing prompt and two short stories written for it, Story A and Story B. "
    "For each question, say which story is better, or that they are about the same. Use your own "
    "judgment; the notes below only help you calibrate it.",
    "Judge the quality of the writing, not how closely a story follows the prompt, and do not count words. "
    "Unconventional choices (a non-linear timeline, deliberate repetition) count in a story's favour "
    "when they work and against it only when they confuse.",
    "The task is demanding: rate at most five pairs in one sitting and take a break between sittings. "
    "When you are done, press the download button and send the file to the study team.",
]

# key, title, help: the four Agents' Room dimensions and the overall preference
RUBRIC = [
    (
        "plot",
        "Plot",
        "a clear beginning, middle and end; events that move the story forward; no "
        "unintended contradictions, and surprises that serve the story",
    ),
    (
        "creativity",
        "Creativity",
        "engaging characters, themes and images; clichés and tropes avoided "
        "or used on purpose; ideas of its own beyond what the prompt gave",
    ),
    (
        "development",
        "Development",
        "characters and settings introduced with the details a reader needs; "
        "enough depth to feel real and believable (both characters and setting count)",
    ),
    (
        "language_use",
        "Language use",
        "varied sentences and vocabulary; literary devices that create "
        "effects; no bland or repetitive phrasing unless it is deliberate",
    ),
    ("overall", "Overall", "which story did you enjoy more: more interesting, engaging, funny or moving?"),
]


def dimensions() -> list[dict]:
    return [{"key": k, "title": t, "help": h} for k, t, h in RUBRIC]


def text() -> str:
    """Plain-text instructions (CSV exports and Label Studio)."""
    return "\n\n".join(INTRO + [f"{t}: {h}" for _, t, h in RUBRIC])
