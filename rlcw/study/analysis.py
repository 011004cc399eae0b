"""What unblinded human judgements say: win rates, Bradley-Terry strengths, Fleiss' kappa, and
agreement with the reward model and with LLM judges.

    summary = analyse(judgements, judge_verdicts={"gpt": rows}, n_bootstrap=200, seed=0)

Definitions:
- outcome of a judgement for (system of A, system of B): A -> 1, B -> 0, same -> 0.5.
- win rate of a system: its mean outcome over the judgements it appears in (ties = half), with
  a percentile bootstrap CI over those judgements.
- Fleiss' kappa per dimension over items that the most common number (>= 2) of raters rated.
- RM agreement: among judgements with an RM score on both sides and a human preference (not
  "same"), the share where the human preferred the higher-scored story (an RM tie = half);
  `rm_preferred_rate` counts human "same" as half (LitBench's "selected the RM-preferred story").
- Judge agreement: judge verdict rows are matched to judgements by prompt (text, or a prompt_id
  equal to a story record id in the key) and the two systems;
  agreement is as for the RM (judge tie = half); `item_level` is Agents' Room's by-items Spearman
  of the human and judge verdicts coded +1 / 0 / -1 for the first-named system.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from rlcw.metrics.agreement import correlation, fleiss_kappa
from rlcw.metrics.bootstrap import bootstrap_ci
from rlcw.metrics.bradley_terry import bt_strengths
from rlcw.study import DIMENSIONS

OUTCOME = {"A": 1.0, "B": 0.0, "same": 0.5}


def comparisons(judgements: list[dict], dim: str = "overall") -> list[tuple[str, str, float]]:
    return [(j["A"]["system"], j["B"]["system"], OUTCOME[j["labels"][dim]]) for j in judgements]


def win_rates(comps: list[tuple[str, str, float]], n_bootstrap: int = 200, alpha: float = 0.05, seed: int = 0) -> dict:
    per: dict[str, list[float]] = defaultdict(list)
    for a, b, o in comps:
        per[a].append(o)
        per[b].append(1.0 - o)
    out = {}
    for system in sorted(per):
        lo, hi = bootstrap_ci(per[system], n_resamples=max(n_bootstrap, 1), alpha=alpha, seed=seed)
        out[system] = {"win_rate": float(np.mean(per[system])), "ci_low": lo, "ci_high": hi, "n": len(per[system])}
    return out


def kappa(judgements: list[dict], dim: str) -> dict:
    by_item: dict[str, list[str]] = defaultdict(list)
    for j in judgements:
        by_item[j["item_id"]].append(j["labels"][dim])
    counts = Counter(len(v) for v in by_item.values() if len(v) >= 2)
    if not counts:
        return {"kappa": None, "items": 0, "raters_per_item": None}
    k = max(counts, key=lambda c: (counts[c], c))
    rows = [v for v in by_item.values() if len(v) == k]
    return {"kappa": fleiss_kappa(rows), "items": len(rows), "raters_per_item": k}


def _agreement(pairs: list[tuple[float, float]]) -> dict:
    """pairs of (human outcome, other's outcome) for the same first-named story."""
    decided = [(h, o) for h, o in pairs if h != 0.5]
    credit = [0.5 if o == 0.5 else float((h > 0.5) == (o > 0.5)) for h, o in decided]
    return {
        "agreement": float(np.mean(credit)) if credit else None,
        "n": len(decided),
        "item_level": correlation([2 * h - 1 for h, _ in pairs], [2 * o - 1 for _, o in pairs]) if pairs else None,
    }


def rm_agreement(judgements: list[dict], dim: str = "overall") -> dict:
    pairs = []
    for j in judgements:
        a, b = j["A"].get("rm_score"), j["B"].get("rm_score")
        if a is not None and b is not None:
            pairs.append((OUTCOME[j["labels"][dim]], 1.0 if a > b else 0.0 if a < b else 0.5))
    out = _agreement(pairs)
    out["rm_preferred_rate"] = (
        float(np.mean([h if o == 1.0 else 1 - h for h, o in pairs if o != 0.5])) if pairs else None
    )
    return out


def _verdict_index(rows: list[dict], prompt_of_id: dict[str, str]) -> dict[tuple, float]:
    """(prompt, system_x, system_y, dimension) -> outcome for system_x; both orders stored. Rows
    that name a prompt_id are resolved through the story record ids of the study's key."""
    index = {}
    for r in rows:
        prompt = r.get("prompt") or prompt_of_id.get(str(r.get("prompt_id")))
        if prompt is None:
            continue
        index[(prompt, r["system_a"], r["system_b"], r["dimension"])] = r["outcome"]
        index[(prompt, r["system_b"], r["system_a"], r["dimension"])] = 1.0 - r["outcome"]
    return index


def judge_agreement(judgements: list[dict], verdicts: list[dict], dim: str = "overall") -> dict:
    ids = {str(j[s]["record_id"]): j["prompt"] for j in judgements for s in "AB" if j[s].get("record_id") is not None}
    index = _verdict_index(verdicts, ids)
    pairs = []
    for j in judgements:
        other = index.get((j["prompt"], j["A"]["system"], j["B"]["system"], dim))
        if other is not None:
            pairs.append((OUTCOME[j["labels"][dim]], other))
    return _agreement(pairs)


def analyse(
    judgements: list[dict],
    judge_verdicts: dict[str, list[dict]] | None = None,
    n_bootstrap: int = 200,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict:
    out: dict = {"dimensions": {}}
    for dim in DIMENSIONS:
        comps = comparisons(judgements, dim)
        out["dimensions"][dim] = {
            "win_rates": win_rates(comps, n_bootstrap, alpha, seed),
            "bradley_terry": bt_strengths(comps, n_bootstrap=n_bootstrap, alpha=alpha, seed=seed) if comps else {},
            "fleiss": kappa(judgements, dim),
            "labels": dict(Counter(j["labels"][dim] for j in judgements)),
        }
    out["rm"] = rm_agreement(judgements)
    out["judges"] = {name: judge_agreement(judgements, rows) for name, rows in (judge_verdicts or {}).items()}
    return out
