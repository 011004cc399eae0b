"""The reward server under bad input, load and faults: a real uvicorn server on 127.0.0.1 in a thread,
serving a scripted scorer (deterministic scores from the text, countable calls, a poison word).

Covers the malformed-request corpus (each a 4xx with a clear message, the server answers after),
chunked uploads stopped at the limit, the bounded queue's 503 + Retry-After, per-request re-scoring
of a failing merged batch, and Idempotency-Key (a client timeout + retry scores once).
"""

from __future__ import annotations

import re
import socket
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from rlcw.rewards.remote import RemoteReward
from rlcw.rewards.server import ServerLimits, create_app

TOKEN = "tok-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def text_score(prompt: str, story: str) -> float:
    return (zlib.crc32(f"{prompt}\x00{story}".encode()) % 10_000) / 100.0


class ScriptedScorer:
    """Scores from the text; `delay_s` per call; any completion holding POISON fails the call."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s, self.calls, self.items = delay_s, 0, 0
        self.lock = threading.Lock()

    def score(self, prompts, stories):
        with self.lock:
            self.calls += 1
            self.items += len(prompts)
        time.sleep(self.delay_s)
        if any("POISON" in s for s in stories):
            raise ValueError("the scorer cannot read this story")
        for s in stories:  # what a real tokenizer does with a lone surrogate
            s.encode("utf-8")
        return [text_score(p, s) for p, s in zip(prompts, stories, strict=True)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, scorer, limits: ServerLimits, limit_concurrency: int | None = None):
        import uvicorn

        self.scorer = scorer
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(scorer, limits, token=TOKEN, name="scripted")
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", limit_concurrency=limit_concurrency
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started and time.time() < deadline:
            time.sleep(0.05)
        assert self.server.started

    def post(self, body=None, headers=None, **kwargs):
        return httpx.post(f"{self.url}/score", headers={**AUTH, **(headers or {})}, timeout=20, json=body, **kwargs)

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10).json()

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def served():
    made = []

    def make(scorer=None, limit_concurrency=None, **limits):
        base = {"max_request_items": 8, "max_chars": 2000, "max_wait_ms": 50.0}
        s = Served(scorer or ScriptedScorer(), ServerLimits(**{**base, **limits}), limit_concurrency)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


GOOD = {"prompts": ["p"], "completions": ["a story"]}

# (name, request kwargs, status, words in the error) -- the malformed-request corpus
CORPUS = [
    ("broken JSON", {"content": b"{not json"}, 400, "not valid JSON"),
    ("empty body", {"content": b""}, 400, "not valid JSON"),
    ("non-UTF-8 bytes", {"content": b'{"prompts": ["\xff\xfe"], "completions": ["x"]}'}, 400, "not UTF-8"),
    (
        "lone surrogate",
        {"content": b'{"prompts": ["p"], "completions": ["\\ud800 tale"]}'},
        400,
        "completions[0] is not encodable UTF-8",
    ),
    ("NaN", {"content": b'{"prompts": ["p"], "completions": [NaN]}'}, 400, "NaN is not valid JSON"),
    ("Infinity", {"content": b'{"prompts": ["p"], "completions": ["x"], "w": Infinity}'}, 400, "Infinity"),
    ("deeply nested", {"content": b"[" * 20_000 + b"]" * 20_000}, 400, "nested too deeply"),
    ("nested under the recursion limit", {"content": b"[" * 500 + b"]" * 500}, 400, "nested more than 8"),
    ("nested inside a field", {"content": b'{"prompts": [[[[[[[[["p"]]]]]]]]]}'}, 400, "nested more than 8 levels"),
    ("huge body", {"content": b"x" * 400_000}, 413, "too large"),
    ("not an object", {"json": ["p", "c"]}, 422, "JSON object"),
    ("wrong types", {"json": {"prompts": "p", "completions": "c"}}, 422, "list of strings"),
    ("numbers in the list", {"json": {"prompts": [1], "completions": [2]}}, 422, "list of strings"),
    ("null completions", {"json": {"prompts": ["p"], "completions": None}}, 422, "list of strings"),
    ("missing field", {"json": {"prompts": ["p"]}}, 422, "'completions' must be a list"),
    ("unknown field", {"json": {**GOOD, "temperature": 1}}, 422, "unknown field"),
    ("length mismatch", {"json": {"prompts": ["a", "b"], "completions": ["c"]}}, 422, "has 2 items"),
    ("empty lists", {"json": {"prompts": [], "completions": []}}, 422, "empty request"),
    ("oversize list", {"json": {"prompts": ["p"] * 9, "completions": ["c"] * 9}}, 413, "max_request_items=8"),
    ("oversize item", {"json": {"prompts": ["p"], "completions": ["x" * 2001]}}, 413, "max_chars=2000"),
    ("missing token", {"json": GOOD, "headers": {"Authorization": ""}}, 401, "bearer token"),
    ("wrong token", {"json": GOOD, "headers": {"Authorization": "Bearer nope"}}, 401, "bearer token"),
    ("empty Idempotency-Key", {"json": GOOD, "headers": {"Idempotency-Key": ""}}, 400, "Idempotency-Key"),
]


def test_malformed_request_corpus_gets_clear_4xx_and_the_server_lives_on(served):
    srv = served()
    assert len(CORPUS) >= 15
    for name, kwargs, status, words in CORPUS:
        kwargs = dict(kwargs)
        headers = {**AUTH, **kwargs.pop("headers", {})}
        resp = httpx.post(f"{srv.url}/score", headers=headers, timeout=20, **kwargs)
        assert resp.status_code == status, (name, resp.text)
        body = resp.json()
        assert words in f"{body['error']} {body['detail']}", (name, body)
        ok = srv.post(GOOD)
        assert ok.status_code == 200 and ok.json()["rewards"] == [text_score("p", "a story")], name
    assert srv.scorer.calls == len(CORPUS)  # no bad request reached the scorer


def _read_response(sock: socket.socket) -> bytes:
    """One HTTP response: the headers, then Content-Length bytes of body (they may come in separate packets)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(4096)
        if not part:
            return data
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
    while len(body) < length:
        part = sock.recv(4096)
        if not part:
            break
        body += part
    return head + b"\r\n\r\n" + body


def test_a_chunked_upload_is_stopped_at_the_limit(served):
    srv = served(max_body_bytes=10_000)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(
            b"POST /score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * 4096
        for _ in range(3):  # 12 KiB > 10,000 bytes, and the upload never ends
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = _read_response(sock)  # the old server waited for the whole body here (timeout)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"more than 10000 bytes" in answer
    assert srv.post(GOOD).status_code == 200


def test_a_full_queue_answers_503_with_retry_after(served):
    srv = served(ScriptedScorer(delay_s=1.0), max_queue=1, max_batch=1, max_wait_ms=0.0, retry_after_s=2)
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: srv.post({"prompts": ["p"], "completions": [f"s{i}"]}), range(6)))
    busy = [a for a in answers if a.status_code == 503]
    assert busy and all(a.headers["retry-after"] == "2" and "busy" in a.json()["error"] for a in busy)
    assert all(
        a.json()["rewards"] == [text_score("p", f"s{i}")] for i, a in enumerate(answers) if a.status_code == 200
    )
    assert srv.health()["rejected_busy"] == len(busy)


def test_a_failing_merged_batch_fails_only_the_bad_request(served):
    srv = served(max_wait_ms=400.0, max_batch=64)
    stories = ["one", "two", "POISON three", "four"]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda s: srv.post({"prompts": ["p"], "completions": [s]}), stories))
    assert srv.health()["largest_batch_requests"] > 1  # they were merged
    assert [a.status_code for a in answers] == [200, 200, 500, 200]
    assert "cannot read this story" in answers[2].json()["detail"]
    for story, a in zip(stories, answers, strict=True):
        if a.status_code == 200:
            assert a.json()["rewards"] == [text_score("p", story)]


def test_idempotency_key_scores_a_retried_request_once(served):
    srv = served()
    body = {"prompts": ["p", "q"], "completions": ["x", "y"]}
    first = srv.post(body, headers={"Idempotency-Key": "k1"})
    again = srv.post(body, headers={"Idempotency-Key": "k1"})
    assert first.json() == again.json() and srv.scorer.calls == 1
    other = srv.post({"prompts": ["p"], "completions": ["z"]}, headers={"Idempotency-Key": "k1"})
    assert other.status_code == 422 and "different body" in other.json()["error"]
    srv.post(body)  # no key: scored again
    assert srv.scorer.calls == 2 and srv.health()["idempotent_replays"] == 1


def test_client_timeout_and_retry_score_once(served, monkeypatch):
    srv = served(ScriptedScorer(delay_s=1.5))
    reward = RemoteReward([srv.url], timeout_s=0.5, max_retries=6, backoff_s=0.2, max_backoff_s=0.5)
    reward.token = TOKEN
    assert reward(["p"], ["slow story"]) == [text_score("p", "slow story")]
    assert srv.scorer.calls == 1  # the retries joined the request in flight


def test_remote_reward_honours_retry_after_and_keeps_its_idempotency_key():
    seen = []

    def handler(request):
        seen.append((time.monotonic(), request.headers.get("idempotency-key")))
        if len(seen) == 1:
            return httpx.Response(503, json={"error": "server busy"}, headers={"Retry-After": "0.6"})
        return httpx.Response(200, json={"rewards": [1.5]})

    reward = RemoteReward(["http://a"], backoff_s=0.01, max_backoff_s=5, transport=httpx.MockTransport(handler))
    assert reward(["p"], ["x"]) == [1.5]
    assert seen[1][0] - seen[0][0] >= 0.6  # waited as told, not the 0.01 s backoff
    assert seen[0][1] and seen[0][1] == seen[1][1]
