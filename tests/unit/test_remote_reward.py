"""RemoteReward (client of `rlcw serve-rm`) against mock HTTP transports, and the server's request checks."""

from __future__ import annotations

import json

import httpx
import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.remote import RemoteReward, parse_rewards, split_evenly
from rlcw.rewards.server import ServerLimits, check_size, validate_request


def _remote(handler, urls=("http://a:1", "http://b:2"), **kw) -> RemoteReward:
    kw.setdefault("backoff_s", 0.0)
    return RemoteReward(list(urls), transport=httpx.MockTransport(handler), **kw)


def _length_server(calls: list):
    """A fake server whose reward is the completion's length; records (host, n items)."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append((request.url.host, len(body["completions"])))
        return httpx.Response(200, json={"rewards": [float(len(c)) for c in body["completions"]]})

    return handler


def test_split_evenly():
    assert split_evenly(5, 2) == [(0, 3), (3, 5)]
    assert split_evenly(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert split_evenly(1, 3) == [(0, 1)]


def test_batch_spread_over_urls_and_order_kept():
    calls: list = []
    reward = _remote(_length_server(calls))
    completions = ["a", "bb", "ccc", "dddd", "eeeee"]
    assert reward(["p"] * 5, completions) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert sorted(calls) == [("a", 3), ("b", 2)]


def test_chat_messages_are_reduced_to_text():
    calls: list = []
    reward = _remote(_length_server(calls), urls=["http://a:1"])
    prompts = [[{"role": "system", "content": "s"}, {"role": "user", "content": "write"}]]
    completions = [[{"role": "assistant", "content": "four"}]]
    assert reward(prompts, completions) == [4.0]


def test_retries_move_to_next_url_then_succeed():
    calls: list = []

    def handler(request):
        calls.append(request.url.host)
        if request.url.host == "a":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"rewards": [0.5]})

    assert _remote(handler)(["p"], ["x"]) == [0.5]
    assert calls == ["a", "b"]


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="not json"),
        httpx.Response(200, json={"rewards": [1.0, 2.0]}),  # wrong length
        httpx.Response(200, json={"rewards": ["high"]}),  # not a number
        httpx.Response(200, text='{"rewards": [NaN]}'),  # not finite
        httpx.Response(200, json={"scores": [1.0]}),  # wrong field
        httpx.Response(503, json={"error": "busy"}),
    ],
)
def test_garbage_or_server_errors_raise_after_retries(response):
    calls: list = []

    def handler(request):
        calls.append(1)
        return response

    with pytest.raises(RlcwError) as info:
        _remote(handler, urls=["http://a:1"], max_retries=2)(["p"], ["x"])
    assert len(calls) == 3  # first try + 2 retries
    assert "no reward was produced" in str(info.value)


def test_client_error_is_not_retried():
    calls: list = []

    def handler(request):
        calls.append(1)
        return httpx.Response(401, json={"error": "missing or wrong bearer token"})

    with pytest.raises(RlcwError, match="401"):
        _remote(handler, urls=["http://a:1"])(["p"], ["x"])
    assert len(calls) == 1


def test_token_from_env_is_sent(monkeypatch):
    monkeypatch.setenv("RM_TOKEN_TEST", "s3cret")
    seen = []

    def handler(request):
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"rewards": [1.0]})

    _remote(handler, urls=["http://a:1"], token_env="RM_TOKEN_TEST")(["p"], ["x"])
    assert seen == ["Bearer s3cret"]


def test_missing_token_env_and_bad_urls_are_errors(monkeypatch):
    monkeypatch.delenv("RM_TOKEN_UNSET", raising=False)
    with pytest.raises(RlcwError, match="RM_TOKEN_UNSET"):
        RemoteReward(["http://a:1"], token_env="RM_TOKEN_UNSET")
    with pytest.raises(RlcwError, match="at least one"):
        RemoteReward([])
    with pytest.raises(RlcwError, match="http://"):
        RemoteReward(["a:1"])


def test_parse_rewards_accepts_ints_rejects_bools():
    assert parse_rewards({"rewards": [1, 2.5]}, 2) == [1.0, 2.5]
    with pytest.raises(ValueError):
        parse_rewards({"rewards": [True]}, 1)


def test_server_request_validation():
    limits = ServerLimits(max_request_items=2, max_chars=5)
    assert validate_request({"prompts": ["a"], "completions": ["b"]}, limits) == (["a"], ["b"])
    for bad, words in [
        ([1, 2], "JSON object"),
        ({"prompts": ["a"]}, "'completions' must be a list of strings"),
        ({"prompts": ["a"], "completions": [3]}, "'completions' must be a list of strings"),
        ({"prompts": ["a", "b"], "completions": ["c"]}, "has 2 items"),
        ({"prompts": [], "completions": []}, "empty request"),
        ({"prompts": ["a"], "completions": ["b"], "extra": 1}, "unknown field"),
    ]:
        with pytest.raises(ValueError, match=words):
            validate_request(bad, limits)
    assert check_size(["a"] * 3, ["b"] * 3, limits).startswith("3 items > max_request_items=2")
    assert check_size(["a"], ["toolong"], limits) == "completions[0] has 7 characters > max_chars=5"
    assert check_size(["a"], ["b"], limits) is None
