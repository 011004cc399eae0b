"""Rationales for GenRM-CoT training: one short comparison per preference pair.

Sources (`make_rationales(RationaleSource(...), pairs)`; `rlcw train-rm rm.type=genrm rm.cot=true rm.rationales.source=...`):
- `file`: a jsonl with one row per pair: `rationale` plus either `key` (= `pair_key(prompt,
  chosen, rejected)`) or the pair's `prompt`, `chosen`, `rejected`; optional `shown_first`
  (`chosen` | `rejected`, default `chosen`): which story the rationale calls "Story A".
- `teacher`: a local causal LM (through `rlcw.generation`) writes the rationale, told which story
  is better (post-hoc rationalisation, as in STaR).
- `judge`: an OpenAI-compatible judge (`rlcw.judges.clients`), told the same.

A rationale is written for one order (chosen shown as A); for the swapped order the labels
"Story A" and "Story B" are exchanged (`rlcw.rm.render.swap_story_labels`). Train-rm saves what it used as
`<run>/rationales.jsonl`, in the `file` layout, so a teacher's or a judge's work is reusable.

    rows = teacher_rationales(model, tok, pairs, max_new_tokens=64)
    write_rationales("runs/genrm/rationales.jsonl", pairs, rows)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError, location
from rlcw.io import atomic_write_jsonl, iter_jsonl
from rlcw.rm.render import swap_story_labels

TEACHER_SYSTEM = (
    "You are an expert editor of short fiction. You explain briefly and concretely why one story is better."
)


def pair_key(prompt: str, chosen: str, rejected: str) -> str:
    """Stable id of a preference pair (whitespace-insensitive at the ends)."""
    blob = "\x1f".join(t.strip() for t in (prompt, chosen, rejected))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def rationale_for_order(rationale: str, shown_first: str, first_is_chosen: bool) -> str:
    """The rationale as it reads when `first_is_chosen` says which story is shown as A."""
    return rationale if (shown_first == "chosen") == first_is_chosen else swap_story_labels(rationale)


def load_rationale_file(path: str | Path) -> dict[str, tuple[str, str]]:
    """`pair_key -> (rationale, shown_first)` from a jsonl file (errors name line and field)."""
    out: dict[str, tuple[str, str]] = {}
    for line, row in iter_jsonl(path):
        text = row.get("rationale")
        if not isinstance(text, str) or not text.strip():
            raise RlcwError("missing or empty rationale", where=location(path, line, "rationale"))
        if isinstance(row.get("key"), str):
            key = row["key"]
        elif all(isinstance(row.get(k), str) for k in ("prompt", "chosen", "rejected")):
            key = pair_key(row["prompt"], row["chosen"], row["rejected"])
        else:
            raise RlcwError(
                "a rationale row needs 'key' or 'prompt' + 'chosen' + 'rejected'",
                where=location(path, line, "key"),
                hint="key = rlcw.data.rationales.pair_key(prompt, chosen, rejected)",
            )
        shown = row.get("shown_first", "chosen")
        if shown not in ("chosen", "rejected"):
            raise RlcwError(
                f"shown_first must be chosen or rejected, got {shown!r}", where=location(path, line, "shown_first")
            )
        out[key] = (text.strip(), shown)
    return out


def rationales_from_file(path: str | Path, pairs: list[dict]) -> list[str]:
    """One rationale per pair (chosen shown as A), read from a `file` source; every pair must be there."""
    table = load_rationale_file(path)
    out = []
    for i, p in enumerate(pairs, start=1):
        key = pair_key(p["prompt"], p["chosen"], p["rejected"])
        if key not in table:
            raise RlcwError(
                f"no rationale for training pair {i} (key {key})",
                where=str(path),
                hint="generate them with rm.rationales.source=teacher (train-rm writes <run>/rationales.jsonl)",
            )
        text, shown = table[key]
        out.append(rationale_for_order(text, shown, first_is_chosen=True))
    return out


def request_text(prompt: str, chosen: str, rejected: str) -> str:
    """What a teacher or judge is asked: why Story A (the chosen one) beats Story B."""
    return (
        f"Writing prompt:\n{prompt.strip()}\n\nStory A:\n{chosen.strip()}\n\nStory B:\n{rejected.strip()}\n\n"
        "Readers preferred Story A. In two or three sentences, explain what makes Story A better than Story B "
        "(plot, coherence, style). Refer to them as Story A and Story B. Do not state a verdict line."
    )


def teacher_rationales(
    model, tokenizer, pairs: list[dict], *, max_new_tokens: int = 64, batch_size: int = 8, seed: int = 0
) -> list[str]:
    """Rationales written by a local causal LM, greedy (chosen shown as A)."""
    from rlcw.generation import generate_stories

    rows = [
        {"id": str(i), "prompt": request_text(p["prompt"], p["chosen"], p["rejected"])} for i, p in enumerate(pairs)
    ]
    records = generate_stories(
        model,
        tokenizer,
        rows,
        system_prompt=TEACHER_SYSTEM,
        system_name="teacher",
        max_new_tokens=max_new_tokens,
        temperature=0.0,
        batch_size=batch_size,
        seed=seed,
    )
    return [r["story"] for r in records]


def judge_rationales(client_config: dict, pairs: list[dict], *, max_tokens: int = 160, seed: int = 0) -> list[str]:
    """Rationales written by an OpenAI-compatible judge (`rlcw.judges.clients`), temperature 0."""
    try:
        from rlcw.judges.clients.base import ClientConfig
        from rlcw.judges.clients.factory import make_client
    except ImportError as exc:
        raise RlcwError(
            f"the judge client is not available: {exc}", hint="use rm.rationales.source=teacher or file"
        ) from None
    client = make_client(ClientConfig(**client_config))
    out = []
    for p in pairs:
        messages = [
            {"role": "system", "content": TEACHER_SYSTEM},
            {"role": "user", "content": request_text(p["prompt"], p["chosen"], p["rejected"])},
        ]
        out.append(client.chat(messages, max_tokens=max_tokens, temperature=0.0, seed=seed))
    return out


@dataclass
class RationaleSource:
    """Where GenRM-CoT rationales come from (train-rm's `rm.rationales.*`)."""

    source: str = "teacher"  # teacher | file | judge (GenRM-CoT only)
    file: str | None = None  # jsonl for source=file (layout: rlcw.data.rationales)
    teacher_model: str = "smollm2-135m-instruct"  # local model that writes the rationales (source=teacher)
    max_new_tokens: int = 64  # new-token cap of each rationale
    batch_size: int = 8  # pairs per teacher generation batch
    judge: dict[str, Any] = field(default_factory=dict)  # rlcw.judges.clients.base.ClientConfig fields


def make_rationales(r: RationaleSource, pairs: list[dict], seed: int = 0) -> list[str]:
    """One rationale per pair (chosen shown as A) from `r.source`: a jsonl `file`, a local `teacher_model` (loaded
    here for the call) or an OpenAI-compatible `judge`."""
    if r.source == "file":
        if not r.file:
            raise RlcwError(
                "rm.rationales.source=file needs rm.rationales.file", hint="point it at a jsonl of rationales"
            )
        return rationales_from_file(r.file, pairs)
    if r.source == "teacher":
        from rlcw.models import load_causal_lm, load_tokenizer

        tokenizer = load_tokenizer(r.teacher_model, padding_side="left")
        teacher = load_causal_lm(r.teacher_model)
        return teacher_rationales(
            teacher, tokenizer, pairs, max_new_tokens=r.max_new_tokens, batch_size=r.batch_size, seed=seed
        )
    if r.source == "judge":
        return judge_rationales(dict(r.judge), pairs, max_tokens=r.max_new_tokens, seed=seed)
    raise RlcwError(f"unknown rm.rationales.source '{r.source}'", hint="use teacher, file or judge")


def write_rationales(path: str | Path, pairs: list[dict], rationales: list[str]) -> Path:
    """Save rationales in the `file` source layout (chosen shown first)."""
    rows = [
        {"key": pair_key(p["prompt"], p["chosen"], p["rejected"]), "shown_first": "chosen", "rationale": r}
        for p, r in zip(pairs, rationales, strict=True)
    ]
    return atomic_write_jsonl(path, rows)
