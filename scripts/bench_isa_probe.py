"""How steady `auto`'s bf16 probe (rlcw.cpu_isa.bf16_matmul_speedup) reads on a quiet and on a busy machine.

    python scripts/bench_isa_probe.py                 # 10 probes quiet, 10 beside a 2-thread matmul job
    python scripts/bench_isa_probe.py --trials 20 --busy-threads 2

`auto` takes bf16 on a CPU with AVX512-BF16 and no AMX only where the probe reads at least BF16_MIN_SPEEDUP; a probe
that reads differently on a busy machine sends the same config down another precision, so another trajectory. Each
trial runs the probe as shipped (the median ratio of PROBE_PAIRS fp32-bf16 pairs) and the probe before it (the
fastest of 5 single matmuls per precision) in the same process, alternating which goes first; prints each one's min / median / max ratio, and
how many trials fell below the threshold, quiet and busy.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch

from rlcw import cpu_isa


def fastest_of_five_ratio() -> float:
    """The probe before pairs: the fastest of 5 single matmuls in each precision, fp32 / bf16."""
    rows, d_in, d_out = cpu_isa.SPEEDUP_SHAPE
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, d_in, generator=gen), torch.randn(d_in, d_out, generator=gen)

    def fastest(a, b):
        a @ b
        times = []
        for _ in range(5):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return min(times)

    return fastest(x, w) / fastest(x.bfloat16(), w.bfloat16())


def shipped_ratio() -> float:
    cpu_isa._speedup.cache_clear()
    return cpu_isa.bf16_matmul_speedup()


def busy(threads: int, stop) -> None:
    """Another job on the same cores: fp32 matmuls of the training step's size, back to back."""
    torch.set_num_threads(threads)
    a, b = torch.randn(1024, 1536), torch.randn(1536, 1536)
    while not stop.is_set():
        a @ b


def trials(n: int) -> dict[str, list[float]]:
    out = {"fastest of 5": [], "pairs (shipped)": []}
    for i in range(n):
        order = [("fastest of 5", fastest_of_five_ratio), ("pairs (shipped)", shipped_ratio)]
        for name, probe in order if i % 2 == 0 else order[::-1]:
            out[name].append(probe())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--busy-threads", type=int, default=2, help="threads of the competing job (0: quiet only)")
    args = ap.parse_args()
    print(
        f"torch threads {torch.get_num_threads()}, shape {cpu_isa.SPEEDUP_SHAPE}, threshold {cpu_isa.BF16_MIN_SPEEDUP}x"
    )
    results = {"quiet": trials(args.trials)}
    if args.busy_threads:
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        job = ctx.Process(target=busy, args=(args.busy_threads, stop))
        job.start()
        time.sleep(2.0)  # let it start its loop
        try:
            results[f"busy ({args.busy_threads} threads beside)"] = trials(args.trials)
        finally:
            stop.set()
            job.join()
    for when, by_probe in results.items():
        for name, ratios in by_probe.items():
            below = sum(r < cpu_isa.BF16_MIN_SPEEDUP for r in ratios)
            print(
                f"{when:28s} {name:18s} ratio min {min(ratios):5.2f}  median {statistics.median(ratios):5.2f}  "
                f"max {max(ratios):5.2f}  below {cpu_isa.BF16_MIN_SPEEDUP}x: {below} of {len(ratios)}"
            )


if __name__ == "__main__":
    main()
