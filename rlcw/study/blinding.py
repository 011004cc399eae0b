"""Blinding: cryptographically random A/B order and ids; who wrote what lives only in a key file.

    items, key = blind(pairs)              # items: what raters see; key: item_id -> identities
    write_key(path, key, packets, {"study_id": new_study_id()}); read_key(path)

An item is {"item_id", "prompt", "story_a", "story_b"} (+ "attention": True for attention
checks, whose expected answers are in the key). Item ids, A/B sides and the order of items come
from `secrets` (never from the config seed), so someone holding the code, the config and the
packets cannot recompute which side is which: the assignment exists only in the key. The key file
(written 0600) also lists each packet's rater and items. The checksum is SHA-256 of the file's
content (without the checksum) as canonical JSON (sorted keys, no spaces, UTF-8); `read_key`
refuses a key whose content no longer matches it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json, read_json

ATTENTION_TEXT = (
    "ATTENTION CHECK. This is not a story. To show you are reading carefully, please answer "
    "'B is better' for every question about this pair."
)


def _side(rec: dict) -> dict:
    meta = rec.get("meta") or {}
    return {"system": rec["system"], "record_id": rec.get("id"), "rm_score": meta.get("rm_score")}


def new_study_id() -> str:
    """A random id for one study, stored in every packet, answer file and the key (checked at ingest)."""
    return secrets.token_hex(8)


def blind(pairs: list[dict], attention_checks: int = 0) -> tuple[list[dict], dict]:
    """Shuffle A/B per pair, give each item a random id and shuffle the items (all from `secrets`);
    add `attention_checks` check items (a real story against an instruction to answer B everywhere)."""
    rng = secrets.SystemRandom()
    items, key = [], {}
    ids = set()

    def new_id() -> str:
        while (item_id := secrets.token_hex(8)) in ids:
            pass
        ids.add(item_id)
        return item_id

    pairs = list(pairs)
    rng.shuffle(pairs)  # the order pairs come in (e.g. sorted system names) must not reach the packets
    for pair in pairs:
        a, b = (pair["first"], pair["second"]) if secrets.randbits(1) else (pair["second"], pair["first"])
        item_id = new_id()
        items.append({"item_id": item_id, "prompt": pair["prompt"], "story_a": a["story"], "story_b": b["story"]})
        key[item_id] = {"prompt": pair["prompt"], "kind": pair["kind"], "A": _side(a), "B": _side(b)}
    for _k in range(attention_checks):
        source = pairs[rng.randrange(len(pairs))]["first"]
        item_id = new_id()
        items.append(
            {
                "item_id": item_id,
                "prompt": source["prompt"],
                "story_a": source["story"],
                "story_b": ATTENTION_TEXT,
                "attention": True,
            }
        )
        key[item_id] = {"prompt": source["prompt"], "kind": "attention", "expected": "B"}
    return items, key


def checksum(payload: dict) -> str:
    """SHA-256 of the payload as canonical JSON (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_key(path: str | Path, key: dict, packets: list[dict], extra: dict | None = None) -> Path:
    """Write {"items": key, "packets": {packet_id: {rater_id, sitting, item_ids}}, **extra, "sha256"}
    atomically; the checksum covers everything but itself."""
    payload = {
        **(extra or {}),
        "items": key,
        "packets": {
            p["packet_id"]: {
                "rater_id": p["rater_id"],
                "sitting": p["sitting"],
                "item_ids": [it["item_id"] for it in p["items"]],
            }
            for p in packets
        },
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # the key's folder is the owner's only (it is rlcw's own private/ folder)
    written = atomic_write_json(path, {**payload, "sha256": checksum(payload)})
    os.chmod(written, 0o600)
    return written


def read_key(path: str | Path) -> dict:
    """The key payload ("items", "packets", ...) after checking the checksum; a tampered or
    truncated key is an error."""
    path = Path(path)
    if not path.is_file():
        raise RlcwError("key file not found", where=str(path), hint="pass the key.json written by `rlcw study-export`")
    data = read_json(path, "key file", hint="restore the key from the export run")
    if not isinstance(data, dict) or not {"items", "packets", "sha256"} <= set(data):
        raise RlcwError(
            "key file lacks 'items', 'packets' or 'sha256'",
            where=str(path),
            hint="use the key.json written by study-export",
        )
    stated = data.pop("sha256")
    if checksum(data) != stated:
        raise RlcwError(
            "key file does not match its checksum (edited or corrupted)",
            where=f"{path} field 'sha256'",
            hint="restore key.json from the export run; never edit it by hand",
        )
    return data
