"""Templates (built-in and user files), the pairwise scorer and the RL evaluator hook, with scripted judges."""

from __future__ import annotations

import json

import pytest

from rlcw.errors import RlcwError
from rlcw.judges.clients.base import ClientConfig
from rlcw.judges.clients.factory import make_client
from rlcw.judges.evaluator import make_judge_evaluator
from rlcw.judges.pairwise import JudgePairwiseScorer
from rlcw.judges.templates import LITBENCH_TEMPLATES, builtin_templates, load_template


def test_builtin_templates_load_and_render():
    assert {f"litbench_{t}" for t in LITBENCH_TEMPLATES} | {
        "agents_room",
        "agents_room_brief",
        "ttcw_baseline",
        "ttcw_original",
        "ttcw_reference",
    } == set(builtin_templates())
    for name in builtin_templates():
        tpl = load_template(name)
        assert tpl.version and tpl.protocol == (
            "litbench" if name.startswith("litbench") else name.removesuffix("_brief")
        )
    msgs = load_template("writerly").render(prompt="P {x}", story_a="story {with} braces", story_b="B")
    assert (
        msgs[-1]["role"] == "user"
        and "story {with} braces" in msgs[-1]["content"]
        and "Preferred: [A or B]" in msgs[-1]["content"]
    )


def test_user_template_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "protocol: litbench\nversion: mine-v1\nsystem: Be terse.\nuser: 'A={story_a} B={story_b}. Preferred: A or B'\n"
    )
    tpl = load_template(str(path), "litbench")
    assert tpl.render(story_a="x", story_b="y") == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "A=x B=y. Preferred: A or B"},
    ]
    (tmp_path / "bad.yaml").write_text("protocol: litbench\nversion: v\nuser: 'only {story_a}'\n")
    with pytest.raises(RlcwError, match=r"lacks placeholder.*story_b"):
        load_template(str(tmp_path / "bad.yaml"))
    with pytest.raises(RlcwError, match="not 'agents_room'"):
        load_template(str(path), "agents_room")


def _prefers_longer(messages):
    text = messages[-1]["content"]
    a = text.split("Response A:\n")[1].split("\n\nResponse B:")[0]
    b = text.split("Response B:\n")[1]
    return "Preferred: C" if "HEDGE" in text else ("Preferred: A" if len(a) > len(b.strip()) else "Preferred: B")


def test_pairwise_scorer_one_order_and_both():
    client = make_client(ClientConfig(kind="scripted"), script=_prefers_longer)
    scorer = JudgePairwiseScorer(ClientConfig(kind="scripted"), client=client)
    args = (["p", "p", "p"], ["a long story", "short", "HEDGE"], ["short", "a long story", "x"])
    assert scorer.prefer_ordered(*args) == [1.0, 0.0, None] and len(scorer.last_rows) == 3
    assert scorer.prefer(*args) == [1.0, 0.0, None] and len(scorer.last_rows) == 6


def test_position_biased_judge():
    client = make_client(ClientConfig(kind="scripted"), script=lambda m: "Preferred: A")
    scorer = JudgePairwiseScorer({}, client=client)
    assert scorer.prefer_ordered(["p"], ["x"], ["y"]) == [1.0] and scorer.prefer_ordered(["p"], ["y"], ["x"]) == [1.0]
    assert scorer.prefer(["p"], ["x"], ["y"]) == [0.5]  # the two orders disagree


def test_judge_evaluator_vs_baseline(tmp_path):
    ev = make_judge_evaluator({"protocol": "litbench", "client": {"kind": "scripted"}}, {"script": _prefers_longer})
    assert ev.name == "judge"
    cands = [{"id": str(i), "prompt": f"p{i}", "story": "a much longer story", "system": "run@5"} for i in range(3)]
    base = [
        {
            "id": str(i),
            "prompt": f"p{i}",
            "story": "short" if i < 2 else "an even longer story here",
            "system": "baseline",
        }
        for i in range(3)
    ]
    out = ev.evaluate(cands, base, tmp_path)
    # candidate longer on 2 prompts (wins both orders), shorter on 1 (loses both): 4 of 6 -> 2/3
    assert out["win_rate"] == pytest.approx(2 / 3) and out["judgments"] == 6 and out["invalid"] == 0
    assert out["order_consistency"] == 1.0 and out["calls"] == 6
    # A wins in order 0 on the two prompts where the candidate (A) is longer, and in order 1 on the
    # prompt where the baseline (A) is longer: 3 of 6 verdicts for the first position
    assert out["position_bias"] == 0.5
    biased = make_judge_evaluator({"client": {"kind": "scripted"}}, {"script": lambda m: "Preferred: A"})
    assert biased.evaluate(cands, base, tmp_path / "b")["position_bias"] == 1.0
    rows = [json.loads(x) for x in (tmp_path / "judge_run_5.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and rows[0]["candidate_system"] == "run@5"
    assert ev.evaluate(cands, base, tmp_path)["calls"] == 0  # cached in <out_dir>/judge_cache


def test_judge_evaluator_bad_options():
    with pytest.raises(RlcwError, match="unknown judge evaluator option"):
        make_judge_evaluator({"protocl": "litbench"}, {})
    with pytest.raises(RlcwError, match="side-by-side protocols"):
        make_judge_evaluator({"protocol": "ttcw_baseline"}, {})


def test_registered_in_the_rl_evaluator_registry(tmp_path):
    from rlcw.measure.evaluation import build_evaluators, run_evaluators

    rules = tmp_path / "rules.jsonl"
    rules.write_text('{"reply": "Preferred: A"}\n')  # always the story shown first
    [ev] = build_evaluators(
        {"judge": {"protocol": "litbench", "client": {"kind": "scripted", "script": str(rules)}}},
        {"run_dir": tmp_path, "seed": 0},
    )
    cands = [{"id": "1", "prompt": "p", "story": "new", "system": "run@1"}]
    base = [{"id": "1", "prompt": "p", "story": "old", "system": "baseline"}]
    out = run_evaluators([ev], cands, base, tmp_path)
    # wins as A, loses as B: win rate 0.5, the two orders disagree
    assert out["eval/judge/win_rate"] == 0.5 and out["eval/judge/order_consistency"] == 0.0
    assert out["eval/judge/invalid_share"] == 0.0
