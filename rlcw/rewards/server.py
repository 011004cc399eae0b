"""An HTTP reward server: any scorer with `.score(prompts, stories) -> list[float]` behind FastAPI.

RL jobs on other nodes call it through `rlcw.rewards.remote.RemoteReward`. Concurrent requests
are batched: a single worker takes requests off an asyncio queue until `max_batch` items are
gathered or `max_wait_ms` has passed since the first one, scores them in ONE scorer call (in a
thread, so the event loop keeps accepting), and answers each request with its slice.

    POST /score   {"prompts": [...], "completions": [...]}  ->  {"rewards": [...]}
    GET  /health  {"status": "ok", ...batch statistics}     (no token needed)
    GET  /openapi.json, /docs

Binds 127.0.0.1 by default; with a token, /score needs `Authorization: Bearer <token>`.
Malformed or oversized requests get a 4xx JSON body `{"error": ..., "detail": ...}`; a scorer
failure is a 500 for that batch only; the server keeps serving. Run it with `rlcw serve-rm`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import time
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
        self.queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def submit(self, prompts: list[str], completions: list[str]) -> list[float]:
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((prompts, completions, future))
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
            scores = await asyncio.to_thread(self.scorer.score, prompts, completions)
            scores = [float(s) for s in scores]
            if len(scores) != len(prompts) or not all(math.isfinite(s) for s in scores):
                raise ValueError(
                    f"scorer returned {len(scores)} scores for {len(prompts)} items or a non-finite score"
                )
        except Exception as exc:  # noqa: BLE001 - every waiting request gets the error, the server lives on
            self.stats.failed_batches += 1
            log.exception("scorer failed")
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for p, _, future in batch:
            if not future.done():  # the client may have gone away
                future.set_result(scores[start : start + len(p)])
            start += len(p)


def _error(status: int, error: str, detail: Any = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": error, "detail": detail})


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
    import json

    limits = limits or ServerLimits()
    batcher = Batcher(scorer, limits)

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
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limits.body_limit():
            return _error(413, "request body too large", f"{declared} bytes > {limits.body_limit()}")
        raw = await request.body()
        if len(raw) > limits.body_limit():
            return _error(413, "request body too large", f"{len(raw)} bytes > {limits.body_limit()}")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(400, "body is not valid JSON", str(exc))
        try:
            prompts, completions = validate_request(body, limits)
        except ValueError as exc:
            return _error(422, "malformed request", str(exc))
        too_big = check_size(prompts, completions, limits)
        if too_big:
            return _error(413, "request too large", too_big)
        batcher.stats.requests += 1
        batcher.stats.items += len(prompts)
        try:
            rewards = await batcher.submit(prompts, completions)
        except Exception as exc:  # noqa: BLE001
            return _error(500, "scorer failed", f"{type(exc).__name__}: {exc}")
        return {"rewards": rewards}

    return app
