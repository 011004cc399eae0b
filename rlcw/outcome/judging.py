"""Judged win rate against the start model for the outcome study (Agents' Room side by side).

Each selected measurement row (a run's checkpoint, or a best-of-n size) has its held-out stories
judged against the start model's stories for the same prompts (first sample per prompt, up to
`max_items` prompts), in both orders, through the `judge` evaluator (rlcw.judges.evaluator).
Invalid verdicts are counted and excluded; the win rate gets a bootstrap CI over valid verdicts.

    judge_against_start(rows, start_stories, Path("runs/outcome/measure"), protocol="agents_room",
                        template="agents_room_brief", max_items=6, client={"kind": "local", ...},
                        every_checkpoint=False, cache_dir=Path("runs/outcome/judge_cache"))
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlcw.io import read_table
from rlcw.judges.aggregate import oriented
from rlcw.judges.evaluator import make_judge_evaluator
from rlcw.judges.protocols import pair_outcomes
from rlcw.metrics.bootstrap import bootstrap_ci


def rows_to_judge(rows: list[dict], every_checkpoint: bool) -> list[dict]:
    """Every row with step > 0 when `every_checkpoint`, else each run's first and last (best-of-n: smallest n > 1 and largest)."""
    by_run: dict[str, list[dict]] = {}
    for r in rows:
        if r["step"] > (1 if r["run"] == "best_of_n" else 0):
            by_run.setdefault(r["run"], []).append(r)
    out = []
    for run_rows in by_run.values():
        run_rows = sorted(run_rows, key=lambda r: r["step"])
        out += run_rows if every_checkpoint else [run_rows[0]] + ([run_rows[-1]] if len(run_rows) > 1 else [])
    return out


def first_samples(stories: list[dict], limit: int | None) -> list[dict]:
    """One story per prompt (the `#0` sample of the study's repeated prompts), the first `limit` prompts."""
    firsts = [s for s in stories if not str(s["id"]).rsplit("#", 1)[-1].isdigit() or str(s["id"]).endswith("#0")]
    return firsts[: limit or None]


def win_rate_ci(verdict_file: Path, dimension: str, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95% CI of the candidate's win rate over the valid verdicts in a judge_<system>.jsonl file."""
    verdicts = [row for _, row in read_table(str(verdict_file))]
    ys, _ = oriented(pair_outcomes(verdicts, dimension), "candidate")
    if not ys:
        return float("nan"), float("nan")
    return bootstrap_ci(ys, seed=seed)


def stories_of(row: dict, measure_dir: Path) -> list[dict]:
    from rlcw.data.records import read_stories

    if row.get("stories_file"):
        return read_stories(row["stories_file"])
    return read_stories(measure_dir / row["run"] / f"step_{row['step']:06d}.jsonl")


def judge_against_start(
    rows: list[dict],
    start_stories: list[dict],
    measure_dir: Path,
    *,
    protocol: str,
    template: str | None,
    max_items: int | None,
    client: dict[str, Any],
    every_checkpoint: bool,
    cache_dir: Path,
) -> None:
    """Add judge/* keys (win_rate, ci_low, ci_high, invalid_share, judgments) to the selected rows, in place.

    client: rlcw.judges.client.ClientConfig fields (its own `cache_dir` wins over `cache_dir`)."""
    client = {"cache_dir": str(cache_dir), **client}
    evaluator = make_judge_evaluator(
        {"protocol": protocol, "template": template, "max_items": max_items, "client": client}, {}
    )
    baseline = first_samples(start_stories, max_items)
    out_dir = measure_dir / "judge"
    out_dir.mkdir(parents=True, exist_ok=True)
    for row in rows_to_judge(rows, every_checkpoint):
        candidates = first_samples(stories_of(row, measure_dir), max_items)
        metrics = evaluator.evaluate(candidates, baseline, out_dir)
        metrics.pop("calls", None)  # uncached calls differ between a first run and a resumed one
        system = candidates[0].get("system", "candidate")
        low, high = win_rate_ci(
            out_dir / f"judge_{re.sub(r'[^A-Za-z0-9_.-]+', '_', system)}.jsonl", evaluator.dimension
        )
        row.update({f"judge/{k}": v for k, v in metrics.items()})
        row["judge/ci_low"], row["judge/ci_high"] = low, high
        print(
            f"[outcome] judge {row['run']}@{row['step']}: win rate {metrics.get('win_rate', float('nan')):.3f} "
            f"[{low:.2f}, {high:.2f}], invalid {metrics.get('invalid_share', float('nan')):.2f}",
            flush=True,
        )
