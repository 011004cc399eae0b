"""Time what a user waits for before rlcw answers: `rlcw grpo --help` and a wrong-value error, as subprocesses,
against `python -c pass` (the interpreter's own start) as the baseline.

    python scripts/bench_cli.py                  # 5 repeats each
    python scripts/bench_cli.py --repeats 3 --json

Each case prints its median and best wall time and the ratio of its median to the baseline's median. The error
case must exit 2 (a user error); any other exit status is reported. Run it pinned on a busy machine
(`OMP_NUM_THREADS=1 taskset -c 0 python scripts/bench_cli.py`): the numbers are wall times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RLCW = [sys.executable, "-m", "rlcw"]

CASES = {
    "python -c pass": ([sys.executable, "-c", "pass"], 0),
    "rlcw --version": ([*RLCW, "--version"], 0),
    "rlcw grpo --help": ([*RLCW, "grpo", "--help"], 0),
    "rlcw grpo train.max_steps=abc": ([*RLCW, "grpo", "train.max_steps=abc"], 2),
    "rlcw grpo train.max_steps=0": ([*RLCW, "grpo", "train.max_steps=0"], 2),
    "rlcw grpo model.dtype=bf16": ([*RLCW, "grpo", "model.dtype=bf16"], 2),
}


def time_once(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - start, done.returncode


def bench(repeats: int) -> dict[str, dict]:
    out = {}
    for name, (argv, expected) in CASES.items():
        times, codes = [], set()
        for _ in range(repeats):
            seconds, code = time_once(argv)
            times.append(seconds)
            codes.add(code)
        out[name] = {"median_s": statistics.median(times), "best_s": min(times), "exit": sorted(codes)}
        if codes != {expected}:
            out[name]["unexpected_exit"] = f"expected {expected}"
    base = out["python -c pass"]["median_s"]
    for row in out.values():
        row["ratio"] = row["median_s"] / base
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    rows = bench(max(1, args.repeats))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'case':34s} {'median s':>9s} {'best s':>8s} {'x baseline':>11s}  exit")
    for name, row in rows.items():
        note = f"  ({row['unexpected_exit']})" if "unexpected_exit" in row else ""
        print(f"{name:34s} {row['median_s']:9.3f} {row['best_s']:8.3f} {row['ratio']:11.1f}  {row['exit']}{note}")


if __name__ == "__main__":
    main()
