"""Agents' Room: scratchpad, prompts, orchestrator, variants, server backend (scripted, no model)."""

from __future__ import annotations

import pytest

from rlcw.agents.agents import identifiers, instruction
from rlcw.agents.backends import ServerBackend
from rlcw.agents.orchestrator import FixedOrder
from rlcw.agents.scratchpad import Scratchpad, fit, render
from rlcw.agents.variants import AgentCaps, run_variant
from rlcw.errors import RlcwError

WORDS = lambda s: len(s.split())  # noqa: E731 - a 1-token-per-word counter for hand-worked budgets


class Scripted:
    """A backend that answers `<agent> text` and records every call."""

    context_limit = None

    def __init__(self, words_per_answer: int = 3):
        self.calls: list[tuple[str, list[str], int]] = []
        self.n = words_per_answer

    def count_tokens(self, text):
        return WORDS(text)

    def overhead_tokens(self):
        return 0

    def generate(self, agent, prompts, max_new_tokens, seed=0):
        self.calls.append((agent, prompts, max_new_tokens))
        return [" ".join([f"<{agent}{i}>"] * self.n) for i in range(len(prompts))]


ROWS = [
    {"id": "a", "prompt": "Write about a fox.", "min_words": 5, "max_words": 9, "reference": "ref"},
    {"id": "b", "prompt": "Write about a crow."},
]


def test_scratchpad_renders_labels_in_call_order():
    pad = Scratchpad.start("Write about a fox.")
    pad.add("conflict", "The fox wants the grapes.")
    pad.add("exposition", "Once there was a fox.")
    assert render(pad.entries) == (
        "[Creative Writing Task] Write about a fox.\n\n[Central Conflict] The fox wants the grapes."
        "\n\n[Exposition] Once there was a fox."
    )
    assert (
        identifiers(pad)
        == "the Creative Writing Task, the Content Plan (Central Conflict) and the Previous Parts of the Story (Exposition)"
    )
    with pytest.raises(RlcwError, match="unknown agent"):
        pad.add("editor", "x")


def test_fit_halves_the_longest_section_plan_keeps_start_story_keeps_end():
    pad = Scratchpad.start("t")
    pad.add("plot", "p1 p2 p3 p4 p5 p6 p7 p8")
    pad.add("exposition", "e1 e2 e3 e4")
    # rendered: "[Creative Writing Task] t" (4) + "[Key Plot Points] p1..p8" (11) + "[Exposition] e1..e4" (5) = 20 words;
    # halving the plot gives "p1 p2 p3 p4 [...]": 4 + 8 + 5 = 17
    text, warnings = fit(pad, budget=17, count_tokens=WORDS)
    assert "[Key Plot Points] p1 p2 p3 p4 [...]" in text and "e1 e2 e3 e4" in text
    assert len(warnings) == 1 and "from 8 to 4 words" in warnings[0]
    text, _ = fit(
        pad, budget=13, count_tokens=WORDS
    )  # plot again (15), then the story section, keeping its end (14), plot (13)
    assert "[Exposition] [...] e3 e4" in text
    with pytest.raises(RlcwError, match="task alone"):
        fit(pad, budget=3, count_tokens=WORDS)


def test_writer_instructions_follow_the_appendix_rules():
    pad = Scratchpad.start("task")
    first = instruction("exposition", pad)
    assert "Exposition" in first and "do not end the story" in first and "previous part" not in first
    pad.add("exposition", "x")
    last = instruction("resolution", pad)
    assert "previous part" in last and "do not end" not in last
    assert instruction("e2e", pad) == "task"


def test_fixed_order_and_replaceable_orchestrator():
    pad = Scratchpad.start("t")
    order = FixedOrder(["conflict", "plot"])
    assert order.next_agent(pad) == "conflict"
    pad.add("conflict", "c")
    assert order.next_agent(pad) == "plot"
    pad.add("plot", "p")
    assert order.next_agent(pad) is None


def test_plan_write_calls_nine_agents_in_paper_order_batched():
    backend = Scripted()
    recs = run_variant(ROWS, backend, "plan_write", AgentCaps(planning=7, writing=11), context_tokens=10_000)
    assert [c[0] for c in backend.calls] == [
        "conflict",
        "character",
        "setting",
        "plot",
        "exposition",
        "rising_action",
        "climax",
        "falling_action",
        "resolution",
    ]
    assert all(len(c[1]) == 2 for c in backend.calls)  # both stories in each call
    assert [c[2] for c in backend.calls] == [7] * 4 + [11] * 5
    rec = recs[0]
    assert rec["story"].split("\n") == [
        f"<{a}0> <{a}0> <{a}0>" for a in ("exposition", "rising_action", "climax", "falling_action", "resolution")
    ]
    assert rec["system"] == "agents_room:plan_write" and rec["reference"] == "ref" and rec["max_words"] == 9
    assert [e["label"] for e in rec["meta"]["scratchpad"]][:2] == ["Creative Writing Task", "Central Conflict"]
    assert rec["meta"]["agent_calls"] == 9 and rec["meta"]["warnings"] == []
    climax_prompt = backend.calls[6][1][1]  # the climax agent sees the plan and the earlier sections of story b
    assert "[Key Plot Points] <plot1>" in climax_prompt and "[Rising Action] <rising_action1>" in climax_prompt


@pytest.mark.parametrize(
    ("variant", "agents"),
    [
        ("e2e", ["e2e"]),
        ("plan", ["conflict", "character", "setting", "plot", "finalizer"]),
        ("write", ["exposition", "rising_action", "climax", "falling_action", "resolution"]),
    ],
)
def test_other_variants(variant, agents):
    backend = Scripted()
    recs = run_variant(ROWS[:1], backend, variant, AgentCaps(), context_tokens=10_000)
    assert [c[0] for c in backend.calls] == agents
    assert (
        recs[0]["story"].count("\n")
        == len([a for a in agents if a not in ("conflict", "character", "setting", "plot")]) - 1
    )
    if variant == "e2e":
        assert backend.calls[0][1] == ["Write about a fox."]


def test_small_context_shortens_and_warns_and_custom_orchestrator():
    backend = Scripted(words_per_answer=40)
    recs = run_variant(
        ROWS[:1],
        backend,
        "plan_write",
        AgentCaps(planning=5, writing=5),
        context_tokens=150,
        orchestrator=FixedOrder(["plot", "exposition", "resolution"]),
    )
    assert [c[0] for c in backend.calls] == ["plot", "exposition", "resolution"]
    warnings = recs[0]["meta"]["warnings"]
    assert warnings and warnings[0].startswith("resolution: shortened [")
    assert all(WORDS(p) <= 150 for _, ps, _ in backend.calls for p in ps)


def test_unknown_variant_and_too_large_context():
    with pytest.raises(RlcwError, match="variant"):
        run_variant(ROWS, Scripted(), "outline", AgentCaps())
    backend = Scripted()
    backend.context_limit = 1024
    with pytest.raises(RlcwError, match="exceeds"):
        run_variant(ROWS, backend, "e2e", AgentCaps(), context_tokens=4096)


class ScriptedClient:
    def __init__(self):
        self.seen = []

    def chat(self, messages, max_tokens=None, temperature=None, seed=None):
        self.seen.append((messages, max_tokens, temperature, seed))
        return f" answer {len(self.seen)} "


def test_server_backend_sends_chat_messages_with_caps():
    client = ScriptedClient()
    recs = run_variant(
        ROWS,
        ServerBackend(client, "be brief", temperature=0.5),
        "plan",
        AgentCaps(planning=9, finalizer=33),
        context_tokens=4000,
        seed=3,
    )
    assert len(client.seen) == 10  # 5 agents x 2 stories
    messages, max_tokens, temperature, seed = client.seen[-1]
    assert messages[0] == {"role": "system", "content": "be brief"} and messages[1]["role"] == "user"
    assert (
        "write the complete story" in messages[1]["content"] and "[Key Plot Points] answer" in messages[1]["content"]
    )
    assert (max_tokens, temperature) == (33, 0.5) and [s[1] for s in client.seen[:2]] == [9, 9]
    assert recs[1]["story"] == "answer 10"


def test_server_backend_through_the_judge_client(tmp_path):
    from rlcw.agents.backends import server_backend

    seen = []

    def reply(messages):
        seen.append(messages)
        return "plan text" if "Content Plan" not in messages[-1]["content"] else "The end."

    backend = server_backend({"kind": "scripted", "model": "m"}, "sys", script=reply)
    recs = run_variant(ROWS[:1], backend, "plan", AgentCaps(), context_tokens=4000)
    assert len(seen) == 5 and recs[0]["story"] == "The end." and seen[0][0] == {"role": "system", "content": "sys"}
    with pytest.raises(RlcwError, match="unknown client option"):
        server_backend({"kind": "scripted", "modle": "m"}, None, script=reply)
