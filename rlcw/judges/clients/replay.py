"""`kind=replay`: replies from a stored file (rlcw's verdicts.jsonl or any jsonl of request key/id + reply),
matched by request key or id; never calls a model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.judges.cache import request_key
from rlcw.judges.clients.base import ChatClient, ClientConfig


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
