"""The quickstart's gates: the held-out verdict, the reward-hacking checks, what the RM pays on the start samples,
the held-out slop change, and the summary keys they fill (`gate`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

from rlcw.io import read_jsonl
from rlcw.metrics.heldout import bound_pass_chance


def score_with_metrics(extra: dict) -> dict[str, float]:
    """summary.json keys of heldout.score_with: heldout/score_with/<name>_{start,final,delta,delta_lo,delta_hi},
    and heldout/score_with/<name>/<criterion>_... for a rubric's criteria (NaN left out)."""
    out = {}

    def put(prefix: str, r: dict) -> None:
        for k, v in (
            ("start", "start"),
            ("final", "tuned"),
            ("delta", "delta"),
            ("delta_lo", "lo"),
            ("delta_hi", "hi"),
        ):
            if math.isfinite(r.get(v, math.nan)):
                out[f"{prefix}_{k}"] = float(r[v])

    for name, r in extra.items():
        put(f"heldout/score_with/{name}", r)
        for crit, rc in r.get("criteria", {}).items():
            put(f"heldout/score_with/{name}/{crit}", rc)
    return out


# rlcw.metrics.ending's names -> the held-out keys (on the start samples, scored as RL scores)
ENDING_NAMES = {
    "ended_minus_cut": "rm_pays_ending",
    "short_minus_inside": "rm_pays_ending_short",
    "per_10_words_ended": "rm_per_10_words_ended",
}


def start_prices(records: list[dict], n_resamples: int) -> dict[str, float]:
    """What the RM pays on the start samples for ending, ending short and words, with intervals over prompts,
    and Pearson(RM score, words)."""
    from rlcw.metrics.ending import ending_prices

    p = ending_prices(records, n_resamples)
    out = {new + end: p[old + end] for old, new in ENDING_NAMES.items() for end in ("", "_lo", "_hi")}
    out["rm_words_pearson_start"] = p["words_pearson"]
    out["rm_words_pearson_start_ended"] = p["words_pearson_ended"]
    return out


SUMMARY_KEYS = (
    "rm_delta",
    "rm_delta_lo",
    "rm_delta_hi",
    "win_rate",
    "win_rate_lo",
    "win_rate_hi",
    "in_range_start",
    "in_range_final",
    "in_range_delta",
    "in_range_delta_lo",
    "in_range_delta_hi",
    "in_range_words_start",
    "in_range_words_final",
    "ended_short_start",
    "ended_short_final",
    "ended_short_delta",
    "ended_short_delta_lo",
    "ended_short_delta_hi",
    "short_rise_minus_in_range_rise",
    "short_rise_minus_in_range_rise_lo",
    "short_rise_minus_in_range_rise_hi",
    "short_of_ended_start",
    "short_of_ended_final",
    "short_of_ended_delta",
    "short_of_ended_delta_lo",
    "short_of_ended_delta_hi",
    "finished_start",
    "finished_final",
    "rm_delta_both_finished",
    "rm_delta_both_cut",
    "rm_delta_from_ending",
    "rm_gap_ended_minus_cut",
    "rm_delta_length_controlled",
    "rm_delta_length_controlled_lo",
    "rm_delta_length_controlled_hi",
    *[k + end for k in ENDING_NAMES.values() for end in ("", "_lo", "_hi")],
    "rm_words_pearson_start",
    "rm_words_pearson_start_ended",
    "words_start",
    "words_final",
    "rep_start",
    "rep_final",
    "rm_delta_prompt_sd",
    "prompts_needed",
    "in_range_prompt_sd",
    "in_range_prompts_needed",
    "n_prompts",
    "n_samples",
)


def ci_text(h: dict, k: str, fmt: str = "+.2f", empty: str = "n/a") -> str:
    """`value [lo, hi]`; `empty` where the value is NaN (e.g. no pair of that kind in the sample)."""
    if math.isnan(h[k]):
        return empty
    lo, hi = h.get(f"{k}_lo"), h.get(f"{k}_hi")
    return f"{h[k]:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if lo is not None else f"{h[k]:{fmt}}"


def verdict_text(h: dict) -> tuple[bool, str]:
    """(the held-out gate passed, what was and was not shown, in plain words). Passing needs both lower
    bounds above 0 AND no evidence that the gain is made of one-liners: the rise in the share of stories
    that end below the range may not exceed the rise in the share that ends inside it with 95% confidence
    (`short_rise_minus_in_range_rise_lo` <= 0, the same prompt bootstrap). A comparison of the two point
    estimates alone flipped on one story in 128 (calibration: +0.125 against +0.117)."""
    rm_ok, range_ok = h["rm_delta_lo"] > 0, h["in_range_delta_lo"] > 0
    short_rise = h.get("ended_short_final", 0.0) - h.get("ended_short_start", 0.0)
    excess_lo = h.get("short_rise_minus_in_range_rise_lo", short_rise - h["in_range_delta"])
    short_ok = not excess_lo > 0
    rm = (
        f"the RM score rose on held-out prompts ({h['rm_delta']:+.2f}, 95% CI [{h['rm_delta_lo']:+.2f}, "
        f"{h['rm_delta_hi']:+.2f}])"
    )
    rng = (
        f"the share of stories that end inside the prompt's word range went {h['in_range_start']:.2f} -> "
        f"{h['in_range_final']:.2f} (change CI [{h['in_range_delta_lo']:+.2f}, {h['in_range_delta_hi']:+.2f}])"
    )
    short = (
        f"the share that ends below the range went {h.get('ended_short_start', math.nan):.2f} -> "
        f"{h.get('ended_short_final', math.nan):.2f} ({short_rise:+.2f}, against {h['in_range_delta']:+.2f} inside it; "
        f"difference {ci_text({'d': short_rise - h['in_range_delta'], **h}, 'short_rise_minus_in_range_rise' if 'short_rise_minus_in_range_rise' in h else 'd')})"
    )
    if rm_ok and range_ok and short_ok:
        return True, f"Shown: {rm}, and {rng}; {short}."
    ci = f"{h['rm_delta']:+.2f}, 95% CI [{h['rm_delta_lo']:+.2f}, {h['rm_delta_hi']:+.2f}]"
    parts = [f"Shown: {rm}." if rm_ok else f"Not shown: that the RM score rose (held-out change {ci}, not above 0)."]
    parts.append(f"Shown: {rng}." if range_ok else f"Not shown: that stories got closer to the asked length; {rng}.")
    if not short_ok:
        parts.append(f"Not shown: that the gain is not made of stories that end too short; {short}, above 0.")
    if (
        rm_ok
        and not math.isnan(h["rm_delta_from_ending"])
        and abs(h["rm_delta_from_ending"]) >= 0.5 * abs(h["rm_delta"])
    ):
        parts.append(
            f"At least half of the RM change ({h['rm_delta_from_ending']:+.2f} of {h['rm_delta']:+.2f}) is explained by "
            "stories ending before the cap more often, not by better stories of the same kind."
        )
    return False, " ".join(parts)


class Check(NamedTuple):
    """One of the report's checks: `passed` decides the run's status; `met` is set on a reward-hacking check that
    does not gate (`gates.hacking` false): whether its bound was met, which the report says instead of PASS, so a
    bound that was missed never reads as a pass."""

    name: str
    passed: bool
    detail: str  # what was measured
    met: bool | None = None

    @property
    def label(self) -> str:
        """PASS or FAIL; MET or NOT MET for a check that does not gate."""
        if self.met is not None:
            return "MET" if self.met else "NOT MET"
        return "PASS" if self.passed else "FAIL"


def hacking_checks(g, h: dict, slop: dict, rm: str) -> list[Check]:
    """The reward-hacking checks: ending too short and slop may not rise beyond the gates' bounds at 95% (upper
    bounds over prompts); `rm` says what the reward model is (a defence that changes it is compared with the plain
    BT RM elsewhere: the outcome study's defences section)."""
    off = "" if g.hacking else " (reported, not gating: gates.hacking=false)"
    hi, lo = h.get("ended_short_delta_hi", math.nan), h.get("ended_short_delta_lo", math.nan)
    short = (
        f"{h.get('ended_short_start', math.nan):.2f} -> {h.get('ended_short_final', math.nan):.2f}, change "
        f"{h.get('ended_short_delta', math.nan):+.2f} [{lo:+.2f}, {hi:+.2f}] (upper bound needs <= {g.max_short_rise:+.2f})"
    )
    if hi > lo:  # what the check can tell at this design: the interval's width read as a normal one's
        chance = bound_pass_chance(0.0, (hi - lo) / (2 * 1.96), g.max_short_rise)
        short += (
            f"; at this interval's width a share that did not change would meet the bound {chance:.0%} of the time"
        )
    slop_text = (
        f"{slop['slop_start']:.1f} -> {slop['slop_final']:.1f} points, change {slop['slop_delta']:+.1f} "
        f"[{slop['slop_delta_lo']:+.1f}, {slop['slop_delta_hi']:+.1f}] (upper bound needs <= {g.max_slop_rise:+.1f})"
    )
    short_ok, slop_ok = bounds_met(g, h, slop)

    def check(name: str, met: bool, detail: str) -> Check:
        return Check(name + off, met or not g.hacking, detail, None if g.hacking else met)

    return [
        check("no rise in stories ending too short (reward hacking, 95%)", short_ok, short),
        check("no rise in slop (reward hacking, 95%)", slop_ok, f"{slop_text}; reward model: {rm}"),
    ]


def bounds_met(g, h: dict, slop: dict) -> tuple[bool, bool]:
    """Whether the reward-hacking bounds were met, gating or not: (ending too short, slop), each 95% upper bound
    against the gates' limit; NaN (no word ranges) is not met: nothing was shown."""
    return h.get("ended_short_delta_hi", math.nan) <= g.max_short_rise, slop["slop_delta_hi"] <= g.max_slop_rise


def rm_kind(ensemble_size: int, length_head: bool) -> str:
    """What the quickstart's reward model is, in words (train-rm's `rm.ensemble.size` and `rm.length_head`)."""
    if ensemble_size > 1:
        return f"an ensemble of {ensemble_size} BT members"
    return "a two-head (ODIN) BT RM" if length_head else "the plain BT RM (no accuracy cost to compare)"


def gate(gates, results: dict, slop: dict, rm: str) -> tuple[dict, list[Check], str]:
    """(summary metrics, every check, the held-out verdict) from the stages' results; `gates` is the quickstart's
    `gates` section, `rm` what the reward model is (`rm_kind`)."""
    rm_metrics = results["train_rm"]["metrics"]
    steps = int(results["grpo"]["metrics"].get("train/steps", 0))
    acc = rm_metrics.get("eval/accuracy", 0.0)
    h = results["heldout"]
    metrics = {
        "rm/accuracy": acc,
        "rm/length_baseline_accuracy": rm_metrics.get("eval/length_baseline_accuracy"),
        "grpo/steps": float(steps),
        "export/max_logit_diff": results["export"]["metrics"]["max_logit_diff"],
        **{f"grpo/{k}": v for k, v in results["grpo"]["metrics"].items() if k.startswith(("eval/", "probe/"))},
        **{f"heldout/{k}": float(h[k]) for k in SUMMARY_KEYS if k in h},
    }
    metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
    grpo_error = results["grpo"].get("error")
    ok, verdict = verdict_text(h)
    checks = [
        Check(
            "RM held-out accuracy on length-matched pairs",
            acc >= gates.min_rm_accuracy,
            f"{acc:.3f} (needs >= {gates.min_rm_accuracy})",
        ),
        Check("GRPO steps", steps >= gates.min_grpo_steps, f"{steps} (needs >= {gates.min_grpo_steps})"),
        Check(
            "GRPO reward-hacking monitors in range",
            not grpo_error,
            grpo_error or f"{int(results['grpo']['metrics'].get('monitor/alerts', 0))} warning(s), no stop",
        ),
        Check(
            "held-out gain: RM change and in-range change, both 95% lower bounds > 0, ending too short not rising more"
            " (95%)" + ("" if gates.heldout else " (gate off: gates.heldout=false)"),
            ok or not gates.heldout,
            verdict,
        ),
    ]
    hacking = hacking_checks(gates, h, slop, rm)
    metrics["gate/heldout"] = float(checks[-1].passed)  # the held-out gain check alone
    metrics["gate/hacking"] = float(all(bounds_met(gates, h, slop)))  # both reward-hacking bounds met, gating or not
    return metrics, [*checks, *hacking], verdict


def held_out_slop(root: Path, n_resamples: int) -> dict:
    """Slop of the held-out samples against the bundled human stories (rlcw.metrics.slop.slop_change): start vs
    tuned with a CI over prompts, and each model's most over-represented phrases."""
    from rlcw.metrics.slop import SlopBaseline, slop_change
    from rlcw.rewards.slop import load_human_texts

    start, tuned = read_jsonl(root / "heldout" / "start.jsonl"), read_jsonl(root / "heldout" / "tuned.jsonl")
    return slop_change(
        SlopBaseline(load_human_texts("bundled")),
        [r["story"] for r in start],
        [r["story"] for r in tuned],
        [r["prompt_id"] for r in start],
        n_resamples=n_resamples,
    )
