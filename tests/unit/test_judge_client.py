"""Judge clients: cache, budget, scripted replies, retries (429 with Retry-After, 5xx) against a
tiny in-process HTTP server, errors that do not retry, and no API key in anything written.
Also: the cache key covers the server and every request parameter, sampled
replies are never cached, no key over plain http to another host, a damaged cache file is a clear
error, WAL falls back to the default journal; and the pass-through of max_completion_tokens,
response_format, extra_body and logprob verdicts from an OpenAI-compatible server."""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai  # noqa: F401 - imported at collection: the first import takes seconds
import pytest

from rlcw.errors import RlcwError
from rlcw.judges.cache import ReplyCache, cache_key
from rlcw.judges.clients.base import BudgetExceeded, ClientConfig
from rlcw.judges.clients.factory import make_client
from rlcw.judges.clients.openai_compatible import backoff_seconds

MSG = [{"role": "user", "content": "Which is better?"}]


def _scripted(tmp_path=None, script=None, **kw):
    cfg = ClientConfig(kind="scripted", cache_dir=str(tmp_path) if tmp_path else None, api_key_env=None, **kw)
    return make_client(cfg, script=script)


def test_cache_key_depends_on_model_tag_messages_and_params():
    base = cache_key("m", "v1", MSG, {"max_tokens": 8})
    assert base == cache_key("m", "v1", [dict(MSG[0])], {"max_tokens": 8})
    others = [
        cache_key("m2", "v1", MSG, {"max_tokens": 8}),
        cache_key("m", "v2", MSG, {"max_tokens": 8}),
        cache_key("m", "v1", [{"role": "user", "content": "x"}], {"max_tokens": 8}),
        cache_key("m", "v1", MSG, {"max_tokens": 9}),
    ]
    assert len({base, *others}) == 5


def test_cached_replies_make_no_new_calls(tmp_path):
    client = _scripted(tmp_path, script=lambda m: "Preferred: A")
    assert (
        client.chat_many([MSG, MSG, [{"role": "user", "content": "2"}]], cache_tag="v1", progress=False)
        == ["Preferred: A"] * 3
    )
    assert client.stats["calls"] == 2 and client.stats["cache_hits"] == 1  # the repeat inside the batch hit the cache
    again = _scripted(tmp_path, script=lambda m: pytest.fail("called the model for a cached item"))
    assert again.chat(MSG, cache_tag="v1") == "Preferred: A" and again.stats["calls"] == 0
    assert len(ReplyCache(tmp_path)) == 2


def test_call_budget_stops_before_the_extra_call():
    client = _scripted(script=lambda m: "x", budget_calls=2)
    client.chat([{"role": "user", "content": "1"}])
    client.chat([{"role": "user", "content": "2"}])
    with pytest.raises(BudgetExceeded, match="call budget spent"):
        client.chat([{"role": "user", "content": "3"}])
    assert client.stats["calls"] == 2


def test_scripted_rule_file(tmp_path):
    rules = tmp_path / "rules.jsonl"
    rules.write_text('{"match": "dragon", "reply": "Preferred: B"}\n{"reply": "one"}\n{"reply": "two"}\n')
    client = _scripted(script=str(rules))
    got = [client.chat([{"role": "user", "content": t}]) for t in ("a dragon", "x", "y", "z")]
    assert got == ["Preferred: B", "one", "two", "one"]
    (tmp_path / "bad.jsonl").write_text('{"match": "x"}\n')
    with pytest.raises(RlcwError, match="bad.jsonl:1"):
        _scripted(script=str(tmp_path / "bad.jsonl"))


def test_bad_kind_and_unknown_option():
    with pytest.raises(RlcwError, match="unknown client kind"):
        make_client(ClientConfig(kind="nope"))
    with pytest.raises(RlcwError, match="unknown client option"):
        make_client({"kind": "scripted", "temprature": 0})


def test_backoff_honours_retry_after_and_caps_it():
    class Resp:
        headers = {"retry-after": "7"}

    class Exc(Exception):
        response = Resp()

    assert backoff_seconds(1, Exc(), 1.0, 60.0) == 7.0
    assert backoff_seconds(1, Exc(), 1.0, 5.0) == 5.0
    assert 2.0 <= backoff_seconds(3, None, 1.0, 60.0) <= 4.0  # base * 2^(3-1) with jitter in [0.5, 1]


class _Fake(BaseHTTPRequestHandler):
    """Answers a scripted list of (status, headers) first, then 200 with a chat completion."""

    plan: list = []
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append((time.time(), self.headers.get("authorization"), body))
        status, headers = type(self).plan.pop(0) if type(self).plan else (200, {})
        logprobs = {
            "content": [
                {
                    "token": " A",
                    "logprob": -0.5,
                    "bytes": None,
                    "top_logprobs": [
                        {"token": " A", "logprob": math.log(0.5), "bytes": None},
                        {"token": " B", "logprob": math.log(0.2), "bytes": None},
                        {"token": "B", "logprob": math.log(0.05), "bytes": None},  # same label, no space
                        {"token": " Story", "logprob": math.log(0.1), "bytes": None},  # not a label
                    ],
                }
            ]
        }
        payload = (
            {"error": {"message": "busy"}}
            if status != 200
            else {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "Preferred: B"},
                        "logprobs": logprobs if body.get("logprobs") else None,
                    }
                ],
                "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
            }
        )
        data = json.dumps(payload).encode()
        self.send_response(status)
        for k, v in {"content-type": "application/json", "content-length": str(len(data)), **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def fake_server():
    _Fake.plan, _Fake.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_retries_429_with_retry_after_then_5xx(fake_server, tmp_path, monkeypatch):
    monkeypatch.setenv("RLCW_TEST_KEY", "sk-secret-123")
    _Fake.plan = [(429, {"retry-after": "0.3"}), (503, {})]
    cfg = ClientConfig(
        base_url=fake_server,
        model="judge",
        api_key_env="RLCW_TEST_KEY",
        retry_base_s=0.01,
        max_retries=3,
        cache_dir=str(tmp_path),
    )
    client = make_client(cfg)
    assert client.chat(MSG, max_tokens=5) == "Preferred: B"
    times = [t for t, *_ in _Fake.seen]
    assert len(times) == 3 and times[1] - times[0] >= 0.3  # waited as the server asked
    assert client.stats == {
        "calls": 1,
        "requests": 3,
        "cache_hits": 0,
        "retries": 2,
        "prompt_tokens": 11,
        "completion_tokens": 3,
    }
    assert _Fake.seen[0][1] == "Bearer sk-secret-123" and _Fake.seen[0][2]["temperature"] == 0.0
    assert all(b"sk-secret-123" not in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_client_errors_do_not_retry(fake_server):
    _Fake.plan = [(404, {})]
    client = make_client(ClientConfig(base_url=fake_server, model="judge", api_key_env=None, retry_base_s=0.01))
    with pytest.raises(RlcwError, match="HTTP 404"):
        client.chat(MSG)
    assert len(_Fake.seen) == 1 and client.stats["calls"] == 0


def test_gives_up_after_max_retries_on_5xx(fake_server):
    _Fake.plan = [(500, {})] * 3
    client = make_client(
        ClientConfig(base_url=fake_server, model="judge", api_key_env=None, retry_base_s=0.01, max_retries=2)
    )
    with pytest.raises(RlcwError, match="HTTP 500 after 3 attempts"):
        client.chat(MSG)
    assert len(_Fake.seen) == 3


def test_token_budget_counts_server_usage(fake_server):
    client = make_client(ClientConfig(base_url=fake_server, model="judge", api_key_env=None, budget_tokens=20))
    client.chat([{"role": "user", "content": "1"}])  # 14 tokens used
    client.chat([{"role": "user", "content": "2"}])  # 14 < 20 before the call: allowed -> 28
    with pytest.raises(BudgetExceeded, match="28 of 20 tokens"):
        client.chat([{"role": "user", "content": "3"}])
    assert len(_Fake.seen) == 2


def test_cache_is_safe_for_concurrent_writers(tmp_path):
    caches = [ReplyCache(tmp_path), ReplyCache(tmp_path)]  # two connections, as two processes would have

    def write(k: int) -> None:
        for i in range(40):
            caches[k].put(f"{k}-{i}", f"reply {k} {i}")

    threads = [threading.Thread(target=write, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ReplyCache(tmp_path)) == 80 and caches[0].get("1-39") == "reply 1 39"


# --- cache key: server and request parameters -----------------------------------------------


def _openai(url, tmp_path=None, **kw):
    kw.setdefault("api_key_env", None)
    return make_client(
        ClientConfig(
            kind="openai", base_url=url, model="m", max_retries=0, cache_dir=str(tmp_path) if tmp_path else None, **kw
        )
    )


def test_cache_key_covers_the_server(fake_server, tmp_path):
    first = _openai(fake_server, tmp_path)
    first.chat(MSG, cache_tag="v1")
    other_server = _openai(fake_server.replace("/v1", "/other/v1"), tmp_path)  # same model name, another server
    assert other_server.model_key != first.model_key
    other_server.chat(MSG, cache_tag="v1")
    assert other_server.stats["calls"] == 1 and other_server.stats["cache_hits"] == 0


@pytest.mark.parametrize(
    "option",
    [{"max_completion_tokens": 9}, {"response_format": {"type": "json_object"}}, {"extra_body": {"top_k": 5}}],
)
def test_cache_key_covers_every_request_parameter(fake_server, tmp_path, option):
    _openai(fake_server, tmp_path).chat(MSG, cache_tag="v1")
    changed = _openai(fake_server, tmp_path, **option)
    changed.chat(MSG, cache_tag="v1")
    assert changed.stats["calls"] == 1  # a different request is not answered from the cache
    same = _openai(fake_server, tmp_path, **option)
    same.chat(MSG, cache_tag="v1")
    assert same.stats["calls"] == 0 and same.stats["cache_hits"] == 1


def test_sampled_replies_are_never_cached(tmp_path):
    replies = iter(["Preferred: A", "Preferred: B"])
    client = _scripted(tmp_path, script=lambda m: next(replies), temperature=0.7)
    assert [client.chat(MSG, cache_tag="v1"), client.chat(MSG, cache_tag="v1")] == ["Preferred: A", "Preferred: B"]
    assert client.stats["calls"] == 2 and client.stats["cache_hits"] == 0 and len(ReplyCache(tmp_path)) == 0


def test_weights_fingerprint_changes_with_any_weight():
    import torch

    from rlcw.judges.clients.local import weights_fingerprint

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    before = weights_fingerprint(model)
    assert weights_fingerprint(model) == before
    with torch.no_grad():
        model[1].weight[0, 3] += 1e-3
    assert weights_fingerprint(model) != before


@pytest.mark.parametrize(
    "url,allowed",
    [
        ("http://10.0.0.7:8000/v1", False),
        ("http://judge.example.org/v1", False),
        ("https://judge.example.org/v1", True),
        ("http://127.0.0.1:8000/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8000/v1", True),
    ],
)
def test_no_key_over_plain_http_to_another_host(monkeypatch, url, allowed):
    monkeypatch.setenv("RLCW_TEST_KEY", "sk-secret")
    cfg = dict(kind="openai", base_url=url, model="m", api_key_env="RLCW_TEST_KEY")
    if allowed:
        make_client(ClientConfig(**cfg))
    else:
        with pytest.raises(RlcwError, match="refusing to send the API key") as err:
            make_client(ClientConfig(**cfg))
        assert "sk-secret" not in str(err.value)
        make_client(ClientConfig(**cfg, allow_insecure_key=True))  # explicitly allowed
    monkeypatch.delenv("RLCW_TEST_KEY")
    make_client(ClientConfig(**cfg))  # no key to send: nothing to refuse


def test_damaged_cache_is_a_clear_error_naming_the_file(tmp_path):
    cache = ReplyCache(tmp_path)
    for i in range(300):
        cache.put(f"k{i}", "reply " * 50)
    cache.close()
    path = tmp_path / "judge_cache.sqlite"
    data = bytearray(path.read_bytes())
    data[4096 * 2 : 4096 * 6] = b"\xab" * (4096 * 4)  # data pages overwritten, header intact
    path.write_bytes(bytes(data))
    with pytest.raises(RlcwError, match="damaged") as err:
        ReplyCache(tmp_path).get("k5")
    assert str(path) in str(err.value)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "judge_cache.sqlite").write_bytes(b"not sqlite at all " * 20)
    with pytest.raises(RlcwError, match="damaged or not a cache file"):
        ReplyCache(tmp_path / "other")


def test_wal_falls_back_to_the_default_journal(tmp_path, monkeypatch):
    real_connect = sqlite3.connect

    class NoWal:  # a filesystem without shared memory: WAL fails with an I/O error
        def __init__(self, conn):
            self._conn = conn

        def execute(self, sql, *args):
            if "journal_mode=WAL" in sql:
                raise sqlite3.OperationalError("disk I/O error")
            return self._conn.execute(sql, *args)

        def close(self):
            self._conn.close()

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: NoWal(real_connect(*a, **k)))
    cache = ReplyCache(tmp_path)
    cache.put("k", "v")
    assert cache.get("k") == "v" and cache.journal_mode == "delete"


def test_openai_pass_through_parameters(fake_server):
    schema = {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "object"}}}
    client = _openai(fake_server, max_completion_tokens=33, response_format=schema, extra_body={"top_k": 5})
    client.chat(MSG)
    body = _Fake.seen[-1][2]
    assert body["max_completion_tokens"] == 33 and "max_tokens" not in body
    assert body["response_format"] == schema and body["top_k"] == 5


def test_openai_logprob_verdicts(fake_server, tmp_path):
    client = _openai(fake_server, tmp_path, extra_body={"top_k": 5})
    [probs] = client.verdict_probs([MSG], "Preferred:", ("A", "B"), cache_tag="v1", progress=False)
    # " A" 0.5; " B" 0.2 + "B" 0.05 = 0.25; renormalised over the labels: 2/3, 1/3 (" Story" ignored)
    assert probs == pytest.approx({"A": 2 / 3, "B": 1 / 3})
    body = _Fake.seen[-1][2]
    assert body["messages"][-1] == {"role": "assistant", "content": "Preferred:"}
    assert body["logprobs"] is True and body["max_tokens"] == 1 and body["continue_final_message"] is True
    assert body["top_k"] == 5 and body["top_logprobs"] == 20
    again = _openai(fake_server, tmp_path, extra_body={"top_k": 5})
    assert again.verdict_probs([MSG], "Preferred:", ("A", "B"), cache_tag="v1", progress=False) == [probs]
    assert again.stats["calls"] == 0  # cached under a key that names the logprob verdict


def test_scripted_client_cannot_give_logprob_verdicts():
    with pytest.raises(RlcwError, match="cannot read verdicts from label probabilities"):
        _scripted(script=lambda m: "x").verdict_probs([MSG], "Preferred:", ("A", "B"), progress=False)
