"""Agents' Room variants and the batched run that turns prompts into story records.

Variants (Section 5): `e2e` (one call with the task), `plan` (four planners + the finalizer),
`write` (five writers), `plan_write` (four planners + five writers). The orchestrator (fixed
order by default) picks each scratchpad's next agent; scratchpads waiting for the same agent are
sent to the backend as one batch. The story is the writing agents' outputs joined by newlines
(TELL ME A STORY's paragraph separator). Each record keeps the scratchpad in `meta`.

    recs = run_variant(rows, LocalBackend(model, tok, system_prompt), "plan_write", AgentCaps(), context_tokens=2048)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rlcw.agents.agents import KINDS, agent_prompt
from rlcw.agents.orchestrator import FixedOrder, Orchestrator
from rlcw.agents.scratchpad import PLANNING, WRITING, Scratchpad, fit
from rlcw.errors import RlcwError

VARIANTS: dict[str, tuple[str, ...]] = {
    "e2e": ("e2e",),
    "plan": PLANNING + ("finalizer",),
    "write": WRITING,
    "plan_write": PLANNING + WRITING,
}


@dataclass
class AgentCaps:
    """New-token caps per agent kind."""

    planning: int = 256  # new-token cap of each planning agent
    writing: int = 512  # new-token cap of each writing agent
    finalizer: int = 1024  # new-token cap of the finalizer agent
    e2e: int = 1024  # new-token cap of the end-to-end (e2e) agent

    def for_agent(self, agent: str) -> int:
        if agent in ("finalizer", "e2e"):
            return getattr(self, agent)
        return self.planning if KINDS[agent] == "planning" else self.writing


def check_variant(variant: str) -> tuple[str, ...]:
    if variant not in VARIANTS:
        raise RlcwError(f"unknown Agents' Room variant '{variant}'", hint=f"use one of {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def story_of(pad: Scratchpad) -> str:
    """The final output: every writing agent's contribution, in call order."""
    return "\n".join(t for a, t in pad.entries if a != "task" and KINDS.get(a) == "writing" and t)


def _call(
    backend,
    agent: str,
    pads: list[Scratchpad],
    caps: AgentCaps,
    context_tokens: int,
    last_writer: str,
    seed: int,
    warnings: list[list[str]],
) -> list[str]:
    max_new = caps.for_agent(agent)
    prompts = []
    for pad, warn in zip(pads, warnings, strict=False):
        empty = agent_prompt(agent, pad, "", last_writer)
        budget = context_tokens - max_new - backend.overhead_tokens() - backend.count_tokens(empty) - 8
        text, notes = fit(pad, budget, backend.count_tokens)
        warn.extend(f"{agent}: {n}" for n in notes)
        prompts.append(agent_prompt(agent, pad, text, last_writer))
    return backend.generate(agent, prompts, max_new, seed)


def run_variant(
    rows: list[dict],
    backend,
    variant: str,
    caps: AgentCaps,
    *,
    context_tokens: int = 2048,
    seed: int = 0,
    orchestrator: Orchestrator | None = None,
    system_name: str | None = None,
    max_steps: int = 16,
) -> list[dict]:
    """One story record per prompt row (`id`, `prompt`, optional `min_words`/`max_words`/`source`/`reference`)."""
    order = check_variant(variant)
    if backend.context_limit and context_tokens > backend.context_limit:
        raise RlcwError(
            f"agents.context_tokens={context_tokens} exceeds the model's context ({backend.context_limit})"
        )
    orchestrator = orchestrator or FixedOrder(order)
    last_writer = [a for a in order if KINDS[a] == "writing"][-1]
    pads = [Scratchpad.start(r["prompt"]) for r in rows]
    warnings: list[list[str]] = [[] for _ in rows]
    calls = [0] * len(rows)
    start = time.perf_counter()
    for step in range(max_steps):
        nxt = [orchestrator.next_agent(p) for p in pads]
        if all(a is None for a in nxt):
            break
        for agent in dict.fromkeys(a for a in nxt if a is not None):  # agents in first-asked order
            idx = [i for i, a in enumerate(nxt) if a == agent]
            outs = _call(
                backend,
                agent,
                [pads[i] for i in idx],
                caps,
                context_tokens,
                last_writer,
                seed + 1000 * step,
                [warnings[i] for i in idx],
            )
            for i, out in zip(idx, outs, strict=False):
                pads[i].add(agent, out)
                calls[i] += 1
    per_story = (time.perf_counter() - start) / max(1, len(rows))
    name = system_name or f"agents_room:{variant}"
    out = []
    for r, pad, warn, n in zip(rows, pads, warnings, calls, strict=False):
        rec = {"id": r["id"], "prompt": r["prompt"], "story": story_of(pad) or "(empty)", "system": name, "seed": seed}
        rec.update({k: r[k] for k in ("min_words", "max_words", "source", "reference") if r.get(k) is not None})
        rec["meta"] = {
            "generator": "agents_room",
            "variant": variant,
            "scratchpad": pad.to_json(),
            "warnings": warn,
            "agent_calls": n,
            "seconds_per_story": round(per_story, 3),
        }
        out.append(rec)
    return out
