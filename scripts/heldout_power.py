"""How many held-out stories a bound on a change needs, read off finished quickstart runs.

    python scripts/heldout_power.py runs/quickstart other/runs/quickstart ... --key ended_short --bound 0.05

Each run folder's `heldout/start.jsonl` and `heldout/tuned.jsonl` (the scored common-random-number samples) give the
paired change of `--key` per (prompt, sample); its between- and within-prompt variances (one-way ANOVA,
rlcw.metrics.heldout.variance_components) are averaged over the runs. For each design (prompts x samples a prompt)
the script prints the standard error of the mean change, the 95% half-width, and the chance that the interval's
upper end is <= `--bound` for each true change in `--true` (normal approximation; `bound_pass_chance`), alone and
on `--seeds` seeds at once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from rlcw.io import read_jsonl
from rlcw.measure.heldout import as_arrays
from rlcw.metrics.heldout import bound_pass_chance, design_se, variance_components


def paired_change(run: Path, key: str) -> np.ndarray:
    """(prompts, samples) tuned - start of `key` in a run folder (or its heldout/ folder): the records' arrays as the
    held-out measurement builds them (rlcw.measure.heldout.as_arrays, which refuses unpaired records)."""
    folder = run / "heldout" if (run / "heldout").is_dir() else run
    sides = []
    for name in ("start.jsonl", "tuned.jsonl"):
        path = folder / name
        if not path.is_file():
            sys.exit(f"{path}: not found (a quickstart run folder, or its heldout/ folder, after the held-out stage)")
        recs = read_jsonl(path)
        if key not in recs[0]:
            sys.exit(f"{path}: no {key!r} in its records (keys: {', '.join(recs[0])})")
        shape = (max(r["prompt_index"] for r in recs) + 1, max(r["sample_index"] for r in recs) + 1)
        sides.append(as_arrays(recs, *shape))
    if key not in sides[0] or sides[0][key].shape != sides[1][key].shape:
        sys.exit(f"{folder}: {key!r} is not a per-story measure of the held-out records, or the two sides differ")
    return sides[1][key] - sides[0][key]


def design(text: str) -> tuple[int, int]:
    prompts, _, samples = text.partition("x")
    return int(prompts), int(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--key", default="ended_short", help="a per-story field of the held-out records")
    ap.add_argument("--bound", type=float, default=0.05, help="the bound on the upper end of the 95%% interval")
    ap.add_argument("--designs", nargs="+", type=design, default=[(32, 4), (64, 2), (128, 1), (64, 4), (128, 4)])
    ap.add_argument("--true", nargs="+", type=float, default=[0.0, -0.03, -0.05, -0.07, -0.09])
    ap.add_argument("--seeds", type=int, default=3, help="the bound held on this many independent runs at once")
    args = ap.parse_args()
    parts = [variance_components(paired_change(run, args.key)) for run in args.runs]
    between, within = (float(np.mean(x)) for x in zip(*parts, strict=True))
    print(f"{len(parts)} runs, change of {args.key}: between-prompt variance {between:.4f}, within {within:.4f}")
    head = " | ".join(f"true {t:+.2f}: 1 / {args.seeds}" for t in args.true)
    print(f"| design | stories | SE | 95% half-width | {head} |")
    print("|---" * (4 + len(args.true)) + "|")
    for prompts, samples in args.designs:
        se = design_se(between, within, prompts, samples)
        cells = []
        for t in args.true:
            p = bound_pass_chance(t, se, args.bound)
            cells.append(f"{p:.2f} / {p**args.seeds:.2f}")
        print(f"| {prompts} x {samples} | {prompts * samples} | {se:.4f} | {1.96 * se:.3f} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
