"""Judge verdict files for `rlcw study-ingest judges=[...]` (jsonl, one verdict per line).

Two layouts are read:
- `rlcw judge`'s verdicts.jsonl: {"prompt_id", "system_a", "system_b", "verdicts": {dimension:
  {"value": "A" | "B" | "Same", "valid": bool}}, ...}; LitBench's single "preferred" dimension
  counts as "overall"; invalid verdicts are skipped and counted.
- a simple one: {"prompt": "...", "system_a": "tuned", "system_b": "base", "winner": "A"} (A | B |
  tie/same | a system name) or "outcome": share of the win for system_a; optional "dimension"
  (default "overall"); "valid": false rows are skipped and counted.
Rows name the prompt by text ("prompt") or by "prompt_id", which ingest matches against the story
record ids in the study key (`rlcw judge` uses the id of a story record of that prompt). When a
pair was judged in both orders, the outcomes are averaged.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rlcw.errors import RlcwError, location
from rlcw.io import iter_jsonl

_WINNER = {"a": 1.0, "b": 0.0, "tie": 0.5, "same": 0.5}
_DIMENSION = {"preferred": "overall"}


def _outcome(value, row: dict, where: str) -> float:
    winner = str(value).strip().lower()
    if winner in _WINNER:
        return _WINNER[winner]
    if winner == str(row["system_a"]).lower():
        return 1.0
    if winner == str(row["system_b"]).lower():
        return 0.0
    raise RlcwError(
        f"unknown winner {value!r}", where=where, hint="use A, B, tie, one of the two system names, or give 'outcome'"
    )


def _row_outcomes(row: dict, path: Path, line: int) -> tuple[dict[str, float], int]:
    """({dimension: outcome for system_a}, invalid count) of one row."""
    if isinstance(row.get("verdicts"), dict):
        out, invalid = {}, 0
        for dim, v in row["verdicts"].items():
            if isinstance(v, dict) and v.get("valid") and v.get("value") is not None:
                out[_DIMENSION.get(dim, dim)] = _outcome(v["value"], row, location(path, line, f"verdicts.{dim}"))
            else:
                invalid += 1
        return out, invalid
    if row.get("valid") is False:
        return {}, 1
    dim = _DIMENSION.get(row.get("dimension", "overall"), row.get("dimension", "overall"))
    if "outcome" in row:
        value = row["outcome"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise RlcwError(f"outcome {value!r} is not a number in [0, 1]", where=location(path, line, "outcome"))
        return {dim: float(value)}, 0
    return {dim: _outcome(row.get("winner"), row, location(path, line, "winner"))}, 0


def read_verdicts(path: str | Path) -> tuple[list[dict], int]:
    """(rows {prompt | prompt_id, system_a, system_b, dimension, outcome}, invalid verdicts skipped)."""
    path = Path(path)
    sums: dict[tuple, list[float]] = defaultdict(list)
    invalid = 0
    for line, row in iter_jsonl(path):
        ref = (
            ("prompt", row["prompt"])
            if isinstance(row.get("prompt"), str) and row["prompt"]
            else ("prompt_id", str(row["prompt_id"]))
            if row.get("prompt_id") is not None
            else None
        )
        for key in ("system_a", "system_b"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise RlcwError(
                    "missing or empty text",
                    where=location(path, line, key),
                    hint="each verdict row needs prompt (or prompt_id), system_a, system_b and a verdict",
                )
        if ref is None:
            raise RlcwError(
                "no prompt or prompt_id", where=location(path, line, "prompt"), hint="name the prompt the pair answers"
            )
        outcomes, bad = _row_outcomes(row, path, line)
        invalid += bad
        for dim, o in outcomes.items():
            a, b = row["system_a"], row["system_b"]
            if a > b:  # one canonical order so both presentation orders average together
                a, b, o = b, a, 1.0 - o
            sums[(ref, a, b, dim)].append(o)
    rows = [
        {ref[0]: ref[1], "system_a": a, "system_b": b, "dimension": d, "outcome": sum(v) / len(v)}
        for (ref, a, b, d), v in sums.items()
    ]
    return rows, invalid
