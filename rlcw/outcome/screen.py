"""The validity screen of the gold readings: a story that is no prose at all scores as a failure under every gold.

    floor = junk_floor(start, ["gold", "gold2"])      # per gold: the lowest score of any start story
    pool, measured = screen_junk(pool, floor), {run: [(step, screen_junk(recs, floor)) for step, recs in points]}

A gold is a reward model; shown text unlike anything it was trained on (a policy that collapsed into "[[[[..." or
"# \\n[ \\n["), it scores it arbitrarily, and it may score it far above real stories. Every reading of a gold change
would then pay a collapse as a gain. The screen scores every junk story (`rlcw.metrics.text.is_junk`; an empty
story is junk too) as the floor of that gold: the lowest score it gave any of the start model's stories of the same
prompts, so junk is never better than the start's worst story. A screened story is marked (`junk: True`) and keeps
its words and ending; the residual reads it against the start stories' overall mean, not a word-bin x ended cell
(junk has no story length to control for, and its cells are mostly ones the start never filled), so it counts there
as a failure too instead of being left out. Scores other than the golds' (the proxies: what RL optimised) are left
as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlcw.metrics.text import is_junk


def junk_floor(start: Sequence[dict], golds: Sequence[str]) -> dict[str, float]:
    """Per gold, the lowest `scores[gold]` over the start's records: the score a junk story gets."""
    if not start:
        raise ValueError("no start stories to take the junk floor from")
    return {g: min(float(r["scores"][g]) for r in start) for g in golds}


def screen_junk(records: Sequence[dict], floor: Mapping[str, float]) -> list[dict]:
    """`records` with every junk story's gold scores set to `floor` (per gold) and `junk: True`. A junk record is
    replaced by a copy (the caller's record and its scores are left unchanged); every other record is passed through
    as it is."""
    return [{**r, "scores": {**r["scores"], **floor}, "junk": True} if is_junk(r["story"]) else r for r in records]


def screen_note(floor: Mapping[str, float] | None) -> str:
    """The report's sentence on the screen: junk scored as each gold's floor (`floor`), or, with None, read raw."""
    if floor is None:
        return (
            "Junk stories (no prose at all, `rlcw.metrics.text.is_junk`) keep the golds' raw scores "
            "(`measure.screen_junk=false`)."
        )
    floors = ", ".join(f"{g} {v:+.2f}" for g, v in floor.items())
    return (
        "Junk stories (no prose at all, `rlcw.metrics.text.is_junk`) are scored as a failure in every gold reading: "
        f"each gold's floor, its lowest score of any start story ({floors}); the proxies' scores stay raw."
    )
