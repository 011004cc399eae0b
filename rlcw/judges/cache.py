"""Persistent reply cache for judge calls (sqlite, safe across threads and processes).

A key is the SHA-256 of the model, the template version (cache tag), the messages and the
sampling parameters, so a repeated or interrupted evaluation makes no new calls for items it
already has. Only successful replies are stored.

    cache = ReplyCache("runs/judge_cache")
    key = cache_key("openai:gpt-4o", "litbench-writerly-v1", messages, {"max_tokens": 256})
    cache.get(key) or cache.put(key, reply, tokens=123)
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


class ReplyCache:
    """key -> reply text in `<folder>/judge_cache.sqlite` (WAL mode; one writer at a time)."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / CACHE_FILE
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, model TEXT, tag TEXT, reply TEXT, "
                "tokens INTEGER, created REAL)"
            )
        except sqlite3.Error as exc:
            raise RlcwError(
                f"cannot open the judge cache: {exc}",
                where=str(self.path),
                hint="set client.cache_dir to a writable folder",
            ) from None
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, reply: str, *, model: str = "", tag: str | None = None, tokens: int = 0) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO replies (key, model, tag, reply, tokens, created) VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, tag or "", reply, int(tokens), time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
