"""`kind=scripted`: replies from a function, a list or a jsonl rule file (tests and dry runs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.judges.clients.base import ChatClient, ClientConfig, Messages

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
