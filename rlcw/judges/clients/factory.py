"""`make_client`: the client of a `ClientConfig` (or a dict of its keys), and what a report may show of one."""

from __future__ import annotations

import json

from rlcw.errors import RlcwError
from rlcw.judges.clients.base import KINDS, ChatClient, ClientConfig
from rlcw.judges.clients.local import LocalClient
from rlcw.judges.clients.openai_compatible import OpenAIClient
from rlcw.judges.clients.replay import ReplayClient
from rlcw.judges.clients.scripted import Script, ScriptedClient


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
