"""Latin-square assignment of items to raters and sittings (Agents' Room human evaluation).

    packets = assign(items, raters_per_item=3, per_sitting=5)

Items are grouped by prompt; prompt j has c_j items (e.g. one per compared system pair) and
c = max c_j. There are c rater groups (times `raters_per_item` raters each). Group g rates, for
prompt j, the item (g + j) mod c of that prompt (skipped when the prompt has fewer items), so
every item is rated by exactly `raters_per_item` raters and nobody sees a prompt twice. Group g
also starts its sequence at prompt g (a cyclic shift), balancing position effects. Each rater's
sequence is cut into sittings of at most `per_sitting` items; a packet is one rater's sitting.
Attention-check items (`item["attention"]`) are added one per sitting, at a random position
(`secrets`: a rater holding the code cannot predict where the check is).
"""

from __future__ import annotations

import secrets
from collections import defaultdict


def _sequences(items: list[dict]) -> list[list[dict]]:
    """One item sequence per rater group (see the module docstring)."""
    by_prompt: dict[str, list[dict]] = defaultdict(list)
    for item in items:
        by_prompt[item["prompt"]].append(item)
    prompts = list(by_prompt)
    c = max(len(v) for v in by_prompt.values())
    m = len(prompts)
    groups = []
    for g in range(c):
        seq = []
        for step in range(m):
            j = (g + step) % m
            k = (g + j) % c  # the cyclic Latin square's cell (group g, prompt j)
            if k < len(by_prompt[prompts[j]]):
                seq.append(by_prompt[prompts[j]][k])
        groups.append(seq)
    return groups


def assign(items: list[dict], raters_per_item: int = 1, per_sitting: int = 5) -> list[dict]:
    """Packets [{"packet_id", "rater_id", "sitting", "items": [...]}]; with attention checks a
    sitting holds per_sitting - 1 real items plus one check, so the cap always holds."""
    if per_sitting < 1 or raters_per_item < 1:
        raise ValueError("per_sitting and raters_per_item must be >= 1")
    real = [it for it in items if not it.get("attention")]
    checks = [it for it in items if it.get("attention")]
    if not real:
        raise ValueError("no items to assign")
    if checks and per_sitting < 2:
        raise ValueError("attention checks need per_sitting >= 2")
    rng = secrets.SystemRandom()
    size = per_sitting - 1 if checks else per_sitting
    packets = []
    for g, seq in enumerate(_sequences(real)):
        for r in range(raters_per_item):
            rater = f"rater{g * raters_per_item + r + 1:02d}"
            for s, start in enumerate(range(0, len(seq), size)):
                sitting = list(seq[start : start + size])
                if checks:
                    sitting.insert(rng.randrange(len(sitting) + 1), checks[(g + r + s) % len(checks)])
                packets.append(
                    {"packet_id": f"{rater}-s{s + 1}", "rater_id": rater, "sitting": s + 1, "items": sitting}
                )
    return packets
