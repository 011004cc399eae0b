"""Pure analysis of outcome-study measurements: paired deltas with CIs, final rows, the verdicts.

    deltas = paired_delta(final_stories, start_stories, "gold")   # {"delta", "ci_low", "ci_high", "n"}
    lines = conclusions(finals, start)                             # sentences for the report

The rules are stated in `conclusions` and printed with the report, so a reader can check them.
"""

from __future__ import annotations

import math

from rlcw.metrics.bootstrap import bootstrap_ci

LENGTH_SHIFT = 0.25  # |words / words at start - 1| above this: the run changed story length a lot
IN_RANGE_DROP = 0.2  # share of stories inside the prompt's range fell by more than this
REPETITION_RISE = 2.0  # within-story trigram repetition at least doubled ...
REPETITION_FLOOR = 0.05  # ... and is above this
DIVERSITY_DROP = 0.15  # distinct-3 across stories fell by more than this


def paired_delta(stories: list[dict], start: list[dict], key: str, seed: int = 0) -> dict[str, float]:
    """Mean of (score - start score) over stories paired by id, with a bootstrap 95% CI."""
    base = {s["id"]: s["meta"][key] for s in start}
    diffs = [s["meta"][key] - base[s["id"]] for s in stories if s["id"] in base]
    if not diffs:
        return {"delta": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0.0}
    low, high = bootstrap_ci(diffs, seed=seed)
    return {"delta": sum(diffs) / len(diffs), "ci_low": low, "ci_high": high, "n": float(len(diffs))}


def final_rows(rows: list[dict]) -> dict[str, dict]:
    """The last measured row of each run (best-of-n: the largest n)."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["step"] > 0 and (r["run"] not in out or r["step"] > out[r["run"]]["step"]):
            out[r["run"]] = r
    return out


def _ci_text(low: float, high: float) -> str:
    return f"[{low:+.3f}, {high:+.3f}]"


def run_verdict(name: str, final: dict, start: dict, peak_gold: dict | None) -> list[str]:
    """Sentences about one run: reward effect, over-optimisation, length, repetition, diversity, judge."""
    out = []
    dp, dg = final.get("delta/proxy", {}), final.get("delta/gold", {})
    proxy_up = dp.get("ci_low", math.nan) > 0
    gold_down, gold_up = dg.get("ci_high", math.nan) < 0, dg.get("ci_low", math.nan) > 0
    proxy_txt = (
        f"proxy {dp.get('delta', math.nan):+.3f} {_ci_text(dp.get('ci_low', math.nan), dp.get('ci_high', math.nan))}"
    )
    gold_txt = (
        f"gold {dg.get('delta', math.nan):+.3f} {_ci_text(dg.get('ci_low', math.nan), dg.get('ci_high', math.nan))}"
    )
    if proxy_up and gold_down:
        out.append(
            f"**{name}: over-optimised.** The proxy rose ({proxy_txt}) while the gold reward fell ({gold_txt})."
        )
    elif proxy_up and gold_up:
        out.append(f"**{name}: better on both.** {proxy_txt}; {gold_txt}.")
    elif proxy_up:
        out.append(f"**{name}: a higher reward, no measurable gold effect.** {proxy_txt}; {gold_txt} (CI spans 0).")
    else:
        out.append(f"**{name}: no clear proxy gain.** {proxy_txt}; {gold_txt}.")
    fall = final.get("delta/gold_from_peak", {})
    if (
        peak_gold
        and peak_gold["step"] != final["step"]
        and fall.get("ci_high", math.nan) < 0
        and final["proxy"] > peak_gold["proxy"]
    ):
        x = "n" if name == "best_of_n" else "step"
        out.append(
            f"Gold peaked at {x} {peak_gold['step']} ({peak_gold['gold']:.3f}) and fell to {final['gold']:.3f} "
            f"({fall['delta']:+.3f} [{fall['ci_low']:+.3f}, {fall['ci_high']:+.3f}]) while the proxy kept rising "
            f"({peak_gold['proxy']:.3f} -> {final['proxy']:.3f}): the Gao et al. over-optimisation pattern."
        )
    shift = final["words"] / start["words"] - 1 if start.get("words") else math.nan
    if abs(shift) > LENGTH_SHIFT:
        out.append(
            f"Length hacking: stories went from {start['words']:.0f} to {final['words']:.0f} words ({100 * shift:+.0f}%)."
        )
    if "in_range" in final and "in_range" in start and start["in_range"] - final["in_range"] > IN_RANGE_DROP:
        out.append(
            f"Fewer stories inside the prompt's word range: {start['in_range']:.2f} -> {final['in_range']:.2f}."
        )
    if final["rep_intra_3"] > max(REPETITION_RISE * start["rep_intra_3"], REPETITION_FLOOR):
        out.append(f"Repetition within stories rose: {start['rep_intra_3']:.3f} -> {final['rep_intra_3']:.3f}.")
    if start["distinct_3"] - final["distinct_3"] > DIVERSITY_DROP:
        out.append(
            f"Diversity across stories fell: distinct-3 {start['distinct_3']:.3f} -> {final['distinct_3']:.3f}."
        )
    if "judge/win_rate" in final:
        w, lo, hi = final["judge/win_rate"], final.get("judge/ci_low", math.nan), final.get("judge/ci_high", math.nan)
        inv = final.get("judge/invalid_share", math.nan)
        if math.isnan(w):
            out.append(f"The judge gave no valid verdict (invalid share {inv:.2f}): no judged evidence.")
        elif lo <= 0.5 <= hi or math.isnan(lo):
            out.append(
                f"Judged win rate vs the start {w:.2f} [{lo:.2f}, {hi:.2f}] (invalid {inv:.0%}): not distinguishable from chance."
            )
        else:
            side = "better" if lo > 0.5 else "worse"
            out.append(
                f"Judged win rate vs the start {w:.2f} [{lo:.2f}, {hi:.2f}] (invalid {inv:.0%}): the judge finds it {side}."
            )
    return out


def controls_verdict(finals: dict[str, dict], start: dict) -> list[str]:
    """Did the length controls help? (grpo_lc against grpo on gold, length and range.)"""
    if "grpo" not in finals or "grpo_lc" not in finals:
        return []
    a, b = finals["grpo"], finals["grpo_lc"]
    ga, gb = a.get("delta/gold", {}).get("delta", math.nan), b.get("delta/gold", {}).get("delta", math.nan)
    lines = [
        f"Length controls (grpo_lc vs grpo): gold change {gb:+.3f} vs {ga:+.3f}; words {b['words']:.0f} vs {a['words']:.0f} "
        f"(start {start['words']:.0f})"
        + (f"; in range {b['in_range']:.2f} vs {a['in_range']:.2f}" if "in_range" in a and "in_range" in b else "")
        + "."
    ]
    keeps_length = abs(b["words"] / start["words"] - 1) < abs(a["words"] / start["words"] - 1)
    lines.append(
        "The controls kept length closer to the start."
        if keeps_length
        else "The controls did not keep length closer to the start."
    )
    return lines
