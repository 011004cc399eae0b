"""An HTTP reward server: any scorer with `.score(prompts, stories) -> list[float]` behind FastAPI.

RL jobs on other nodes call it through `rlcw.rewards.remote.RemoteReward`. Concurrent requests
are batched: a single worker takes requests off an asyncio queue until `max_batch` items are
gathered or `max_wait_ms` has passed since the first one, scores them in ONE scorer call (in a
thread, so the event loop keeps accepting), and answers each request with its slice.

    POST /score   {"prompts": [...], "completions": [...]}  ->  {"rewards": [...]}
    GET  /health  {"status": "ok", ...batch statistics}     (no token needed)
    GET  /openapi.json, /docs

Binds 127.0.0.1 by default; with a token, /score needs `Authorization: Bearer <token>`.
Malformed or oversized requests get a 4xx JSON body `{"error": ..., "detail": ...}`: the body is
streamed and reading stops at the limit (413, chunked uploads too); undecodable, NaN/Infinity,
too deeply nested JSON or text that is not encodable UTF-8 (lone surrogates) is 400. The queue is
bounded: when `max_queue` requests wait, /score answers 503 with `Retry-After`. A scorer failure on a
merged batch is retried one request at a time, so only the request that breaks the scorer gets its
500. A request with an `Idempotency-Key` header is scored once: a retry with the same key (and
body) within `idempotency_ttl_s` gets the first answer, or waits for it while it is in flight.
Run it with `rlcw serve-rm`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import time
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

log = logging.getLogger("rlcw.serve_rm")


@dataclass
class ServerLimits:
    max_batch: int = 64  # items (prompt, completion pairs) per scorer call
    max_wait_ms: float = 10.0  # how long the first request of a batch waits for company
    max_request_items: int = 256  # items one request may carry
    max_chars: int = 20_000  # per prompt or completion
    max_body_bytes: int | None = None  # default: derived from the two limits above
    max_queue: int = 256  # requests waiting to be scored; more get 503 + Retry-After
    retry_after_s: int = 1  # what a 503 tells the client to wait
    max_json_depth: int = 8  # a /score body is 3 levels deep
    idempotency_ttl_s: float = 600.0  # how long a scored Idempotency-Key is remembered
    idempotency_max_keys: int = 10_000

    def body_limit(self) -> int:
        return self.max_body_bytes or self.max_request_items * 2 * (self.max_chars * 4 + 16) + 1024


@dataclass
class BatchStats:
    requests: int = 0
    items: int = 0
    batches: int = 0
    largest_batch_requests: int = 0  # most requests merged into one scorer call
    largest_batch_items: int = 0
    failed_batches: int = 0
    rejected_busy: int = 0  # 503: the queue was full
    idempotent_replays: int = 0  # requests answered from the Idempotency-Key cache
    batch_sizes: list[int] = field(default_factory=list)  # requests per scorer call (last 1000)

    def record(self, n_requests: int, n_items: int) -> None:
        self.batches += 1
        self.largest_batch_requests = max(self.largest_batch_requests, n_requests)
        self.largest_batch_items = max(self.largest_batch_items, n_items)
        self.batch_sizes = (self.batch_sizes + [n_requests])[-1000:]

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "batch_sizes"}


class Batcher:
    """Merges concurrent score requests into scorer calls (one worker task, one call at a time)."""

    def __init__(self, scorer, limits: ServerLimits):
        self.scorer = scorer
        self.limits = limits
        self.stats = BatchStats()
        self.queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._carry: tuple | None = None

    async def start(self) -> None:
        self.queue = asyncio.Queue(maxsize=self.limits.max_queue)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def submit(self, prompts: list[str], completions: list[str]) -> list[float]:
        """Queue one request and wait for its scores; `asyncio.QueueFull` when `max_queue` wait already."""
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((prompts, completions, future))
        return await future

    async def _next_batch(self) -> list[tuple]:
        """The next requests to score together: up to `max_batch` items or `max_wait_ms`."""
        first = self._carry if self._carry is not None else await self.queue.get()
        self._carry = None
        batch, size = [first], len(first[0])
        deadline = time.monotonic() + self.limits.max_wait_ms / 1000
        while size < self.limits.max_batch:
            if self.queue.empty():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                await asyncio.sleep(min(0.002, remaining))  # polling: no item is lost to a cancelled get()
                continue
            item = self.queue.get_nowait()
            if size + len(item[0]) > self.limits.max_batch:
                self._carry = item  # opens the next batch
                break
            batch.append(item)
            size += len(item[0])
        return batch

    async def _run(self) -> None:
        while True:
            await self._score(await self._next_batch())

    async def _score(self, batch: list[tuple]) -> None:
        prompts = [p for b in batch for p in b[0]]
        completions = [c for b in batch for c in b[1]]
        self.stats.record(len(batch), len(prompts))
        log.info("scoring batch: %d requests, %d items", len(batch), len(prompts))
        try:
            scores = await self._call(prompts, completions)
        except Exception as exc:  # noqa: BLE001 - the server lives on
            self.stats.failed_batches += 1
            log.exception("scorer failed")
            if len(batch) == 1:
                _settle(batch[0][2], exc=exc)
                return
            # one bad request must not fail the others merged with it: score each alone
            for p, c, future in batch:
                try:
                    _settle(future, result=await self._call(p, c))
                except Exception as one:  # noqa: BLE001
                    _settle(future, exc=one)
            return
        start = 0
        for p, _, future in batch:
            _settle(future, result=scores[start : start + len(p)])
            start += len(p)

    async def _call(self, prompts: list[str], completions: list[str]) -> list[float]:
        scores = await asyncio.to_thread(self.scorer.score, prompts, completions)
        scores = [float(s) for s in scores]
        if len(scores) != len(prompts) or not all(math.isfinite(s) for s in scores):
            raise ValueError(f"scorer returned {len(scores)} scores for {len(prompts)} items or a non-finite score")
        return scores


def _settle(future: asyncio.Future, result: list[float] | None = None, exc: BaseException | None = None) -> None:
    if future.done():  # the client may have gone away
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class IdempotencyCache:
    """Idempotency-Key -> (body hash, future of the scores, expiry); bounded in time and size."""

    def __init__(self, ttl_s: float, max_keys: int):
        self.ttl_s, self.max_keys = ttl_s, max_keys
        self.entries: OrderedDict[str, tuple[str, asyncio.Future, float]] = OrderedDict()

    def _expire(self) -> None:
        now = time.monotonic()
        while self.entries and (len(self.entries) > self.max_keys or next(iter(self.entries.values()))[2] < now):
            self.entries.popitem(last=False)

    def get(self, key: str) -> tuple[str, asyncio.Future] | None:
        self._expire()
        entry = self.entries.get(key)
        return (entry[0], entry[1]) if entry else None

    def put(self, key: str, body_hash: str, future: asyncio.Future) -> None:
        self.entries[key] = (body_hash, future, time.monotonic() + self.ttl_s)
        self._expire()

    def forget(self, key: str) -> None:
        self.entries.pop(key, None)


def _error(status: int, error: str, detail: Any = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": error, "detail": detail})


class BadBody(ValueError):
    """A body that is not usable JSON (400)."""


def _reject_constant(name: str):
    raise BadBody(f"{name} is not valid JSON (NaN and Infinity are not allowed)")


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a decoded JSON value (iterative; stops counting once past `limit`)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (list, dict)):
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def parse_body(raw: bytes, limits: ServerLimits) -> Any:
    """Decode a /score body strictly: UTF-8, bounded nesting, no NaN/Infinity (BadBody otherwise)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(f"body is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)  # the C parser: no Python loop over the bytes
    except json.JSONDecodeError as exc:
        raise BadBody(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadBody(f"JSON nested too deeply (more than {limits.max_json_depth} levels)") from None
    depth = json_depth(body, limits.max_json_depth)
    if depth > limits.max_json_depth:
        raise BadBody(f"JSON nested more than {limits.max_json_depth} levels deep")
    return body


def check_encodable(prompts: list[str], completions: list[str]) -> str | None:
    """The first text that is not encodable UTF-8 (a lone surrogate such as \\ud800), else None."""
    for key, values in (("prompts", prompts), ("completions", completions)):
        for i, text in enumerate(values):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"{key}[{i}] is not encodable UTF-8 ({exc.reason} at character {exc.start})"
    return None


async def read_limited(request: Request, limit: int) -> bytes | None:
    """The request body, streamed; None as soon as it passes `limit` bytes (chunked uploads too)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _busy(detail: str, limits: ServerLimits) -> JSONResponse:
    return JSONResponse(
        status_code=503,
        content={"error": "server busy", "detail": detail},
        headers={"Retry-After": str(limits.retry_after_s)},
    )


def validate_request(body: Any, limits: ServerLimits) -> tuple[list[str], list[str]]:
    """Check a decoded /score body; raise ValueError with a message a client can act on."""
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object with 'prompts' and 'completions'")
    unknown = set(body) - {"prompts", "completions"}
    if unknown:
        raise ValueError(f"unknown field(s): {sorted(unknown)}; expected 'prompts' and 'completions'")
    lists = []
    for key in ("prompts", "completions"):
        value = body.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"'{key}' must be a list of strings")
        lists.append(value)
    prompts, completions = lists
    if len(prompts) != len(completions):
        raise ValueError(f"'prompts' has {len(prompts)} items but 'completions' has {len(completions)}")
    if not prompts:
        raise ValueError("empty request: send at least one (prompt, completion) pair")
    return prompts, completions


def check_size(prompts: list[str], completions: list[str], limits: ServerLimits) -> str | None:
    if len(prompts) > limits.max_request_items:
        return f"{len(prompts)} items > max_request_items={limits.max_request_items}; split the request"
    for key, values in (("prompts", prompts), ("completions", completions)):
        for i, text in enumerate(values):
            if len(text) > limits.max_chars:
                return f"{key}[{i}] has {len(text)} characters > max_chars={limits.max_chars}"
    return None


class ScoreRequest(BaseModel):
    prompts: list[str]
    completions: list[str]


class ScoreResponse(BaseModel):
    rewards: list[float]


def create_app(scorer, limits: ServerLimits | None = None, token: str | None = None, name: str = "reward model"):
    """The FastAPI app serving `scorer` (see the module docstring for the API)."""
    limits = limits or ServerLimits()
    batcher = Batcher(scorer, limits)
    idempotent = IdempotencyCache(limits.idempotency_ttl_s, limits.idempotency_max_keys)

    @asynccontextmanager
    async def lifespan(app):
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(
        title="rlcw reward server",
        version="1",
        description=f"Scores (prompt, completion) pairs with {name}.",
        lifespan=lifespan,
    )
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": name, **batcher.stats.as_dict()}

    # The body is read and checked by hand (not by FastAPI's model binding) so every bad request
    # gets the same clear JSON error; the models above describe the API in /openapi.json.
    @app.post(
        "/score",
        response_model=ScoreResponse,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ScoreRequest.model_json_schema()}},
            }
        },
    )
    async def score(request: Request):
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return _error(401, "missing or wrong bearer token", "send 'Authorization: Bearer <token>'")
        raw = await read_limited(request, limits.body_limit())
        if raw is None:
            return _error(413, "request body too large", f"more than {limits.body_limit()} bytes; split the request")
        try:
            body = parse_body(raw, limits)
        except BadBody as exc:
            return _error(400, "body is not valid JSON", str(exc))
        try:
            prompts, completions = validate_request(body, limits)
        except ValueError as exc:
            return _error(422, "malformed request", str(exc))
        bad_text = check_encodable(prompts, completions)
        if bad_text:
            return _error(400, "text is not valid UTF-8", bad_text)
        too_big = check_size(prompts, completions, limits)
        if too_big:
            return _error(413, "request too large", too_big)
        key = request.headers.get("idempotency-key")
        if key is not None and not (0 < len(key) <= 200):
            return _error(400, "bad Idempotency-Key", "send 1-200 characters, e.g. a uuid4")
        body_hash = hashlib.sha256(raw).hexdigest()
        batcher.stats.requests += 1
        batcher.stats.items += len(prompts)
        seen = idempotent.get(key) if key is not None else None
        if seen is not None and not seen[1].cancelled():
            if seen[0] != body_hash:
                return _error(422, "Idempotency-Key reused with a different body", "send a new key per request")
            batcher.stats.idempotent_replays += 1
            try:
                return {"rewards": await asyncio.shield(seen[1])}
            except asyncio.CancelledError:
                if not seen[1].cancelled():
                    raise
                return _busy("the first request with this Idempotency-Key did not finish; retry", limits)
        future = asyncio.get_running_loop().create_future()
        if key is not None:
            idempotent.put(key, body_hash, future)
        try:
            rewards = await batcher.submit(prompts, completions)
            future.set_result(rewards)
        except asyncio.QueueFull:
            batcher.stats.rejected_busy += 1
            return _busy(f"{limits.max_queue} requests are waiting; retry later", limits)
        except Exception as exc:  # noqa: BLE001
            return _error(500, "scorer failed", f"{type(exc).__name__}: {exc}")
        finally:
            if not future.done():  # failed, busy or cancelled: a retry with this key scores afresh
                if key is not None:
                    idempotent.forget(key)
                future.cancel()
        return {"rewards": rewards}

    return app
