"""A TRL reward callable backed by one or more reward servers (`rlcw serve-rm`).

    reward = RemoteReward(["http://node1:8000", "http://node2:8000"], token_env="RLCW_RM_TOKEN")
    reward(prompts, completions)          # -> list[float], same order as the inputs

A call splits the batch into one contiguous chunk per URL and sends the chunks concurrently.
A chunk that fails (connection error, timeout, 5xx or 429, or a garbage answer: not JSON, wrong
length, a non-number) is retried with exponential backoff (tenacity), moving to the next URL
on each attempt; a 503 or 429 with `Retry-After` waits at least that long (capped at
`max_backoff_s`). Each chunk carries an `Idempotency-Key` kept across its retries, so a request
that timed out on the client but was scored on the server is not scored again (servers without
the cache ignore the header). After `max_retries` retries the call raises `RlcwError` naming the
URLs: a failed call never becomes a reward. A 4xx other than 429 means the request itself is
wrong and raises at once.
"""

from __future__ import annotations

import math
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

from rlcw.data.records import message_text
from rlcw.errors import RlcwError


class _Retryable(Exception):
    """A failure another attempt (maybe on another URL) could fix; `retry_after` from the server (s)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def retry_after_s(value: str | None) -> float | None:
    """A Retry-After header in seconds (HTTP-date forms are not used by rlcw servers: None)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def split_evenly(n: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous [start, end) ranges covering range(n), sizes differing by at most one;
    empty ranges are dropped (fewer items than URLs)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        if end > start:
            out.append((start, end))
        start = end
    return out


def parse_rewards(payload, expected: int) -> list[float]:
    """The rewards from a server answer; anything else is garbage (ValueError)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("rewards"), list):
        raise ValueError(f"expected a JSON object with a 'rewards' list, got {str(payload)[:200]!r}")
    rewards = payload["rewards"]
    if len(rewards) != expected:
        raise ValueError(f"expected {expected} rewards, got {len(rewards)}")
    for r in rewards:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
            raise ValueError(f"reward {r!r} is not a finite number")
    return [float(r) for r in rewards]


class RemoteReward:
    """`(prompts, completions, **kwargs) -> list[float]` scored by reward servers over HTTP."""

    def __init__(
        self,
        urls: list[str],
        token_env: str | None = None,
        timeout_s: float = 60,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
        transport=None,
    ):
        if isinstance(urls, str):
            urls = [urls]
        urls = [u.rstrip("/") for u in urls if u and u.strip()]
        if not urls:
            raise RlcwError(
                "RemoteReward needs at least one server URL",
                hint="e.g. http://127.0.0.1:8000 (start one with `rlcw serve-rm`)",
            )
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise RlcwError(f"reward server URL '{u}' must start with http:// or https://")
        self.urls = urls
        self.token = None
        if token_env:
            self.token = os.environ.get(token_env)
            if not self.token:
                raise RlcwError(
                    f"environment variable {token_env} (the reward server's bearer token) is not set",
                    hint=f"export {token_env}=<the token the server was started with>",
                )
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.transport = transport  # an httpx transport (tests: httpx.MockTransport)
        self.__name__ = "remote_rm"

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        return self.score([message_text(p) for p in prompts], [message_text(c) for c in completions])

    def score(self, prompts: list[str], stories: list[str]) -> list[float]:
        if len(prompts) != len(stories):
            raise RlcwError(f"{len(prompts)} prompts but {len(stories)} completions")
        if not prompts:
            return []
        import httpx

        ranges = split_evenly(len(prompts), len(self.urls))
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        with (
            httpx.Client(timeout=self.timeout_s, headers=headers, transport=self.transport) as client,
            ThreadPoolExecutor(len(ranges)) as pool,
        ):
            futures = [
                pool.submit(self._chunk, client, i, prompts[a:b], stories[a:b]) for i, (a, b) in enumerate(ranges)
            ]
            results = [f.result() for f in futures]
        return [r for chunk in results for r in chunk]

    def _chunk(self, client, first_url: int, prompts: list[str], stories: list[str]) -> list[float]:
        from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        attempts = []
        backoff = wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s)

        def wait(state) -> float:
            exc = state.outcome.exception() if state.outcome else None
            asked = getattr(exc, "retry_after", None) or 0.0
            return max(backoff(state), min(asked, self.max_backoff_s))

        key = uuid.uuid4().hex  # one key for this chunk across its retries: the server scores it once
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            retry=retry_if_exception_type(_Retryable),
            wait=wait,
            reraise=False,
        )
        try:
            for attempt in retrying:
                with attempt:
                    url = self.urls[(first_url + attempt.retry_state.attempt_number - 1) % len(self.urls)]
                    try:
                        return self._post(client, url, prompts, stories, key)
                    except _Retryable as exc:
                        attempts.append(f"{url}: {exc}")
                        raise
        except RetryError:
            pass
        raise RlcwError(
            f"reward server failed {len(attempts)} time(s); no reward was produced. Last errors: "
            + " | ".join(attempts[-3:]),
            where=", ".join(self.urls),
            hint="is `rlcw serve-rm` running and reachable from this node (host, port, token)? see its log",
        )

    def _post(self, client, url: str, prompts: list[str], stories: list[str], key: str | None = None) -> list[float]:
        import httpx

        headers = {"Idempotency-Key": key} if key else {}
        try:
            resp = client.post(f"{url}/score", json={"prompts": prompts, "completions": stories}, headers=headers)
        except httpx.HTTPError as exc:  # connection refused, timeout, protocol error
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Retryable(
                f"HTTP {resp.status_code}: {resp.text[:200]}", retry_after_s(resp.headers.get("retry-after"))
            )
        if resp.status_code >= 400:
            raise RlcwError(
                f"reward server rejected the request: HTTP {resp.status_code}: {resp.text[:300]}",
                where=url,
                hint="401: check the token (token_env); 413: lower the batch or the server's limits",
            )
        try:
            return parse_rewards(resp.json(), len(prompts))
        except ValueError as exc:  # includes JSON decode errors
            raise _Retryable(f"garbage answer: {exc}") from None
