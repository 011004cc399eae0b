"""Who speaks next: an orchestrator maps a scratchpad to the next agent, or None to stop.

The paper's orchestrator is a fixed order (planners, then writers); any object with
`next_agent(pad) -> str | None` can replace it (a learned or human one).

    FixedOrder(["conflict", "character", "setting", "plot", "exposition", ...]).next_agent(pad)
"""

from __future__ import annotations

from typing import Protocol

from rlcw.agents.scratchpad import Scratchpad


class Orchestrator(Protocol):
    def next_agent(self, pad: Scratchpad) -> str | None: ...


class FixedOrder:
    """Call each agent of `order` once, in order (a Markov rule: only the scratchpad decides)."""

    def __init__(self, order: list[str] | tuple[str, ...]):
        self.order = tuple(order)

    def next_agent(self, pad: Scratchpad) -> str | None:
        done = set(pad.agents())
        return next((a for a in self.order if a not in done), None)
