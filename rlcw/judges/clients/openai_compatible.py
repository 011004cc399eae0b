"""`kind=openai`: any OpenAI-compatible server, with retries (timeouts, connection errors, 5xx, 429; the
server's Retry-After honoured) and the API key kept off plain-http URLs outside this machine."""

from __future__ import annotations

import email.utils
import ipaddress
import math
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from rlcw.errors import RlcwError
from rlcw.judges.clients.base import ChatClient, ClientConfig, renormalise


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
