"""The judge-client interface: `ClientConfig` (the `client.*` keys), and `ChatClient`, which every kind extends
with its `_complete`: reply cache, call/token budget, statistics, bounded concurrency, logprob verdicts."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from rlcw.errors import RlcwError
from rlcw.judges.cache import ReplyCache, cache_key

Messages = list[dict[str, str]]


KINDS = ("openai", "local", "scripted", "replay")


@dataclass
class ClientConfig:
    """How to reach a judge model (`client.*` keys of `rlcw judge`)."""

    kind: str = "openai"  # openai | local | scripted | replay
    base_url: str = "http://127.0.0.1:8000/v1"  # OpenAI-compatible endpoint (kind=openai)
    model: str = "smollm2-135m-instruct"  # model name sent to the server, or a model spec (kind=local)
    api_key_env: str | None = "OPENAI_API_KEY"  # environment variable holding the key (never logged)
    concurrency: int = 4  # requests in flight at once (kind=openai); conversations per batched generate (kind=local)
    max_retries: int = 4  # retries after the first attempt (timeouts, connection errors, 5xx, 429)
    timeout_s: float = 120.0  # kind=openai: seconds before a request times out (then retried up to max_retries)
    retry_base_s: float = 1.0  # first backoff; doubles per retry (capped at retry_max_s)
    retry_max_s: float = 60.0  # longest wait, also the cap on a server's Retry-After
    budget_calls: int | None = None  # stop with an error before making more uncached calls than this
    budget_tokens: int | None = None  # stop once this many prompt + completion tokens were used
    cache_dir: str | None = None  # folder of the reply cache (None = no cache)
    temperature: float = 0.0  # sampling temperature of the judge (replies at > 0 are never cached)
    max_tokens: int = 512  # new-token cap of each reply
    seed: int | None = 0  # seed sent with each request (None = none)
    script: str | None = None  # kind=scripted: jsonl of {"reply", optional "match"} rules
    replies: str | None = None  # kind=replay: stored replies (a verdicts.jsonl, or jsonl of request_key/id + reply)
    max_completion_tokens: int | None = None  # kind=openai: sent as max_completion_tokens instead of max_tokens
    response_format: dict[str, Any] | None = None  # kind=openai: e.g. {type: json_schema, json_schema: {...}}
    extra_body: dict[str, Any] | None = None  # kind=openai: extra JSON fields for the server (e.g. vLLM options)
    top_logprobs: int = 20  # kind=openai, verdict=logprobs: how many alternatives the server returns
    allow_insecure_key: bool = False  # send the API key to a plain-http URL outside this machine anyway


class BudgetExceeded(RlcwError):
    """The call or token budget of a client is spent."""


class ChatClient:
    """Shared cache, budget, statistics and bounded concurrency; subclasses implement `_complete`."""

    concurrency_cap: int | None = None  # e.g. 1 for an in-process model

    def __init__(self, cfg: ClientConfig):
        self.cfg = cfg
        self.cache = ReplyCache(cfg.cache_dir) if cfg.cache_dir else None
        self.stats = {
            "calls": 0,
            "requests": 0,
            "cache_hits": 0,
            "retries": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
        }
        self._lock = threading.Lock()

    @property
    def model_key(self) -> str:
        return f"{self.cfg.kind}:{self.cfg.model}"

    def request_params(self, max_tokens: int, temperature: float, seed: int | None) -> dict:
        """Every parameter of a request that can change the reply (all part of the cache key)."""
        return {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
            "max_completion_tokens": self.cfg.max_completion_tokens,
            "response_format": self.cfg.response_format,
            "extra_body": self.cfg.extra_body,
        }

    def _cache_for(self, temperature: float) -> ReplyCache | None:
        """The cache, or None for sampled requests (temperature > 0 is never cached)."""
        return self.cache if temperature == 0 else None

    def _label_probs(
        self, batch: list[Messages], prefix: str, labels: tuple[str, ...]
    ) -> list[dict[str, float] | None]:
        raise RlcwError(
            f"client.kind={self.cfg.kind} cannot read verdicts from label probabilities",
            where="verdict",
            hint="verdict=logprobs needs client.kind=local or an OpenAI-compatible server that returns logprobs",
        )

    def verdict_probs(
        self,
        conversations: Sequence[Messages],
        prefix: str,
        labels: tuple[str, ...],
        *,
        cache_tag: str | None = None,
        desc: str = "judge",
        progress: bool = True,
    ) -> list[dict[str, float] | None]:
        """Per conversation, {label: probability} of the label read right after the answer prefix
        (renormalised over the labels), or None when the judge gave no probability to any label."""
        params = {"verdict": "logprobs", "prefix": prefix, "labels": list(labels), **self.request_params(1, 0.0, None)}
        keys = [cache_key(self.model_key, cache_tag, m, params) for m in conversations]
        out: list[dict[str, float] | None] = [None] * len(conversations)
        todo = []
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is None:
                todo.append(i)
            else:
                out[i] = json.loads(hit)
        with self._lock:
            self.stats["cache_hits"] += len(conversations) - len(todo)
        bar = tqdm(total=len(conversations), initial=len(conversations) - len(todo), desc=desc, disable=not progress)
        try:
            for chunk, probs in self._in_batches(conversations, todo, lambda b: self._label_probs(b, prefix, labels)):
                for i, p in zip(chunk, probs, strict=True):
                    out[i] = p
                    if self.cache is not None and p is not None:
                        self.cache.put(keys[i], json.dumps(p), model=self.model_key, tag=cache_tag)
                bar.update(len(chunk))
        finally:
            bar.close()
        return out

    def _in_batches(
        self, conversations: Sequence[Messages], todo: list[int], call: Callable[[list[Messages]], list]
    ) -> Iterator[tuple[list[int], list]]:
        """(indices, `call` of their conversations) for the indices `todo`, `concurrency` at a time; each batch's
        calls are reserved against the budget first and given back when the batch fails."""
        size = max(1, self.cfg.concurrency)
        for start in range(0, len(todo), size):
            chunk = todo[start : start + size]
            for _ in chunk:
                self._reserve()
            try:
                results = call([conversations[i] for i in chunk])
            except BaseException:
                with self._lock:
                    self.stats["calls"] -= len(chunk)
                raise
            yield chunk, results

    def _complete(
        self, messages: Messages, max_tokens: int, temperature: float, seed: int | None
    ) -> tuple[str, int, int]:
        """(reply, prompt tokens, completion tokens) of one real call."""
        raise NotImplementedError

    def _reserve(self) -> None:
        with self._lock:
            used = self.stats["prompt_tokens"] + self.stats["completion_tokens"]
            if self.cfg.budget_calls is not None and self.stats["calls"] >= self.cfg.budget_calls:
                raise BudgetExceeded(
                    f"call budget spent ({self.cfg.budget_calls} calls)",
                    hint="raise client.budget_calls; cached replies cost nothing on a re-run",
                )
            if self.cfg.budget_tokens is not None and used >= self.cfg.budget_tokens:
                raise BudgetExceeded(
                    f"token budget spent ({used} of {self.cfg.budget_tokens} tokens)",
                    hint="raise client.budget_tokens; cached replies cost nothing on a re-run",
                )
            self.stats["calls"] += 1

    def _resolve(
        self, max_tokens: int | None, temperature: float | None, seed: int | None
    ) -> tuple[int, float, int | None]:
        """A request's parameters: the caller's, else the client's own (`client.*`)."""
        return (
            self.cfg.max_tokens if max_tokens is None else max_tokens,
            self.cfg.temperature if temperature is None else temperature,
            self.cfg.seed if seed is None else seed,
        )

    def chat(
        self,
        messages: Messages,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        cache_tag: str | None = None,
    ) -> str:
        """The reply to one conversation (from the cache when it holds it)."""
        max_tokens, temperature, seed = self._resolve(max_tokens, temperature, seed)
        key = cache_key(self.model_key, cache_tag, messages, self.request_params(max_tokens, temperature, seed))
        cache = self._cache_for(temperature)
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                with self._lock:
                    self.stats["cache_hits"] += 1
                return hit
        self._reserve()
        try:
            reply, n_in, n_out = self._complete(messages, max_tokens, temperature, seed)
        except BaseException:
            with self._lock:
                self.stats["calls"] -= 1  # a failed call is not counted (nothing came back)
            raise
        with self._lock:
            self.stats["prompt_tokens"] += n_in
            self.stats["completion_tokens"] += n_out
        if cache is not None:
            cache.put(key, reply, model=self.model_key, tag=cache_tag, tokens=n_in + n_out)
        return reply

    def chat_many(
        self,
        conversations: Sequence[Messages],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        cache_tag: str | None = None,
        desc: str = "judge",
        progress: bool = True,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Replies in input order (`_reply_all`: by default at most `concurrency` calls in flight; the first error
        stops the rest). `ids` name the requests (used by the replay client; a model client ignores them)."""
        max_tokens, temperature, seed = self._resolve(max_tokens, temperature, seed)
        bar = tqdm(total=len(conversations), desc=desc, disable=not progress)
        try:
            return self._reply_all(conversations, max_tokens, temperature, seed, cache_tag, bar)
        finally:
            bar.close()

    def _reply_all(
        self, conversations: Sequence[Messages], max_tokens: int, temperature: float, seed: int | None, cache_tag, bar
    ) -> list[str]:
        """`chat` of every conversation, at most `concurrency` calls in flight; the first error stops the rest."""
        workers = max(
            1, min(self.cfg.concurrency, self.concurrency_cap or self.cfg.concurrency, len(conversations) or 1)
        )
        out: list[str | None] = [None] * len(conversations)

        def one(i: int) -> None:
            out[i] = self.chat(
                conversations[i], max_tokens=max_tokens, temperature=temperature, seed=seed, cache_tag=cache_tag
            )
            bar.update(1)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(one, i) for i in range(len(conversations))]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if failed:
                for f in pending:
                    f.cancel()
                raise failed[0].exception()
        return [str(r) for r in out]

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def renormalise(mass: dict[str, float]) -> dict[str, float] | None:
    """Probabilities over the labels summing to 1, or None when no label got any probability."""
    total = sum(mass.values())
    if not total > 0 or not math.isfinite(total):
        return None
    return {k: v / total for k, v in mass.items()}
