"""`rlcw judge` end to end with a scripted judge (rule file): outputs, rankings and invalid counts
checked against what the rules must produce, worked out by hand."""

from __future__ import annotations

import json

import pytest

from rlcw.config import load_config
from rlcw.data.records import write_stories
from rlcw.errors import RlcwError
from rlcw.recipes.judge import JudgeConfig, main

# "good" stories start with GOOD, "bad" with BAD, "odd" with ODD. Rules (first match wins):
RULES = [
    # LitBench: the GOOD story wins in whichever position it is shown; ODD pairs get a hedge.
    {"match": "Response A:\nGOOD", "reply": "Reasoning: A is vivid.\nPreferred: A"},
    {"match": "Response B:\nGOOD", "reply": "Reasoning: B is vivid.\n**Preferred:** Response B"},
    {"match": "Response A:\nODD", "reply": "Preferred: A or B"},
    {"match": "Response B:\nODD", "reply": "Preferred: A or B"},
    # Agents' Room: position A always wins Overall (a position-biased judge), Plot follows GOOD.
    {
        "match": ["[Story A]\nGOOD", "Language Use"],
        "reply": "Based on my assessment, the better story for each dimension is:\nPlot: A\nOverall: A",
    },
    {
        "match": ["[Story B]\nGOOD", "Language Use"],
        "reply": "Based on my assessment, the better story for each dimension is:\nPlot: B\nOverall: A",
    },
    # TTCW reference: the candidate in position A is compared with the REFERENCE in B and vice versa.
    {"match": "[Story A]\nBAD", "reply": "Therefore: [[B»A]]"},
    {"match": "[Story B]\nBAD", "reply": "Therefore: [[A»B]]"},
    {"match": "Dimension:", "reply": "Answer: Yes"},
    {"reply": "[[A=B]]"},
]


@pytest.fixture()
def files(tmp_path):
    prompts = [f"Write a story about lighthouse number {i}." for i in range(3)]
    out = []
    for system, head in (("good", "GOOD"), ("bad", "BAD")):
        recs = [
            {
                "id": f"{system}-{i}",
                "prompt": p,
                "story": f"{head} story {i} " + "word " * (20 if system == "good" else 5),
                "system": system,
                "reference": f"REFERENCE {i}",
            }
            for i, p in enumerate(prompts)
        ]
        write_stories(tmp_path / f"{system}.jsonl", recs)
        out.append(str(tmp_path / f"{system}.jsonl"))
    rules = tmp_path / "rules.jsonl"
    rules.write_text("".join(json.dumps(r) + "\n" for r in RULES))
    return out, rules


def _run(tmp_path, files, protocol, *extra):
    stories, rules = files
    cfg = load_config(
        JudgeConfig,
        "configs/judge/scripted.yaml",
        [
            f"protocol={protocol}",
            f"data.stories=[{','.join(stories)}]",
            f"client.script={rules}",
            f"output_dir={tmp_path}",
            f"run_name={protocol}",
            "n_bootstrap=20",
            *extra,
        ],
    )
    return main(cfg)


def test_litbench_rankings_and_cache(tmp_path, files):
    s = _run(tmp_path, files, "litbench")
    m = s["metrics"]
    # 3 prompts x 2 orders = 6 judgments, GOOD wins all -> win rate 1 / 0, both orders agree on every pair
    assert (m["judgments"], m["invalid"], m["calls"]) == (6, 0, 6)
    assert m["win_rate/good"] == 1.0 and m["win_rate/bad"] == 0.0 and m["order_consistency"] == 1.0
    assert m["bt/good"] > 0 > m["bt/bad"]
    rankings = json.loads((tmp_path / "litbench" / "rankings.json").read_text())
    assert rankings["preferred"]["wins_matrix"] == [[0.0, 0.0], [6.0, 0.0]]  # systems sorted: bad, good
    for name in ("verdicts.jsonl", "rankings.png", "report.md", "summary.json", "config.yaml"):
        assert (tmp_path / "litbench" / name).is_file()
    again = _run(tmp_path, files, "litbench")  # same run folder: everything from the cache
    assert again["metrics"]["calls"] == 0 and again["metrics"]["cache_hits"] == 6


def test_agents_room_keeps_parsed_dimensions(tmp_path, files):
    _run(tmp_path, files, "agents_room")
    res = json.loads((tmp_path / "agents_room" / "rankings.json").read_text())
    # Plot follows GOOD in both orders; Overall is always "A": consistency 0 over 3 pairs, win rates 0.5
    assert res["plot"]["win_rate"] == {"bad": 0.0, "good": 1.0} and res["plot"]["order_consistency"] == 1.0
    assert res["overall"]["win_rate"] == {"bad": 0.5, "good": 0.5} and res["overall"]["order_consistency"] == 0.0
    # Creativity, Development, Language Use were never given: 6 invalid each, nothing ranked
    assert res["creativity"]["invalid"] == {
        "judgments": 6,
        "valid": 0,
        "invalid": 6,
        "invalid_share": 1.0,
        "invalid_reasons": {"no verdict": 6},
    }
    assert res["creativity"]["bradley_terry"] == {}
    assert "invalid 6" in (tmp_path / "agents_room" / "report.md").read_text()


def test_invalid_replies_are_counted_never_tied(tmp_path, files):
    stories, rules = files
    odd = tmp_path / "odd.jsonl"
    write_stories(
        odd, [{"id": "o0", "prompt": "Write a story about lighthouse number 0.", "story": "ODD x", "system": "odd"}]
    )
    s = _run(tmp_path, (stories + [str(odd)], rules), "litbench", "data.baseline=odd")
    # pairs (good, odd) and (bad, odd) on prompt 0, two orders each. good-odd: GOOD rules (valid, good wins);
    # bad-odd: the ODD rules hedge -> 2 invalid, left out: odd's win rate is 0 (not 0.25 as ties would make it)
    assert s["metrics"]["judgments"] == 4 and s["metrics"]["invalid"] == 2
    assert json.loads((tmp_path / "litbench" / "rankings.json").read_text())["preferred"]["win_rate"] == {
        "good": 1.0,
        "odd": 0.0,
    }


def test_ttcw_reference_scores(tmp_path, files):
    s = _run(tmp_path, files, "ttcw_reference", "ttcw_test_ids=[1,2,3]")
    # BAD vs reference: [[B»A]] as A -> -2, [[A»B]] as B -> -2: every test fails -> 0 of 3.
    # GOOD vs reference: [[A=B]] both orders -> mean 0 -> passes: 3 of 3.
    assert s["metrics"]["mean_score/good"] == 3.0 and s["metrics"]["mean_score/bad"] == 0.0
    assert s["metrics"]["judgments"] == 2 * 3 * 3 * 2 and s["metrics"]["invalid"] == 0
    assert s["metrics"]["win_rate/good"] == 1.0


def test_ttcw_hybrid_uses_baseline_for_originality(tmp_path, files):
    s = _run(tmp_path, files, "ttcw_hybrid", "ttcw_test_ids=[1,9]")
    # test 9 by the baseline ("Answer: Yes" -> pass for both), test 1 against the reference as above
    assert s["metrics"]["mean_score/good"] == 2.0 and s["metrics"]["mean_score/bad"] == 1.0
    rows = [json.loads(x) for x in (tmp_path / "ttcw_hybrid" / "verdicts.jsonl").read_text().splitlines()]
    assert sorted({(r["test"], r["protocol"]) for r in rows}) == [(1, "ttcw_reference"), (9, "ttcw_baseline")]


def test_bad_inputs(tmp_path, files):
    stories, rules = files
    with pytest.raises(RlcwError, match="unknown protocol"):
        _run(tmp_path, files, "nope")
    with pytest.raises(RlcwError, match="at least two systems"):
        _run(tmp_path, ([stories[0]], rules), "litbench")
    with pytest.raises(RlcwError, match="unknown judge template"):
        _run(tmp_path, files, "litbench", "template=fancy")
    write_stories(
        tmp_path / "dup.jsonl",
        [
            {"id": "1", "prompt": "p", "story": "s", "system": "z"},
            {"id": "2", "prompt": "p", "story": "t", "system": "z"},
        ],
    )
    with pytest.raises(RlcwError, match=r"dup.jsonl:2 field 'prompt'"):
        _run(tmp_path, ([str(tmp_path / "dup.jsonl")], rules), "litbench")
    norefs = tmp_path / "noref.jsonl"
    write_stories(norefs, [{"id": "1", "prompt": "q", "story": "s", "system": "z"}])
    with pytest.raises(RlcwError, match="no reference story"):
        _run(tmp_path, ([str(norefs)], rules), "ttcw_reference")


def test_local_client_is_greedy_and_cached(tmp_path, tiny_model_dir):
    from rlcw.judges.clients.base import ClientConfig
    from rlcw.judges.clients.factory import make_client

    cfg = ClientConfig(kind="local", model=str(tiny_model_dir), max_tokens=4, cache_dir=str(tmp_path / "cache"))
    client = make_client(cfg)
    msgs = [[{"role": "user", "content": "Preferred: A or B?"}], [{"role": "user", "content": "Another question"}]]
    first = client.chat_many(msgs, progress=False)
    assert (
        all(isinstance(r, str) for r in first) and client.stats["calls"] == 2 and client.stats["completion_tokens"] > 0
    )
    fresh = make_client(ClientConfig(kind="local", model=str(tiny_model_dir), max_tokens=4))  # no cache: greedy again
    assert fresh.chat(msgs[0]) == first[0]
    assert client.chat(msgs[1]) == first[1] and client.stats["cache_hits"] == 1


def test_local_client_batches_uncached_calls(tmp_path, tiny_model_dir):
    from rlcw.judges.clients.base import ClientConfig
    from rlcw.judges.clients.factory import make_client

    cfg = ClientConfig(
        kind="local", model=str(tiny_model_dir), max_tokens=5, concurrency=3, cache_dir=str(tmp_path / "cache")
    )
    client = make_client(cfg)
    msgs = [[{"role": "user", "content": "q " * n}] for n in (1, 7, 3, 12, 5)]
    client.chat(msgs[2])  # cached before the batch: not generated again
    calls: list[int] = []
    orig = client._complete_batch
    client._complete_batch = lambda batch, *a: calls.append(len(batch)) or orig(batch, *a)
    replies = client.chat_many(msgs, progress=False)
    assert calls == [3, 1] and client.stats["calls"] == 5 and client.stats["cache_hits"] == 1
    single = make_client(ClientConfig(kind="local", model=str(tiny_model_dir), max_tokens=5))
    assert replies == [single.chat(m) for m in msgs]  # left padding does not change greedy replies


# --- the original TTCW protocol, replay, logprob verdicts -----------------------------


def _tests_file(tmp_path):
    """Two tests in the released ttcw_all_tests.json layout, text written for this test."""
    tests = [
        {
            "ttcw_idx": 1,
            "torrance_dimension": "Fluency",
            "category": "Ending",
            "question": "Does the ending feel earned?",
            "full_prompt": "BACKGROUND-ONE: endings should follow from what came before.\n\nA second paragraph."
            "\n\nGiven the story above, explain step by step, then answer Yes or No only\n\nQ) Does the ending feel earned?",
        },
        {
            "ttcw_idx": 9,
            "torrance_dimension": "Originality",
            "category": "Cliches",
            "question": "Is the story free of cliches?",
            "full_prompt": "BACKGROUND-NINE: a cliche is an overused idea.\n\nList the cliches, then answer Yes or No only"
            "\nnQ) Is the story free of cliches?",  # the released file has this "\nnQ)" typo once
        },
    ]
    path = tmp_path / "my_ttcw_tests.json"
    path.write_text(json.dumps(tests))
    return path


ORIGINAL_RULES = [  # replies in the shape real judges give to the original prompt
    {"match": ["BACKGROUND-ONE", "Story:\n\nGOOD"], "reply": "**Yes**, the ending follows from the storm."},
    {"match": ["BACKGROUND-ONE", "Story:\n\nBAD"], "reply": "No.\n\nThe ending arrives from nowhere."},
    {"match": ["BACKGROUND-NINE", "Story:\n\nGOOD"], "reply": "Yes"},
    {"match": ["BACKGROUND-NINE", "Story:\n\nBAD"], "reply": "Yes and no: some cliches, some fresh turns."},
    {"reply": "[[A=B]]"},
]


def test_ttcw_original_with_the_users_tests_file(tmp_path, files):
    stories, _ = files
    rules = tmp_path / "original_rules.jsonl"
    rules.write_text("".join(json.dumps(r) + "\n" for r in ORIGINAL_RULES))
    tests = _tests_file(tmp_path)
    s = _run(tmp_path, (stories, rules), "ttcw_original", f"ttcw_tests={tests}")
    # good: Yes, Yes -> 2 of 2; bad: No on test 1, a hedge on test 9 (invalid, counted, not a fail)
    assert s["metrics"]["mean_score/good"] == 2.0 and s["metrics"]["mean_score/bad"] == 0.0
    assert s["metrics"]["judgments"] == 12 and s["metrics"]["invalid"] == 3
    rows = [json.loads(x) for x in (tmp_path / "ttcw_original" / "verdicts.jsonl").read_text().splitlines()]
    assert {r["protocol"] for r in rows} == {"ttcw_original"}
    assert rows[0]["request_id"] == f"{rows[0]['prompt_id']}|good|test1" and len(rows[0]["request_key"]) == 64


def test_ttcw_original_prompt_holds_background_not_the_instructions(tmp_path):
    from rlcw.judges.clients.base import ClientConfig
    from rlcw.judges.clients.factory import make_client
    from rlcw.judges.protocols import judge_ttcw
    from rlcw.judges.templates import load_ttcw_tests

    seen = []
    client = make_client(ClientConfig(kind="scripted"), script=lambda m: seen.append(m[-1]["content"]) or "No.")
    tests = load_ttcw_tests(_tests_file(tmp_path))
    story = {"prompt_id": "p", "prompt": "P", "story": "cand", "system": "x"}
    judge_ttcw(client, "ttcw_hybrid", [story], {"p": "ref"}, tests=tests, progress=False)
    originality, reference = seen[0], seen[1]
    assert "BACKGROUND-NINE" in originality and "Start your answer with Yes or No" in originality
    assert "List the cliches" not in originality and "Q)" not in originality
    assert "BACKGROUND-ONE" in reference and "A second paragraph." in reference
    assert "Question: Does the ending feel earned?" in reference and "Given the story above" not in reference


@pytest.mark.parametrize(
    "content,message",
    [
        ("not json", "not JSON"),
        ("{}", "non-empty JSON list"),
        ('[{"ttcw_idx": 1}]', "torrance_dimension"),
        ('[{"ttcw_idx": "1", "torrance_dimension": "F", "question": "q", "full_prompt": "b\\ni\\nq"}]', "ttcw_idx"),
        (
            '[{"ttcw_idx": 1, "torrance_dimension": "F", "question": "q", "full_prompt": "only\\ntwo"}]',
            "no background",
        ),
    ],
)
def test_bad_tests_file(tmp_path, content, message):
    from rlcw.judges.templates import load_ttcw_tests

    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(RlcwError, match=message):
        load_ttcw_tests(path)


def test_ttcw_original_needs_the_tests_file(tmp_path, files):
    with pytest.raises(RlcwError, match="ttcw_tests"):
        _run(tmp_path, files, "ttcw_original")


def test_replay_reparses_stored_replies_without_a_model(tmp_path, files):
    first = _run(tmp_path, files, "litbench")
    stored = tmp_path / "litbench" / "verdicts.jsonl"
    rows = [json.loads(x) for x in stored.read_text().splitlines()]
    rows[0]["raw"] = "Preferred: A or B"  # as if the first reply had been a hedge
    edited = tmp_path / "stored.jsonl"
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = _run(tmp_path, files, "litbench", "client.kind=replay", f"client.replies={edited}", "run_name=replayed")
    assert first["metrics"]["calls"] == 6
    assert s["metrics"]["calls"] == 0 and s["metrics"]["replayed"] == 6
    assert s["metrics"]["judgments"] == 6 and s["metrics"]["invalid"] == 1  # re-parsed, not copied
    # a user file keyed by request id only (e.g. replies imported from another tool)
    by_id = tmp_path / "by_id.jsonl"
    by_id.write_text("".join(json.dumps({"id": r["request_id"], "response": r["raw"]}) + "\n" for r in rows[1:]))
    with pytest.raises(RlcwError, match="1 of 6 request"):
        _run(tmp_path, files, "litbench", "client.kind=replay", f"client.replies={by_id}", "run_name=r2")
    rows[0]["request_key"] = "0" * 64  # the stored reply answered another request
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RlcwError, match="different request"):
        _run(tmp_path, files, "litbench", "client.kind=replay", f"client.replies={edited}", "run_name=r3")


@pytest.mark.parametrize("protocol", ["litbench", "agents_room"])
def test_local_logprob_verdicts_are_never_invalid(tmp_path, files, tiny_model_dir, protocol):
    stories, _ = files
    extra = ["client.kind=local", f"client.model={tiny_model_dir}", "verdict=logprobs", "data.max_prompts=2"]
    s = _run(tmp_path, files, protocol, *extra)
    m = s["metrics"]
    assert m["invalid"] == 0 and m["judgments"] == 4 and 0.0 <= m["order_consistency"] <= 1.0
    assert 0.0 <= m["position_bias"] <= 1.0
    rows = [json.loads(x) for x in (tmp_path / protocol / "verdicts.jsonl").read_text().splitlines()]
    for r in rows:
        for v in r["verdicts"].values():
            assert v["valid"] and sum(v["probs"].values()) == pytest.approx(1.0)
            assert v["value"] == max(v["probs"], key=v["probs"].get) and v["margin"] >= 0
    assert "Position bias" in (tmp_path / protocol / "report.md").read_text()
    again = _run(tmp_path, files, protocol, *extra)
    assert again["metrics"]["calls"] == 0  # logprob verdicts are cached too
    with pytest.raises(RlcwError, match="pairwise"):
        _run(tmp_path, files, "ttcw_baseline", *extra)


def _prob_row(pid, a, b, probs):
    top = max(probs, key=probs.get)
    return {
        "prompt_id": pid,
        "system_a": a,
        "system_b": b,
        "verdicts": {"d": {"value": top, "valid": True, "probs": probs, "margin": 0.1}},
    }


def test_logprob_summary_averages_both_orders_by_hand():
    from rlcw.judges.position import logprob_summary, position_bias

    rows = [
        _prob_row("p1", "x", "y", {"A": 0.8, "B": 0.2}),  # x first: P(x) 0.8
        _prob_row("p1", "y", "x", {"A": 0.6, "B": 0.4}),  # y first: P(y) 0.6 -> P(x better) = (0.8 + 0.4) / 2 = 0.6
        _prob_row("p2", "x", "y", {"A": 0.5, "B": 0.1, "Same": 0.4}),  # P(x first wins) = 0.5 + 0.4 / 2 = 0.7
        _prob_row("p2", "y", "x", {"A": 0.9, "B": 0.1}),  # -> P(x better) = (0.7 + 0.1) / 2 = 0.4
        _prob_row("p3", "x", "y", {"A": 0.9, "B": 0.1}),  # one order only: not averaged
    ]
    s = logprob_summary(rows, "d")
    assert s["pairs_both_orders"] == 2
    assert s["pair_probs"] == pytest.approx({"p1|x|y": 0.6, "p2|x|y": 0.4})
    assert s["averaged_win_rate"] == {"x": 0.5, "y": 0.5}
    assert s["mean_p_better"] == pytest.approx({"x": 0.5, "y": 0.5})
    # first-position share over valid verdicts: A, A, A, A, A -> 1.0; with a B and a Same and an invalid one:
    assert position_bias(rows, "d") == 1.0
    rows[0]["verdicts"]["d"]["value"] = "B"
    rows[1]["verdicts"]["d"]["value"] = "Same"
    rows[2]["verdicts"]["d"] = {"value": None, "valid": False}
    assert position_bias(rows, "d") == pytest.approx((0 + 0.5 + 1 + 1) / 4)


def test_a_handful_of_prompts_is_warned_in_the_log_and_the_report(tmp_path, files, capsys):
    _run(tmp_path, files, "litbench")
    note = "only 3 prompts: the interval is wide and the win rates and rankings may mislead"
    assert note in capsys.readouterr().out
    assert note in (tmp_path / "litbench" / "report.md").read_text()
