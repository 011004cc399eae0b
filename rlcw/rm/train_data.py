"""The training rows of both RM types, from preference pairs.

Bradley-Terry: pre-tokenized `chosen_ids` / `rejected_ids` rendered by `rlcw.rm.render.encode_for_rm`
(truncated, never dropped for length), an optional per-pair `margin` (a meta column, or
`scale * ln((c+1)/(r+1))` of the meta upvotes) and, for a two-head RM, the words of each side (the
ODIN loss ties the length head to them). GenRM: `input_ids` / `labels` of both orders of every pair,
(chosen, rejected) -> A and (rejected, chosen) -> B, so position is not learnt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlcw.errors import RlcwError, location
from rlcw.metrics.text import count_words
from rlcw.rm.render import RMSpec, encode_for_rm, encode_genrm_example, swap_story_labels

MARGINS = ("none", "column", "upvotes")


def upvote_margin(chosen: float, rejected: float, scale: float = 1.0) -> float:
    """BT margin from upvotes: scale * ln((chosen + 1) / (rejected + 1))."""
    return scale * math.log((chosen + 1.0) / (rejected + 1.0))


def pair_margins(
    pairs: list[dict],
    margin: str,
    where: str,
    *,
    margin_key: str = "margin",
    upvote_keys: Sequence[str] = ("chosen_upvotes", "rejected_upvotes"),
    scale: float = 1.0,
) -> list[float] | None:
    """Per-pair margins for TRL's `margin` column (None when margin=none): `meta.<margin_key>` (column) or
    `upvote_margin` of the two `meta.<upvote_keys>` (upvotes); errors name the row of `where`."""
    if margin == "none":
        return None
    if margin not in MARGINS:
        raise RlcwError(f"unknown rm.margin '{margin}'", hint="use none, column or upvotes")
    keys = [margin_key] if margin == "column" else list(upvote_keys)
    out = []
    for row, p in enumerate(pairs, start=1):
        meta = p.get("meta") or {}
        values = []
        for key in keys:
            v = meta.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise RlcwError(
                    f"rm.margin={margin} needs a number in meta.{key}, got {v!r}",
                    where=location(where, row, f"meta.{key}"),
                    hint="fix the row, or train with rm.margin=none",
                )
            values.append(float(v))
        if margin == "upvotes" and min(values) < 0:
            raise RlcwError(f"negative upvotes {values}", where=location(where, row, f"meta.{keys[0]}"))
        out.append(values[0] if margin == "column" else upvote_margin(values[0], values[1], scale))
    return out


def build_bt_dataset(pairs: list[dict], spec: RMSpec, tokenizer, margins: list[float] | None = None):
    """TRL's pre-tokenized preference rows: chosen_ids, rejected_ids[, margin][, chosen_words, rejected_words]."""
    from datasets import Dataset

    prompts = [p["prompt"] for p in pairs]
    data = {
        "chosen_ids": encode_for_rm(spec, tokenizer, prompts, [p["chosen"] for p in pairs]),
        "rejected_ids": encode_for_rm(spec, tokenizer, prompts, [p["rejected"] for p in pairs]),
    }
    if margins is not None:
        data["margin"] = margins
    if "heads" in spec.extra:  # the ODIN loss ties the length head to words
        data["chosen_words"] = [count_words(p["chosen"]) for p in pairs]
        data["rejected_words"] = [count_words(p["rejected"]) for p in pairs]
    return Dataset.from_dict(data)


def build_genrm_dataset(pairs: list[dict], spec: RMSpec, tokenizer, rationales: list[str] | None):
    """Both orders of every pair: (chosen, rejected) -> A and (rejected, chosen) -> B."""
    from datasets import Dataset

    ids, labels = [], []
    for n, p in enumerate(pairs):
        why = rationales[n] if rationales else None
        for first, second, verdict, text in (
            (p["chosen"], p["rejected"], "A", why),
            (p["rejected"], p["chosen"], "B", why and swap_story_labels(why)),
        ):
            x, y = encode_genrm_example(spec, tokenizer, p["prompt"], first, second, verdict, text)
            ids.append(x)
            labels.append(y)
    return Dataset.from_dict({"input_ids": ids, "labels": labels})
