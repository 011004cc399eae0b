"""A scorer on held-out preference pairs: the measurements train-rm logs and eval-rm reports.

train-rm: `evaluate_rm` (a BT RM's accuracy per head, margin, reward mean/std), `evaluate_genrm` (the
two-order rule of `rlcw.metrics.pairwise.two_order_metrics`) and `dead_rm` (why rewards cannot rank).
eval-rm: one block per kind of scorer, each returning (metrics, one row per pair): `eval_pointwise`
(bt: every head, the length-controlled scores, an ensemble's members), `eval_pairwise` (genrm, judge: both
orders of every pair), `eval_rubric` (both sides of every pair x every criterion in one judge call), and
`eval_ending` (what the RM pays for ending, `rlcw.metrics.ending`). Metric names are the reports' keys.
"""

from __future__ import annotations

import math

import torch

from rlcw.errors import RlcwError, location
from rlcw.io import read_table
from rlcw.metrics import pairwise as pw
from rlcw.metrics.ending import ending_prices
from rlcw.metrics.text import count_words
from rlcw.rm.aggregate import agreement
from rlcw.rm.scoring import EnsembleScorer, RMScorer

# --- train-rm's held-out rows ---


def evaluate_rm(scorer: RMScorer, pairs: list[dict]) -> dict[str, float]:
    """Held-out accuracy of the scorer's head (a two-head RM: quality), and of every head as `eval/<head>/accuracy`."""
    prompts, stories = [p["prompt"] for p in pairs], {k: [p[k] for p in pairs] for k in ("chosen", "rejected")}
    heads = {k: scorer.score_heads(prompts, v) for k, v in stories.items()}  # one pass scores every head
    chosen, rejected = (heads[k]["score" if len(scorer.heads) == 1 else scorer.head] for k in ("chosen", "rejected"))
    out = {
        "eval/accuracy": pw.pairwise_accuracy(chosen, rejected),
        "eval/length_baseline_accuracy": pw.length_baseline_accuracy(pairs),
        "eval/mean_margin": sum(c - r for c, r in zip(chosen, rejected, strict=False)) / len(pairs),
        "eval/reward_mean": float(torch.tensor([*chosen, *rejected], dtype=torch.float64).mean()),
        "eval/reward_std": float(torch.tensor([*chosen, *rejected], dtype=torch.float64).std(correction=0)),
        "eval/pairs": float(len(pairs)),
    }
    if len(scorer.heads) > 1:
        out.update(
            {
                f"eval/{h}/accuracy": pw.pairwise_accuracy(heads["chosen"][h], heads["rejected"][h])
                for h in heads["chosen"]
            }
        )
    return out


def evaluate_genrm(scorer, pairs: list[dict], prefix: str = "eval") -> dict[str, float]:
    """Held-out metrics under the two-order rule (`rlcw.metrics.pairwise.two_order_metrics`, as eval-rm):
    accuracy over the pairs with a verdict in both orders; no_verdict counts the missing verdicts."""
    prompts, chosen, rejected = (
        [p["prompt"] for p in pairs],
        [p["chosen"] for p in pairs],
        [p["rejected"] for p in pairs],
    )
    m = pw.two_order_metrics(
        scorer.prefer_ordered(prompts, chosen, rejected), scorer.prefer_ordered(prompts, rejected, chosen)
    )
    nan = float("nan")  # undefined (no pair with both verdicts)
    return {
        f"{prefix}/accuracy": nan if m["accuracy"] is None else m["accuracy"],
        f"{prefix}/order_consistency": nan if m["order_consistency"] is None else m["order_consistency"],
        f"{prefix}/first_position_rate": nan if m["first_position_rate"] is None else m["first_position_rate"],
        f"{prefix}/no_verdict": m["invalid_chosen_first"] + m["invalid_rejected_first"],
        f"{prefix}/pairs_scored": m["pairs_scored"],
        f"{prefix}/length_baseline_accuracy": pw.length_baseline_accuracy(pairs),
        f"{prefix}/pairs": float(len(pairs)),
    }


def dead_rm(metrics: dict[str, float]) -> str | None:
    """Why a BT RM's held-out rewards (`evaluate_rm`) cannot rank anything: not finite, or one value for every story
    (its accuracy is then a tie-break, not a measurement); None when they vary or were not measured."""
    mean, std = metrics.get("eval/reward_mean"), metrics.get("eval/reward_std")
    if mean is None or std is None:
        return None
    if not (math.isfinite(mean) and math.isfinite(std)):
        return f"its held-out rewards are not finite (mean {mean}, std {std})"
    if std <= 1e-6 * max(1.0, abs(mean)):
        return f"every held-out story gets the same reward ({mean:.4g})"
    return None


# --- eval-rm's blocks ---


def scored_heads(scorer, prompts: list[str], stories: list[str]) -> dict[str, list[float]]:
    """Raw scores in one pass: "" = the scorer's head, and with several heads `head/<name>/` for each."""
    return scored_with_members(scorer, prompts, stories)[0]


def scored_with_members(scorer, prompts: list[str], stories: list[str]) -> tuple[dict[str, list[float]], list | None]:
    """`scored_heads` and, for an ensemble, the (k, n) member scores of the same pass (else None)."""
    if isinstance(scorer, EnsembleScorer):
        scores, members = scorer.score_with_members(prompts, stories, raw=True)
        return {"": scores}, members
    heads = scorer.score_heads(prompts, stories)
    if len(heads) == 1:
        return {"": heads["score"]}, None
    return {"": heads[scorer.head]} | {f"head/{h}/": v for h, v in heads.items()}, None


def eval_pointwise(
    scorer, pairs, cw, rw, split, *, resamples: int, seed: int, length_control: bool = True
) -> tuple[dict, list[dict]]:
    """A pointwise (bt) scorer: accuracy, its CI and length splits, score-length correlations and the mean
    margin, for the scorer's head, its length-controlled scores (`length_control` and a fit) and every head;
    an ensemble's members beside them."""
    prompts = [p["prompt"] for p in pairs]
    c_heads, members_c = scored_with_members(scorer, prompts, [p["chosen"] for p in pairs])
    r_heads, members_r = scored_with_members(scorer, prompts, [p["rejected"] for p in pairs])
    chosen, rejected = c_heads.pop(""), r_heads.pop("")
    versions = {"": (chosen, rejected)}
    fit = getattr(scorer, "length_fit", None) if length_control else None
    if fit is not None:
        versions["length_controlled/"] = (fit.residuals(chosen, cw), fit.residuals(rejected, rw))
    versions.update({h: (c_heads[h], r_heads[h]) for h in c_heads})  # every head and their sum, a column each
    metrics: dict = {}
    for prefix, (c, r) in versions.items():
        metrics.update(pw.accuracy_block(pw.pair_outcomes(c, r), split, prefix, resamples, seed))
        corr = pw.length_correlation(c + r, [float(w) for w in cw + rw])
        metrics[f"{prefix}score_length_pearson"], metrics[f"{prefix}score_length_spearman"] = (
            corr["pearson"],
            corr["spearman"],
        )
        metrics[f"{prefix}mean_margin"] = pw.mean_of([a - b for a, b in zip(c, r, strict=False)])
    if members_c is not None:
        metrics.update(ensemble_block(members_c, members_r))
    rows = [{"chosen_score": c, "rejected_score": r} for c, r in zip(chosen, rejected, strict=False)]
    if fit is not None:
        for row, c, r in zip(rows, *versions["length_controlled/"], strict=False):
            row.update(chosen_score_lc=c, rejected_score_lc=r)
    return metrics, rows


def ensemble_block(chosen: list[list[float]], rejected: list[list[float]]) -> dict:
    """An RM ensemble's members: each one's accuracy and how often they all agree (`rlcw.rm.aggregate`)."""
    out = {
        f"ensemble/member_{j}/accuracy": pw.pairwise_accuracy(c, r)
        for j, (c, r) in enumerate(zip(chosen, rejected, strict=True))
    }
    out["ensemble/member_agreement"] = agreement(chosen, rejected)
    out["ensemble/members"] = float(len(chosen))
    return out


def eval_pairwise(scorer, pairs, cw, rw, split, *, resamples: int, seed: int) -> tuple[dict, list[dict]]:
    """A pairwise scorer (genrm, judge), each pair asked in both orders: accuracy under the two-order rule, its
    CI and length splits, order consistency, first-position rate, invalid verdicts."""
    prompts, chosen, rejected = (
        [p["prompt"] for p in pairs],
        [p["chosen"] for p in pairs],
        [p["rejected"] for p in pairs],
    )
    fwd = scorer.prefer_ordered(prompts, chosen, rejected)  # P(chosen better), chosen shown first
    bwd = scorer.prefer_ordered(prompts, rejected, chosen)  # P(rejected better), rejected shown first
    avg = pw.averaged_preference(fwd, bwd)  # the two-order rule: None unless both orders gave a verdict
    valid = [i for i, p in enumerate(avg) if p is not None]
    if not valid:
        raise RlcwError(
            "the scorer gave no valid verdict in both orders for any pair", hint="check the judge/GenRM output format"
        )
    pos = {i: j for j, i in enumerate(valid)}
    sub = {k: [pos[i] for i in idx if i in pos] for k, idx in split.items()}
    metrics = pw.accuracy_block(pw.prob_outcomes([avg[i] for i in valid]), sub, "", resamples, seed)
    both = pw.two_order_metrics(fwd, bwd)  # the same accuracy train-rm reports (accuracy_block adds the CI)
    metrics.update({k: v for k, v in both.items() if k != "accuracy"})
    metrics["p_chosen_length_diff_spearman"] = pw.length_correlation(
        [avg[i] for i in valid], [float(cw[i] - rw[i]) for i in valid]
    )["spearman"]
    rows = [
        {"p_chosen_first": f, "p_rejected_first": b, "p_chosen": a} for f, b, a in zip(fwd, bwd, avg, strict=False)
    ]
    return metrics, rows


def eval_rubric(scorer, pairs, cw, rw, split, *, resamples: int, seed: int) -> tuple[dict, list[dict]]:
    """A rubric on pairs: one judge call for both sides; ties, per-criterion accuracy, invalid verdicts."""
    n = len(pairs)
    prompts = [p["prompt"] for p in pairs] * 2
    scores = scorer.score(prompts, [p["chosen"] for p in pairs] + [p["rejected"] for p in pairs])
    values, names = scorer.last_values, [c.name for c in scorer.criteria]
    chosen, rejected = scores[:n], scores[n:]
    valid = [i for i in range(n) if math.isfinite(chosen[i]) and math.isfinite(rejected[i])]
    if not valid:
        raise RlcwError(
            "the rubric judge gave no valid verdict for both sides of any pair",
            where="scorer.rubric",
            hint="check the judge's replies (verdict=text), or use scorer.rubric.verdict=logprobs",
        )
    pos = {i: j for j, i in enumerate(valid)}
    sub = {k: [pos[i] for i in idx if i in pos] for k, idx in split.items()}
    c, r = [chosen[i] for i in valid], [rejected[i] for i in valid]
    metrics = pw.accuracy_block(pw.pair_outcomes(c, r), sub, "", resamples, seed)
    metrics.update(pw.tie_block(c, r, ""))
    cells = [v for row in values for v in row]
    metrics.update(
        {
            "pairs_scored": float(len(valid)),
            "pairs_tied": float(sum(a == b for a, b in zip(c, r, strict=True))),
            "pairs_no_verdict": float(n - len(valid)),
            "invalid_verdicts": float(sum(v is None for v in cells)),
            "invalid_verdict_share": sum(v is None for v in cells) / len(cells),
            "mean_margin": pw.mean_of([a - b for a, b in zip(c, r, strict=True)]),
            "judge/calls": float(scorer.client.stats["calls"]),  # uncached: scorer.rubric.client.cache_dir reuses
            "judge/cache_hits": float(scorer.client.stats["cache_hits"]),
        }
    )
    corr = pw.length_correlation(c + r, [float(cw[i]) for i in valid] + [float(rw[i]) for i in valid])
    metrics["score_length_pearson"], metrics["score_length_spearman"] = corr["pearson"], corr["spearman"]
    metrics.update(pw.criterion_accuracy(values, names, n))

    def finite(v: float) -> float | None:
        return v if math.isfinite(v) else None

    rows = [
        {
            "chosen_score": finite(chosen[i]),
            "rejected_score": finite(rejected[i]),
            "chosen_rubric": dict(zip(names, values[i], strict=True)),
            "rejected_rubric": dict(zip(names, values[n + i], strict=True)),
        }
        for i in range(n)
    ]
    return metrics, rows


def load_samples(path: str) -> list[dict]:
    """Policy samples for the ending prices; a row without its fields is an error naming the row and key."""
    rows = []
    for line, row in read_table(path):
        for key, kind in (("story", str), ("finished", bool)):
            if not isinstance(row.get(key), kind):
                raise RlcwError(
                    f"ending samples need a {kind.__name__} '{key}' in every row, got {row.get(key)!r}",
                    where=location(path, line, key),
                    hint="give scored policy samples, e.g. a quickstart's heldout/start.jsonl",
                )
        rows.append({**row, "prompt": str(row.get("prompt") or ""), "prompt_index": row.get("prompt_id", line)})
    if not rows:
        raise RlcwError("no samples", where=path, hint="give scored policy samples, e.g. heldout/start.jsonl")
    return rows


def eval_ending(scorer, samples: str, n_resamples: int, seed: int) -> dict:
    """What the RM pays for ending, ending short and words (`rlcw.metrics.ending`), per head (raw scores)."""
    rows = load_samples(samples)
    prompts, stories = [r["prompt"] for r in rows], [r["story"] for r in rows]
    out = {"ending/samples": float(len(rows))}
    for prefix, scores in scored_heads(scorer, prompts, stories).items():
        recs = [{**r, "score": s, "words": count_words(r["story"])} for r, s in zip(rows, scores, strict=True)]
        prices = ending_prices(recs, n_resamples, seed)
        out.update({f"{prefix}ending/{k}": v for k, v in prices.items()})
    return out
