"""Judge clients: any OpenAI-compatible server, a local transformers model, or a scripted one.

    from rlcw.judges.client import ClientConfig, make_client
    client = make_client(ClientConfig(kind="openai", base_url="http://127.0.0.1:8000/v1", model="m",
                                      cache_dir="runs/judge_cache", concurrency=4))
    reply = client.chat([{"role": "user", "content": "Say hi"}], max_tokens=16)
    replies = client.chat_many([conv1, conv2], cache_tag="litbench-writerly-v1")

Every client caches replies (when `cache_dir` is set) under a key made of the judge's identity
(kind, server URL or local weights fingerprint, model name), the cache tag (template version),
the messages and every request parameter, keeps a call/token budget and counts what it did in
`client.stats`. Replies sampled at temperature > 0 are never cached (not even per sample index):
a sampled reply is one draw, and replaying it would hide the judge's randomness.

Logprob verdicts: `client.verdict_probs(convs, "Preferred:", ("A", "B"))` appends the prefix as
the start of the judge's answer and reads the probabilities of the labels' first tokens at the
next position, renormalised over the labels (local models; OpenAI-compatible servers that return
`top_logprobs` and continue a final assistant message, e.g. vLLM, through `extra_body`).

`kind=replay` answers from stored replies (`replies=FILE`: rlcw's verdicts.jsonl or any jsonl of
{"request_key" or "request_id" (or "key"/"id"), "raw"/"reply"/"response"}) and never calls a model.

The OpenAI client retries timeouts, connection errors, 5xx and 429 with exponential backoff,
honouring a server's Retry-After, and passes `max_completion_tokens`, `response_format` and
`extra_body` through. The API key is read from the
environment variable named by `api_key_env`, never logged or written anywhere, and never sent
to a plain-http URL outside this machine unless `allow_insecure_key=true`.
`temperature`, `max_tokens` and `seed` left at None in a call take the config's values.
"""

from __future__ import annotations

import email.utils
import hashlib
import ipaddress
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tqdm.auto import tqdm

from rlcw.errors import RlcwError
from rlcw.judges.cache import ReplyCache, cache_key, request_key

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
    timeout_s: float = 120.0
    retry_base_s: float = 1.0  # first backoff; doubles per retry (capped at retry_max_s)
    retry_max_s: float = 60.0  # longest wait, also the cap on a server's Retry-After
    budget_calls: int | None = None  # stop with an error before making more uncached calls than this
    budget_tokens: int | None = None  # stop once this many prompt + completion tokens were used
    cache_dir: str | None = None  # folder of the reply cache (None = no cache)
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int | None = 0
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
        size = max(1, self.cfg.concurrency)
        bar = tqdm(total=len(conversations), initial=len(conversations) - len(todo), desc=desc, disable=not progress)
        try:
            for start in range(0, len(todo), size):
                chunk = todo[start : start + size]
                for _ in chunk:
                    self._reserve()
                try:
                    probs = self._label_probs([conversations[i] for i in chunk], prefix, labels)
                except BaseException:
                    with self._lock:
                        self.stats["calls"] -= len(chunk)
                    raise
                for i, p in zip(chunk, probs, strict=True):
                    out[i] = p
                    if self.cache is not None and p is not None:
                        self.cache.put(keys[i], json.dumps(p), model=self.model_key, tag=cache_tag)
                bar.update(len(chunk))
        finally:
            bar.close()
        return out

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
        max_tokens = self.cfg.max_tokens if max_tokens is None else max_tokens
        temperature = self.cfg.temperature if temperature is None else temperature
        seed = self.cfg.seed if seed is None else seed
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
        """Replies in input order, with at most `concurrency` calls in flight; the first error stops the rest.
        `ids` name the requests (used by the replay client; a model client ignores them)."""
        workers = max(
            1, min(self.cfg.concurrency, self.concurrency_cap or self.cfg.concurrency, len(conversations) or 1)
        )
        out: list[str | None] = [None] * len(conversations)
        bar = tqdm(total=len(conversations), desc=desc, disable=not progress)

        def one(i: int) -> None:
            out[i] = self.chat(
                conversations[i], max_tokens=max_tokens, temperature=temperature, seed=seed, cache_tag=cache_tag
            )
            bar.update(1)

        try:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(one, i) for i in range(len(conversations))]
                done, pending = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f for f in futures if f.done() and f.exception() is not None]
                if failed:
                    for f in pending:
                        f.cancel()
                    raise failed[0].exception()
        finally:
            bar.close()
        return [str(r) for r in out]

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


# --- OpenAI-compatible servers -------------------------------------------------------------


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header (a number or an HTTP date), if the error has one."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def backoff_seconds(attempt: int, exc: BaseException | None, base: float, cap: float) -> float:
    """Wait before retry `attempt` (1-based): the server's Retry-After, else base * 2^(attempt-1) with jitter."""
    after = _retry_after(exc) if exc is not None else None
    if after is not None:
        return min(after, cap)
    return min(cap, base * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)


def secure_for_key(base_url: str) -> bool:
    """True for https URLs and for plain http to this machine (localhost, 127.0.0.0/8, ::1)."""
    parts = urlsplit(base_url)
    if parts.scheme == "https":
        return True
    host = (parts.hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def renormalise(mass: dict[str, float]) -> dict[str, float] | None:
    """Probabilities over the labels summing to 1, or None when no label got any probability."""
    total = sum(mass.values())
    if not total > 0 or not math.isfinite(total):
        return None
    return {k: v / total for k, v in mass.items()}


def is_retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)):
        return True  # APITimeoutError is an APIConnectionError
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


class OpenAIClient(ChatClient):
    def __init__(self, cfg: ClientConfig):
        super().__init__(cfg)
        import openai

        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        if key and not cfg.allow_insecure_key and not secure_for_key(cfg.base_url):
            raise RlcwError(
                f"refusing to send the API key from ${cfg.api_key_env} over plain http to a host outside this machine",
                where=f"client.base_url={cfg.base_url}",
                hint="use https, a loopback URL (127.0.0.1), client.api_key_env=null for a server without a key, "
                "or client.allow_insecure_key=true on a network you trust",
            )
        # Local servers take any key; the openai client refuses an empty one.
        self._client = openai.OpenAI(
            base_url=cfg.base_url, api_key=key or "not-needed", timeout=cfg.timeout_s, max_retries=0
        )

    @property
    def model_key(self) -> str:
        return f"openai:{self.cfg.base_url.rstrip('/')}:{self.cfg.model}"

    def _complete(self, messages, max_tokens, temperature, seed):
        return self._retrying(self._request, messages, max_tokens, temperature, seed)

    def _create(self, messages, max_tokens, temperature, seed, *, logprobs: bool = False):
        """One chat.completions call with the config's pass-through parameters (a logprob verdict asks
        for one token and its top alternatives, without response_format)."""
        with self._lock:
            self.stats["requests"] += 1
        kwargs: dict[str, Any] = {"seed": seed} if seed is not None else {}
        body = dict(self.cfg.extra_body or {})
        if logprobs:
            kwargs |= {"max_tokens": 1, "logprobs": True, "top_logprobs": self.cfg.top_logprobs}
            body |= {"continue_final_message": True, "add_generation_prompt": False}
        else:
            if self.cfg.max_completion_tokens is not None:
                kwargs["max_completion_tokens"] = self.cfg.max_completion_tokens
            else:
                kwargs["max_tokens"] = max_tokens
            if self.cfg.response_format is not None:
                kwargs["response_format"] = dict(self.cfg.response_format)
        if body:
            kwargs["extra_body"] = body
        return self._client.chat.completions.create(
            model=self.cfg.model, messages=messages, temperature=temperature, **kwargs
        )

    def _retrying(self, fn, *args):
        import tenacity

        def before_sleep(state) -> None:
            with self._lock:
                self.stats["retries"] += 1

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_retryable),
            stop=tenacity.stop_after_attempt(self.cfg.max_retries + 1),
            wait=lambda s: backoff_seconds(
                s.attempt_number,
                s.outcome.exception() if s.outcome else None,
                self.cfg.retry_base_s,
                self.cfg.retry_max_s,
            ),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(fn, *args)
        except Exception as exc:
            raise self._user_error(exc) from None

    def _label_probs(self, batch, prefix, labels):
        """The chunk's requests in flight at once (verdict_probs cuts chunks of `concurrency`)."""
        if len(batch) == 1:
            return [self._retrying(self._one_label_probs, batch[0], prefix, labels)]
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            return list(pool.map(lambda m: self._retrying(self._one_label_probs, m, prefix, labels), batch))

    def _one_label_probs(self, messages, prefix, labels) -> dict[str, float] | None:
        """The server continues an assistant message holding the prefix for one token and returns its
        top logprobs (vLLM: continue_final_message; servers that ignore it answer from scratch)."""
        resp = self._create([*messages, {"role": "assistant", "content": prefix}], 1, 0.0, None, logprobs=True)
        content = resp.choices[0].logprobs.content if resp.choices and resp.choices[0].logprobs else None
        if not content:
            raise RlcwError(
                "the judge server returned no logprobs",
                where=self.cfg.base_url,
                hint="use verdict=text for this server",
            )
        mass = {label: 0.0 for label in labels}
        for alt in content[0].top_logprobs or []:
            label = alt.token.strip()
            if label in mass:
                mass[label] += math.exp(alt.logprob)
        return renormalise(mass)

    def _request(self, messages, max_tokens, temperature, seed):
        resp = self._create(messages, max_tokens, temperature, seed)
        text = resp.choices[0].message.content if resp.choices else None
        if text is None:
            raise RlcwError("the judge server returned no text", where=self.cfg.base_url)
        usage = resp.usage
        return text, int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)

    def _user_error(self, exc: Exception) -> Exception:
        import openai

        if isinstance(exc, RlcwError):
            return exc
        tries = f"after {self.cfg.max_retries + 1} attempts"
        if isinstance(exc, openai.APITimeoutError):
            return RlcwError(
                f"judge server timed out {tries} ({self.cfg.timeout_s} s each)",
                where=self.cfg.base_url,
                hint="raise client.timeout_s or lower client.max_tokens / client.concurrency",
            )
        if isinstance(exc, openai.APIConnectionError):
            return RlcwError(
                f"cannot reach the judge server {tries}",
                where=self.cfg.base_url,
                hint="start it (e.g. `transformers serve MODEL --host 127.0.0.1 --port 8000`) or fix client.base_url",
            )
        if isinstance(exc, openai.APIStatusError):
            body = getattr(exc, "body", None)
            detail = str(body.get("detail") or body.get("error") or body if isinstance(body, dict) else body or exc)[
                :300
            ]
            hint = {
                401: f"set the key in ${self.cfg.api_key_env}",
                404: "check client.model and client.base_url (it usually ends in /v1)",
            }
            when = f" {tries}" if is_retryable(exc) else ""
            return RlcwError(
                f"judge server answered HTTP {exc.status_code}{when}: {detail}",
                where=self.cfg.base_url,
                hint=hint.get(exc.status_code),
            )
        return exc


# --- a local transformers model ------------------------------------------------------------


class LocalClient(ChatClient):
    """A causal LM loaded through rlcw.models, greedy at temperature 0, one call at a time."""

    concurrency_cap = 1

    def __init__(self, cfg: ClientConfig):
        super().__init__(cfg)
        from rlcw.models import load_causal_lm, load_tokenizer

        self.tokenizer = load_tokenizer(cfg.model, padding_side="left")
        self.model = load_causal_lm(cfg.model).eval()
        self._gen_lock = threading.Lock()
        self.fingerprint = weights_fingerprint(self.model)

    @property
    def model_key(self) -> str:
        return f"local:{self.cfg.model}:{self.fingerprint}"

    def _label_probs(self, batch, prefix, labels):
        """One left-padded forward: P(label's first token) after `chat prompt + prefix`, renormalised."""
        import torch

        ids = []
        for label in labels:
            tokens = self.tokenizer(f" {label}", add_special_tokens=False)["input_ids"]
            ids.append(tokens[0])
        if len(set(ids)) != len(ids):
            raise RlcwError(f"labels {labels} share their first token in this tokenizer", where=self.cfg.model)
        with self._gen_lock, torch.no_grad():
            texts = [
                self.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) + prefix
                for m in batch
            ]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            logits = self.model(**enc).logits[:, -1, :].float()  # (B, V): left padding puts every end last
            probs = torch.softmax(logits, dim=-1)[:, ids]  # (B, n_labels)
            with self._lock:
                self.stats["prompt_tokens"] += int(enc["attention_mask"].sum())
        return [renormalise(dict(zip(labels, row, strict=True))) for row in probs.tolist()]

    def _complete(self, messages, max_tokens, temperature, seed):
        import torch

        with self._gen_lock, torch.no_grad():
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
            if seed is not None:
                torch.manual_seed(seed)
            sample = temperature > 0
            gen = self.model.generate(
                **enc,
                max_new_tokens=max_tokens,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            new = gen[0, enc["input_ids"].shape[1] :]  # (T_new,)
            return (
                self.tokenizer.decode(new, skip_special_tokens=True),
                int(enc["input_ids"].shape[1]),
                int(new.shape[0]),
            )

    def _complete_batch(
        self, batch: list[Messages], max_tokens: int, temperature: float, seed: int | None
    ) -> list[tuple[str, int, int]]:
        """One left-padded `generate` call for several conversations (replies in input order)."""
        import torch

        with self._gen_lock, torch.no_grad():
            texts = [self.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in batch]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            if seed is not None:
                torch.manual_seed(seed)
            sample = temperature > 0
            gen = self.model.generate(
                **enc,
                max_new_tokens=max_tokens,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            new = gen[:, enc["input_ids"].shape[1] :]  # (B, T_new)
            eos = self.tokenizer.eos_token_id
            out = []
            for i in range(len(batch)):
                n_out = int(new.shape[1]) if eos is None else int((new[i] != eos).cumprod(0).sum().item()) + 1
                n_out = min(n_out, int(new.shape[1]))
                out.append(
                    (
                        self.tokenizer.decode(new[i], skip_special_tokens=True),
                        int(enc["attention_mask"][i].sum()),
                        n_out,
                    )
                )
            return out

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
        """Like `ChatClient.chat_many`, but uncached conversations go through the model in batches of
        `concurrency` (sorted by length, left-padded): several times the throughput of one call at a time."""
        max_tokens = self.cfg.max_tokens if max_tokens is None else max_tokens
        temperature = self.cfg.temperature if temperature is None else temperature
        seed = self.cfg.seed if seed is None else seed
        params = self.request_params(max_tokens, temperature, seed)
        keys = [cache_key(self.model_key, cache_tag, m, params) for m in conversations]
        cache = self._cache_for(temperature)
        out: list[str | None] = [cache.get(k) if cache is not None else None for k in keys]
        hits = sum(r is not None for r in out)
        with self._lock:
            self.stats["cache_hits"] += hits
        todo = sorted(
            (i for i, r in enumerate(out) if r is None), key=lambda i: sum(len(m["content"]) for m in conversations[i])
        )
        size = max(1, self.cfg.concurrency)
        bar = tqdm(total=len(conversations), initial=hits, desc=desc, disable=not progress)
        try:
            for start in range(0, len(todo), size):
                chunk = todo[start : start + size]
                for _ in chunk:
                    self._reserve()
                try:
                    replies = self._complete_batch([conversations[i] for i in chunk], max_tokens, temperature, seed)
                except BaseException:
                    with self._lock:
                        self.stats["calls"] -= len(chunk)
                    raise
                for i, (reply, n_in, n_out) in zip(chunk, replies, strict=False):
                    out[i] = reply
                    with self._lock:
                        self.stats["prompt_tokens"] += n_in
                        self.stats["completion_tokens"] += n_out
                    if cache is not None:
                        cache.put(keys[i], reply, model=self.model_key, tag=cache_tag, tokens=n_in + n_out)
                bar.update(len(chunk))
        finally:
            bar.close()
        return [str(r) for r in out]


def weights_fingerprint(model) -> str:
    """A short hash of a model's weights: names, shapes, dtypes and up to 4,096 evenly spaced values
    of every tensor (any fine-tune or merged adapter changes it; seconds even for large models)."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            flat = tensor.detach().reshape(-1)
            step = max(1, flat.numel() // 4096)
            h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            h.update(flat[::step].to(torch.float32).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


# --- stored replies ------------------------------------------------------------------------


class ReplayClient(ChatClient):
    """Replies from a stored file, matched by request key (template version + messages) or request id;
    never calls a model. A request with no stored reply is an error naming it."""

    def __init__(self, cfg: ClientConfig):
        super().__init__(replace(cfg, cache_dir=None))
        if not cfg.replies:
            raise RlcwError("a replay client needs stored replies", where="client.replies", hint="client.replies=FILE")
        self.by_key, self.by_id = _load_replies(Path(cfg.replies))
        self.stats["replayed"] = 0

    def chat_many(self, conversations, *, cache_tag=None, ids=None, **_ignored) -> list[str]:
        out, missing = [], []
        for i, conv in enumerate(conversations):
            key, rid = request_key(cache_tag, conv), (ids[i] if ids is not None else None)
            if key in self.by_key:
                out.append(self.by_key[key])
                continue
            stored = self.by_id.get(rid) if rid is not None else None
            if stored is not None and stored[0] is not None:
                raise RlcwError(
                    f"the stored reply for request {rid!r} answered a different request (template or stories changed)",
                    where=self.cfg.replies,
                    hint="replay with the same stories, template and tests file as the run that wrote the replies",
                )
            if stored is None:
                missing.append(rid or key[:12])
                out.append("")
            else:
                out.append(stored[1])
        if missing:
            raise RlcwError(
                f"{len(missing)} of {len(conversations)} request(s) have no stored reply, e.g. {missing[0]!r}",
                where=self.cfg.replies,
                hint="store a reply per request (request_key or request_id), or judge those with a model",
            )
        self.stats["replayed"] += len(out)
        return out

    def _complete(self, messages, max_tokens, temperature, seed):
        return self.chat_many([messages])[0], 0, 0


def _load_replies(path: Path) -> tuple[dict[str, str], dict[str, tuple[str | None, str]]]:
    """({request_key: reply}, {request_id: (request_key or None, reply)}) from a jsonl file."""
    from rlcw.io import iter_jsonl

    by_key: dict[str, str] = {}
    by_id: dict[str, tuple[str | None, str]] = {}
    for line, obj in iter_jsonl(path):
        reply = next((obj[k] for k in ("raw", "reply", "response") if k in obj), None)
        key = obj.get("request_key", obj.get("key"))
        rid = obj.get("request_id", obj.get("id"))
        if not isinstance(reply, str) or not (isinstance(key, str) or isinstance(rid, str)):
            raise RlcwError(
                "each stored reply needs a text 'raw' (or 'reply'/'response') and a 'request_key' or 'request_id'",
                where=f"{path}:{line}",
                hint="rlcw judge writes such rows in verdicts.jsonl",
            )
        for table, name, value in ((by_key, key, reply), (by_id, rid, (key, reply))):
            if isinstance(name, str):
                if name in table and table[name] != value:
                    raise RlcwError(f"two different stored replies for {name!r}", where=f"{path}:{line}")
                table[name] = value
    return by_key, by_id


# --- scripted replies for tests ------------------------------------------------------------

Script = Callable[[Messages], str] | Sequence[str] | str | Path


def _load_script_file(path: Path) -> list[dict]:
    from rlcw.io import iter_jsonl

    rules = []
    for line, obj in iter_jsonl(path):
        match = obj.get("match")
        if not isinstance(obj.get("reply"), str) or not (match is None or isinstance(match, (str, list))):
            raise RlcwError(
                "each rule needs a text 'reply' and an optional 'match' (text or list of texts)",
                where=f"{path}:{line}",
                hint='e.g. {"match": ["Story A", "GOOD"], "reply": "Preferred: A"}',
            )
        rules.append({"reply": obj["reply"], "match": [match] if isinstance(match, str) else match})
    return rules


class ScriptedClient(ChatClient):
    """Replies from a function of the messages, a list (in call order, cycling) or a jsonl rule file.

    Rule file: one {"reply": str, "match": optional str or list of str} per line; the first rule
    whose `match` texts all occur in the conversation answers, else rules without `match` take turns."""

    concurrency_cap = 1  # call order decides list replies: keep it deterministic

    def __init__(self, cfg: ClientConfig, script: Script | None = None):
        super().__init__(cfg)
        script = script if script is not None else cfg.script
        if script is None:
            raise RlcwError("a scripted client needs replies", hint="set client.script to a jsonl rule file")
        self._fn: Callable[[Messages], str] | None = script if callable(script) else None
        self._rules: list[dict] = []
        if isinstance(script, (str, Path)):
            self._rules = _load_script_file(Path(script))
        elif not callable(script):
            self._rules = [{"reply": str(r), "match": None} for r in script]
        self._turn = 0

    def _complete(self, messages, max_tokens, temperature, seed):
        if self._fn is not None:
            return str(self._fn(messages)), 0, 0
        text = "\n".join(m.get("content", "") for m in messages)
        for rule in self._rules:
            if rule["match"] and all(m in text for m in rule["match"]):
                return rule["reply"], 0, 0
        free = [r for r in self._rules if not r["match"]]
        if not free:
            raise RlcwError(
                "no scripted rule matches this conversation", hint="add a rule without 'match' as the default"
            )
        with self._lock:
            reply, self._turn = free[self._turn % len(free)]["reply"], self._turn + 1
        return reply, 0, 0


def make_client(cfg: ClientConfig | dict, *, script: Script | None = None) -> ChatClient:
    """A client for `cfg.kind` (a dict is read as ClientConfig keys)."""
    if isinstance(cfg, dict):
        unknown = set(cfg) - set(ClientConfig.__dataclass_fields__)
        if unknown:
            raise RlcwError(
                f"unknown client option(s) {sorted(unknown)}",
                hint=f"valid: {', '.join(ClientConfig.__dataclass_fields__)}",
            )
        cfg = ClientConfig(**cfg)
    if cfg.kind not in KINDS:
        raise RlcwError(
            f"unknown client kind '{cfg.kind}'", where="client.kind", hint=f"use one of {', '.join(KINDS)}"
        )
    if cfg.concurrency < 1:
        raise RlcwError("concurrency must be at least 1", where="client.concurrency")
    if cfg.kind == "openai":
        return OpenAIClient(cfg)
    if cfg.kind == "local":
        return LocalClient(cfg)
    if cfg.kind == "replay":
        return ReplayClient(cfg)
    return ScriptedClient(cfg, script)


def describe_client(cfg: ClientConfig) -> dict:
    """What a report may show about a client (no key, only the variable's name)."""
    return json.loads(
        json.dumps(
            {
                k: getattr(cfg, k)
                for k in (
                    "kind",
                    "base_url",
                    "model",
                    "api_key_env",
                    "concurrency",
                    "max_retries",
                    "temperature",
                    "max_tokens",
                    "seed",
                    "max_completion_tokens",
                    "response_format",
                    "replies",
                )
            }
        )
    )
