"""Every judge protocol end to end against a real `transformers serve` with the embedded model.

One server for the module (continuous batching, 127.0.0.1, a free port); short replies
(max_tokens 8), two systems on one prompt, one or two TTCW tests. The 135M model is no judge: most
replies are invalid, which is what the counts must show. Also: a server killed mid-run (the
re-run completes from the cache, nothing counted twice) and an unreachable server.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from rlcw.config import load_config
from rlcw.data.bundled import bundled_path
from rlcw.data.records import read_stories, write_stories
from rlcw.errors import RlcwError
from rlcw.judges.cache import ReplyCache
from rlcw.judges.clients.base import ClientConfig
from rlcw.judges.clients.factory import make_client
from rlcw.judges.serve import LocalServer, free_port
from rlcw.models import EMBEDDED_ALIAS, resolve
from rlcw.recipes.judge import JudgeConfig, main


@pytest.fixture(scope="session")
def judge_server(tmp_path_factory):
    server = LocalServer(resolve(EMBEDDED_ALIAS), log_file=tmp_path_factory.mktemp("serve") / "serve.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def story_files(tmp_path_factory):
    """Two systems (a story's first 25 words, its first 10) on two bundled prompts; references = the 25 words."""
    root = tmp_path_factory.mktemp("stories")
    recs = read_stories(bundled_path("stories.jsonl"))[:2]
    long = [
        dict(r, system="long", story=" ".join(r["story"].split()[:25]), reference=" ".join(r["story"].split()[:25]))
        for r in recs
    ]
    short = [dict(r, system="short", story=" ".join(r["story"].split()[:10])) for r in recs]
    write_stories(root / "long.jsonl", long)
    write_stories(root / "short.jsonl", short)
    return [str(root / "long.jsonl"), str(root / "short.jsonl")]


def _cfg(server, out, run_name, protocol, stories, *extra):
    return load_config(
        JudgeConfig,
        None,
        [
            f"protocol={protocol}",
            f"data.stories=[{','.join(stories)}]",
            f"output_dir={out}",
            f"run_name={run_name}",
            "client.kind=openai",
            f"client.base_url={server.base_url}",
            f"client.model={server.model}",
            "client.api_key_env=null",
            "client.max_tokens=8",
            "client.concurrency=4",
            "client.max_retries=1",
            "client.retry_base_s=0.2",
            "client.timeout_s=300",
            "n_bootstrap=20",
            *extra,
        ],
    )


# protocol -> (extra overrides, expected verdict rows for 2 systems on 1 prompt)
PROTOCOL_RUNS = {
    "agents_room": ([], 2),  # 1 pair x 2 orders
    "litbench": (["template=reddit_minimal"], 2),
    "ttcw_baseline": (["ttcw_test_ids=[9]"], 2),  # 2 stories x 1 test
    "ttcw_reference": (["ttcw_test_ids=[1]"], 4),  # 2 stories x 1 test x 2 orders
    "ttcw_hybrid": (["ttcw_test_ids=[1,9]"], 6),  # test 9 baseline (2) + test 1 both orders (4)
}


@pytest.mark.parametrize("protocol", list(PROTOCOL_RUNS))
def test_protocol_end_to_end(judge_server, story_files, tmp_path, protocol):
    extra, n_rows = PROTOCOL_RUNS[protocol]
    summary = main(_cfg(judge_server, tmp_path, protocol, protocol, story_files, "data.max_prompts=1", *extra))
    assert summary["status"] == "completed"
    run = tmp_path / protocol
    rows = [json.loads(x) for x in (run / "verdicts.jsonl").read_text().splitlines()]
    assert len(rows) == n_rows and all(isinstance(r["raw"], str) for r in rows)
    m = summary["metrics"]
    assert m["calls"] == n_rows and m["judgments"] == n_rows
    verdicts = [v for r in rows for v in (r["verdicts"].values() if "verdicts" in r else [r["verdict"]])]
    dim_rows = [
        r["verdicts"].get("overall" if protocol == "agents_room" else "preferred") if "verdicts" in r else r["verdict"]
        for r in rows
    ]
    assert m["invalid"] == sum(1 for v in dim_rows if not v["valid"])  # invalid replies are counted ...
    assert all(v["reason"] for v in verdicts if not v["valid"])  # ... with their reason, raw text kept
    assert (run / "rankings.png").stat().st_size > 1000
    assert "invalid" in (run / "report.md").read_text()
    assert json.loads((run / "rankings.json").read_text())


def test_server_killed_mid_run_resumes_from_cache(judge_server, story_files, tmp_path):
    cfg = _cfg(judge_server, tmp_path, "resume", "litbench", story_files, "client.concurrency=1", "template=minimal")
    total = 4  # 2 prompts x 1 pair x 2 orders
    errors: list[BaseException] = []

    def run_first():
        try:
            main(cfg)
        except BaseException as exc:  # noqa: BLE001 - the failure is what we check
            errors.append(exc)

    worker = threading.Thread(target=run_first)
    worker.start()
    cache_path = tmp_path / "resume" / "cache"
    deadline = time.time() + 240
    while time.time() < deadline and not (
        (cache_path / "judge_cache.sqlite").exists() and len(ReplyCache(cache_path)) >= 1
    ):
        time.sleep(0.2)
    judge_server.kill()
    worker.join(timeout=120)
    cached = len(ReplyCache(cache_path))
    assert errors and isinstance(errors[0], RlcwError) and "cannot reach" in str(errors[0])
    assert 1 <= cached < total
    assert json.loads((tmp_path / "resume" / "summary.json").read_text())["status"] == "failed"

    judge_server.start()
    summary = main(cfg)
    m = summary["metrics"]
    assert m["cache_hits"] == cached and m["calls"] == total - cached  # nothing asked twice
    rows = [json.loads(x) for x in (tmp_path / "resume" / "verdicts.jsonl").read_text().splitlines()]
    assert len(rows) == total and len({(r["prompt_id"], r["order"]) for r in rows}) == total  # nothing counted twice
    assert len(ReplyCache(cache_path)) == total


def test_unreachable_server_is_a_clear_error():
    client = make_client(
        ClientConfig(
            base_url=f"http://127.0.0.1:{free_port()}/v1",
            model="m",
            api_key_env=None,
            max_retries=1,
            retry_base_s=0.05,
            timeout_s=5,
        )
    )
    start = time.time()
    with pytest.raises(RlcwError, match="cannot reach the judge server after 2 attempts"):
        client.chat([{"role": "user", "content": "hi"}])
    assert time.time() - start < 10 and client.stats["requests"] == 2 and client.stats["retries"] == 1


def test_rubric_reward_through_the_server(judge_server, tmp_path):
    """The rubric reward with text verdicts from the real server: every reply parsed by the same parser the
    reward uses, invalid ones counted and left out; a re-run comes from the cache; a logprob verdict is
    refused by transformers serve (it returns no logprobs) with a clear error."""
    from rlcw.judges.parsing import parse_yes_no
    from rlcw.rewards.rubric import RubricReward

    cfg = {
        "kind": "openai",
        "base_url": judge_server.base_url,
        "model": judge_server.model,
        "api_key_env": None,
        "concurrency": 4,
        "max_tokens": 12,
        "cache_dir": str(tmp_path / "cache"),
    }
    criteria = ["Does the story have a clear ending?", "Is the story written in the past tense?"]
    reward = RubricReward(client=cfg, criteria=criteria, verdict="text", max_tokens=12)
    recs = read_stories(bundled_path("stories.jsonl"))[:3]
    prompts, stories = [r["prompt"] for r in recs], [" ".join(r["story"].split()[:30]) for r in recs]
    logged = {}
    scores = reward(prompts, stories, log_metric=lambda k, v: logged.__setitem__(k, v))
    replies = reward.client.chat_many(
        reward.conversations(prompts, stories), max_tokens=12, cache_tag=reward.template.version
    )
    verdicts = [parse_yes_no(r) for r in replies]
    assert reward.client.stats["calls"] == 6 and reward.client.stats["cache_hits"] == 6  # the re-read was cached
    assert logged["rubric/rubric/invalid"] == pytest.approx(sum(not v.valid for v in verdicts) / 6)
    for i, score in enumerate(scores):
        mine = [1.0 if v.value == "Yes" else 0.0 for v in verdicts[2 * i : 2 * i + 2] if v.valid]
        assert (score != score and not mine) or score == pytest.approx(sum(mine) / len(mine))
    with pytest.raises(RlcwError, match="HTTP 422"):
        RubricReward(client=cfg, criteria=criteria, verdict="logprobs")(prompts[:1], stories[:1])
