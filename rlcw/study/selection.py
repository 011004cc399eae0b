"""Which story pairs go to raters.

    pairs = best_worst_pairs(samples, scores)       # per prompt: the RM's best vs worst of n (LitBench 5)
    pairs = system_pairs(stories_a, stories_b)      # same prompts, two systems (e.g. policy vs base)

A pair is {"prompt": str, "first": story record, "second": story record, "kind": str}; records
carry `system` (best/worst pairs relabel it `rm_best` / `rm_worst`, keeping the writer in
`meta.writer`) and optionally `meta.rm_score`.
"""

from __future__ import annotations

from collections import defaultdict

from rlcw.errors import RlcwError


def _by_prompt(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        out[rec["prompt"]].append(rec)
    return out


def _with_score(rec: dict, score: float | None, system: str | None = None) -> dict:
    meta = dict(rec.get("meta") or {})
    if score is not None:
        meta["rm_score"] = float(score)
    if system is not None:
        meta["writer"] = rec["system"]
    return {**rec, "meta": meta, **({"system": system} if system else {})}


def best_worst_pairs(samples: list[dict], scores: list[float]) -> list[dict]:
    """Per prompt, the highest- vs the lowest-scored sample (prompts with one sample are skipped;
    equal best and worst scores keep the first-listed as best)."""
    if len(samples) != len(scores):
        raise ValueError("one score per sample is needed")
    scored = [_with_score(rec, s) for rec, s in zip(samples, scores, strict=False)]
    pairs = []
    for prompt, recs in _by_prompt(scored).items():
        if len(recs) < 2:
            continue
        ranked = sorted(recs, key=lambda r: -r["meta"]["rm_score"])  # stable: ties keep file order
        best, worst = ranked[0], ranked[-1]
        pairs.append(
            {
                "prompt": prompt,
                "kind": "rm_best_worst",
                "first": _with_score(best, None, "rm_best"),
                "second": _with_score(worst, None, "rm_worst"),
            }
        )
    return pairs


def system_pairs(first: list[dict], second: list[dict], where: str = "stories") -> list[dict]:
    """Pairs of the two systems' stories on the prompts both answered (first story per prompt)."""
    a, b = _by_prompt(first), _by_prompt(second)
    shared = [p for p in a if p in b]
    if not shared:
        raise RlcwError(
            "the two story files share no prompt",
            where=where,
            hint="generate both systems on the same prompts (e.g. the same `rlcw generate` data)",
        )
    pairs = []
    for prompt in shared:
        x, y = a[prompt][0], b[prompt][0]
        if x["system"] == y["system"]:
            raise RlcwError(
                f"both stories for a prompt come from system {x['system']!r}",
                where=where,
                hint="compare two different systems (the records' `system` field)",
            )
        pairs.append({"prompt": prompt, "kind": "systems", "first": x, "second": y})
    return pairs


def all_system_pairs(records: list[dict]) -> list[dict]:
    """Every unordered pair of systems per prompt (Agents' Room: M x N(N-1)/2 comparisons)."""
    pairs = []
    for prompt, recs in _by_prompt(records).items():
        seen: dict[str, dict] = {}
        for rec in recs:
            seen.setdefault(rec["system"], rec)
        systems = sorted(seen)
        for i, s in enumerate(systems):
            for t in systems[i + 1 :]:
                pairs.append({"prompt": prompt, "kind": "systems", "first": seen[s], "second": seen[t]})
    return pairs
