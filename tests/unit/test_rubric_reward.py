"""Rubric reward: criteria loading, the weighted mean by hand, text and logprob verdicts, cache, factory."""

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlcw.errors import RlcwError
from rlcw.judges.clients.base import ChatClient, ClientConfig
from rlcw.judges.clients.scripted import ScriptedClient
from rlcw.rewards.factory import build_rewards
from rlcw.rewards.rubric import RubricReward, criterion_stats, load_criteria, weighted_rubric

CRITERIA = [
    {"name": "ends", "question": "Does the story end?", "weight": 2},
    {"name": "named", "question": "Is the hero named?"},
    {"name": "odd", "question": "Is it odd?"},
]


def test_default_criteria_are_the_ttcw_tests():
    crit = load_criteria("ttcw")
    assert len(crit) == 14 and crit[0].name == "ttcw1" and crit[0].dimension == "Fluency"
    assert all(c.weight == 1.0 for c in crit)
    assert [c.name for c in load_criteria("ttcw:1,9,13")] == ["ttcw1", "ttcw9", "ttcw13"]
    with pytest.raises(RlcwError, match="unknown TTCW test"):
        load_criteria("ttcw:15")
    with pytest.raises(RlcwError, match="ttcw:<ids>"):
        load_criteria("ttcw:one")


def test_criteria_from_a_list_and_files(tmp_path):
    crit = load_criteria(["Does it end?", {"question": "Named?", "name": "named", "weight": 0.5}])
    assert [(c.name, c.question, c.weight, c.dimension) for c in crit] == [
        ("c1", "Does it end?", 1.0, "c1"),
        ("named", "Named?", 0.5, "named"),
    ]
    (tmp_path / "r.yaml").write_text("criteria:\n  - question: Does it end?\n    weight: 3\n")
    assert load_criteria(str(tmp_path / "r.yaml"))[0].weight == 3.0
    (tmp_path / "r.json").write_text(json.dumps(["Q1?", "Q2?"]))
    assert [c.question for c in load_criteria(str(tmp_path / "r.json"))] == ["Q1?", "Q2?"]


@pytest.mark.parametrize(
    "spec,match",
    [
        ([], "non-empty list"),
        ([{"weight": 1}], "question"),
        ([{"question": "Q?", "weight": -1}], "weight"),
        ([{"question": "Q?", "wieght": 1}], "unknown key 'wieght'"),
        (["Q?", {"question": "R?", "name": "c1"}], "share the name"),
        ([{"question": "Q?", "weight": 0}], "weight 0"),
        ([{"question": "Q?", "name": "invalid"}], "reserved"),
    ],
)
def test_bad_criteria_are_clear_errors(spec, match):
    with pytest.raises(RlcwError, match=match):
        load_criteria(spec)


def test_bad_criteria_file_names_the_file(tmp_path):
    (tmp_path / "r.yaml").write_text("- question: [unclosed\n")
    with pytest.raises(RlcwError) as err:
        load_criteria(str(tmp_path / "r.yaml"))
    assert "r.yaml" in str(err.value)
    with pytest.raises(RlcwError, match="cannot read"):
        load_criteria(str(tmp_path / "missing.yaml"))


def test_weighted_rubric_by_hand():
    got = weighted_rubric([[1.0, 0.0, None], [0.25, 1.0, 0.5], [None, None, None]], [2.0, 1.0, 1.0])
    assert got[0] == pytest.approx(2 / 3)  # (2x1 + 1x0) / (2 + 1): the invalid one is left out
    assert got[1] == pytest.approx((0.5 + 1.0 + 0.5) / 4)
    assert math.isnan(got[2])


def test_criterion_stats_counts_invalid_and_no_signal():
    stats = criterion_stats([[1.0, 0.9, None], [1.0, 0.2, None]], ["a", "b", "c"])
    assert stats["a"] == 1.0 and stats["b"] == pytest.approx(0.55) and math.isnan(stats["c"])
    assert stats["invalid"] == pytest.approx(2 / 6)
    assert stats["no_signal"] == 1.0  # a: yes for every story; c: no valid verdict at all is not counted


def _judge(messages):
    """Yes to 'end' for GOOD stories, to 'named' for the others; no verdict on 'odd'."""
    text = messages[-1]["content"]
    good = "GOOD" in text
    if "Does the story end?" in text:
        return "Yes, it ends on a clear beat." if good else "No. It stops mid-scene."
    if "Is the hero named?" in text:
        return "The hero is never named.\nAnswer: No" if good else "Answer: Yes"
    return "Hard to say: maybe."


def test_text_verdicts_exact_rewards_and_logged_means():
    reward = RubricReward(
        criteria=CRITERIA, verdict="text", judge=ScriptedClient(ClientConfig(kind="scripted"), _judge)
    )
    logged = {}
    got = reward(
        [[{"role": "user", "content": "p"}]] * 2,
        [[{"role": "assistant", "content": "A GOOD story."}], [{"role": "assistant", "content": "A weak one."}]],
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    # GOOD: ends yes (w 2), named no (w 1), odd invalid -> 2/3; weak: ends no, named yes -> 1/3
    assert got == pytest.approx([2 / 3, 1 / 3])
    assert logged == {
        "rubric/rubric/ends": 0.5,
        "rubric/rubric/named": 0.5,
        "rubric/rubric/invalid": pytest.approx(2 / 6),
        "rubric/rubric/no_signal": 0.0,
        "rubric/rubric/no_verdict": 0.0,
    }


class _ProbJudge(ChatClient):
    """Label probabilities as a logprob judge would give them: P(Yes) from the story's text."""

    def _label_probs(self, batch, prefix, labels):
        assert prefix == "Answer:" and labels == ("Yes", "No")
        self.batches = getattr(self, "batches", 0) + 1
        out = []
        for m in batch:
            text = m[-1]["content"]
            if "SILENT" in text:
                out.append(None)
            else:
                p = 0.8 if "GOOD" in text else 0.3
                out.append({"Yes": p, "No": 1 - p})
        return out


def test_logprob_verdicts_weighted_mean_batches_and_cache(tmp_path):
    judge = _ProbJudge(ClientConfig(kind="local", cache_dir=str(tmp_path / "cache"), concurrency=4))
    reward = RubricReward(criteria=CRITERIA, judge=judge)
    prompts, stories = ["p"] * 3, ["GOOD", "bad", "SILENT"]
    got = reward.score(prompts, stories)
    assert got[:2] == pytest.approx([0.8, 0.3]) and math.isnan(got[2])
    assert judge.batches == 3  # 9 conversations, 4 per forward
    assert judge.stats["calls"] == 9 and reward.last_stats["invalid"] == pytest.approx(3 / 9)
    assert reward.score(prompts, stories)[:2] == pytest.approx([0.8, 0.3])
    assert (
        judge.stats["calls"] == 9 + 3
    )  # the 6 readable verdicts came from the cache; unreadable ones are asked again
    assert judge.stats["cache_hits"] == 6


def test_factory_builds_a_rubric_from_a_config_spec(tmp_path):
    rules = tmp_path / "replies.jsonl"
    rules.write_text(
        json.dumps({"match": ["GOOD", "Does the story end?"], "reply": "Yes."})
        + "\n"
        + json.dumps({"reply": "No, not really."})
        + "\n"
    )
    spec = {
        "type": "rubric",
        "weight": 0.5,
        "verdict": "text",
        "criteria": CRITERIA[:2],
        "client": {"kind": "scripted", "script": str(rules)},
    }
    funcs, weights = build_rewards({"judge": spec})
    assert weights == [0.5] and funcs[0].__name__ == "judge"
    assert funcs[0](["p", "p"], ["GOOD", "meh"]) == pytest.approx([2 / 3, 0.0])


def test_logprob_verdicts_need_a_client_that_gives_probabilities():
    spec = {"type": "rubric", "client": {"kind": "scripted", "script": ["Yes"]}, "verdict": "logprobs"}
    with pytest.raises(RlcwError, match="logprobs"):
        build_rewards({"rubric": spec})
    with pytest.raises(RlcwError, match="verdict"):
        build_rewards({"rubric": {**spec, "verdict": "votes"}})


class _SlowLogprobServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that holds each request 0.2 s and counts how many are in flight at once."""

    lock, in_flight, peak = threading.Lock(), 0, 0

    def do_POST(self):  # noqa: N802 - http.server API
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with cls.lock:
            cls.in_flight += 1
            cls.peak = max(cls.peak, cls.in_flight)
        time.sleep(0.2)
        yes = 0.9 if "GOOD" in body["messages"][-2]["content"] else 0.2
        top = [{"token": " Yes", "logprob": math.log(yes)}, {"token": " No", "logprob": math.log(1 - yes)}]
        choice = {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": " Yes"}}
        choice["logprobs"] = {"content": [{"token": " Yes", "logprob": math.log(yes), "top_logprobs": top}]}
        data = json.dumps(
            {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
        ).encode()
        with cls.lock:
            cls.in_flight -= 1
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_server_logprob_verdicts_go_out_concurrently():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowLogprobServer)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        client = {"kind": "openai", "base_url": url, "model": "m", "api_key_env": None, "concurrency": 4}
        reward = RubricReward(client=client, criteria=CRITERIA[:2])
        got = reward(["p"] * 4, ["GOOD one", "bad", "GOOD two", "meh"])
        assert got == pytest.approx([0.9, 0.2, 0.9, 0.2])  # P(yes) read from the server's top logprobs
        assert _SlowLogprobServer.peak == 4  # 8 verdicts, 4 requests in flight at a time
    finally:
        server.shutdown()


def test_no_verdict_counts_stories_and_ppo_fills_them_with_the_batch_mean():
    import torch

    from rlcw.rl.ppo.rollout import score_completions

    judge = ScriptedClient(ClientConfig(kind="scripted"), ["Answer: Yes", "Answer: No", "garbage", "Answer: Yes"])
    reward = RubricReward(criteria=["Does it end?"], verdict="text", judge=judge)
    with pytest.warns(RuntimeWarning, match=r"1 of 4 stories got no valid verdict from the scripted judge"):
        total, stats = score_completions([reward], [2.0], ["p"] * 4, ["a", "b", "c", "d"])
    # story c: no verdict -> the mean of 1, 0, 1 = 2/3 for this term, times the weight 2
    torch.testing.assert_close(total, torch.tensor([2.0, 0.0, 4 / 3, 2.0]))
    assert stats["rubric/rubric/no_verdict"] == 1.0 and stats["rewards/rubric/mean"] == pytest.approx(2 / 3)


def test_ppo_still_stops_on_a_nan_from_a_reward_that_is_no_rubric():
    from rlcw.rl.ppo.rollout import score_completions

    def broken(prompts, completions, **kwargs):
        return [0.5, math.nan]

    with pytest.raises(ValueError, match="reward function broken returned NaN"):
        score_completions([broken], [1.0], ["p", "q"], ["a", "b"])


@pytest.mark.parametrize(
    "options,where",
    [
        ({"verdict": "maybe"}, "best_of.rubric.verdict"),
        ({"criteria": "ttcw:99"}, "best_of.rubric.criteria"),
        ({"criteria": [{"question": "Q?", "wieght": 1}]}, "best_of.rubric.criteria item 0"),
        ({"client": {"kind": "scripted"}}, "best_of.rubric.verdict"),  # logprobs need a local/openai judge
        ({"client": {"kind": "nope"}, "verdict": "text"}, "best_of.rubric.client.kind"),
        ({"client": {"modle": "x"}}, "best_of.rubric.client"),
    ],
)
def test_check_rubric_names_the_config_key(options, where):
    from rlcw.rewards.rubric import check_rubric

    with pytest.raises(RlcwError) as err:
        check_rubric(options, "best_of.rubric")
    assert err.value.where == where and err.value.hint


def test_rubric_scorer_relocates_a_file_error_under_the_key(tmp_path):
    from rlcw.rewards.rubric import rubric_scorer

    with pytest.raises(RlcwError) as err:
        rubric_scorer({"criteria": str(tmp_path / "missing.yaml"), "verdict": "text"}, "scorer.rubric")
    assert err.value.where == f"scorer.rubric ({tmp_path / 'missing.yaml'})" and "cannot read" in err.value.message


def test_rubric_scorer_client_without_kind_is_the_local_judge():
    from rlcw.rewards.rubric import rubric_scorer

    scorer = rubric_scorer({"criteria": ["Q?"], "client": {"concurrency": 8}}, "scorer.rubric")
    assert (scorer.client.cfg.kind, scorer.client.cfg.model, scorer.client.cfg.concurrency) == (
        "local",
        "smollm2-135m-instruct",
        8,
    )


def test_rl_report_plots_no_verdict_apart_from_the_criteria(tmp_path, monkeypatch):
    from rlcw.rl.grpo import report

    rows = [
        {"step": s, "reward": 0.5, "rubric/r/ends": 0.4, "rubric/r/invalid": 0.25, "rubric/r/no_verdict": 1.0}
        | {"rubric/r/no_signal": 0.0}
        for s in (1, 2)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = {}
    monkeypatch.setattr(
        report, "plot_lines", lambda panels, path, *a, **k: drawn.setdefault(path.name, panels) and path
    )
    report.grpo_plots(tmp_path)
    titles = {p[0]: set(p[1]) for p in drawn["rubric.png"]}
    assert titles == {
        "rubric 'r': mean P(yes) per criterion": {"ends"},
        "rubric 'r': invalid share": {"invalid"},
        "rubric 'r': stories without verdict": {"no_verdict"},
    }
