"""Persistent reply cache for judge calls (sqlite, safe across threads and processes).

A key is the SHA-256 of the judge's identity (kind, server URL or local weights fingerprint, model
name), the template version (cache tag), the messages and every request parameter (max_tokens,
temperature, seed, max_completion_tokens, response_format, extra_body, logprob-verdict prefix and
labels), so a repeated or interrupted evaluation makes no new calls for items it already has, and
two servers or two checkpoints under one name never share entries. Only successful replies at
temperature 0 are stored (the client does not cache sampled replies: see rlcw.judges.clients.base).

    cache = ReplyCache("runs/judge_cache")
    key = cache_key("openai:http://host/v1:gpt-4o", "litbench-writerly-v1", messages, {"max_tokens": 256})
    cache.get(key) or cache.put(key, reply, tokens=123)

`request_key(tag, messages)` is the judge-independent hash of what was asked; verdict rows keep it
so stored replies can be matched to requests again (`client.kind=replay`).

The cache uses WAL journaling where the filesystem supports it and falls back to sqlite's default
rollback journal where it does not (network filesystems); a damaged cache file is an RlcwError
naming the file.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

from rlcw.errors import RlcwError

CACHE_FILE = "judge_cache.sqlite"


def cache_key(model: str, tag: str | None, messages: list[dict[str, str]], params: dict) -> str:
    """Stable hash of everything that decides a reply."""
    blob = json.dumps(
        {"model": model, "tag": tag or "", "messages": messages, "params": params}, sort_keys=True, ensure_ascii=False
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def request_key(tag: str | None, messages: list[dict[str, str]]) -> str:
    """Hash of the template version and the messages alone (the same request to any judge)."""
    blob = json.dumps({"tag": tag or "", "messages": messages}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ReplyCache:
    """key -> reply text in `<folder>/judge_cache.sqlite` (WAL where supported; one writer at a time)."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / CACHE_FILE
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise RlcwError(
                f"cannot open the judge cache: {exc}",
                where=str(self.path),
                hint="set client.cache_dir to a writable folder",
            ) from None
        self.journal_mode = self._journal()
        self._run(
            "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, model TEXT, tag TEXT, reply TEXT, "
            "tokens INTEGER, created REAL)"
        )

    def _journal(self) -> str:
        """WAL if the filesystem allows it, else sqlite's default rollback journal."""
        try:
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise self._damaged(exc) from None
            mode = self._run("PRAGMA journal_mode=DELETE").fetchone()[0]  # e.g. NFS: no shared memory for WAL
        return str(mode).lower()

    def _damaged(self, exc: Exception) -> RlcwError:
        return RlcwError(
            f"the judge cache is damaged or not a cache file ({exc})",
            where=str(self.path),
            hint="move the file aside (its replies are lost) or point client.cache_dir at another folder",
        )

    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, args)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise RlcwError(f"the judge cache is locked: {exc}", where=str(self.path)) from None
            raise self._damaged(exc) from None

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._run("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, reply: str, *, model: str = "", tag: str | None = None, tokens: int = 0) -> None:
        with self._lock:
            self._run(
                "INSERT OR REPLACE INTO replies (key, model, tag, reply, tokens, created) VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, tag or "", reply, int(tokens), time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._run("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
