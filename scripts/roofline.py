"""This machine's roofline for decoding, measured in the calling process: memory bandwidth and matmul rates.

    python scripts/roofline.py                 # bandwidth (STREAM-like triad) and fp32/bf16 matmul GFLOP/s
    from roofline import measure, decode_bound  # what scripts/bench_rl.py does (same run as its samplers)

Decoding one token for each of `batch` rows reads every weight once (memory-bound at small batch) and
does 2 FLOP per parameter per row (compute-bound at large batch), so

    tokens/s <= min(batch * bandwidth / weight_bytes, matmul_rate / (2 * params))

with weight_bytes = params * bytes per parameter of the sampler's precision. The bound is optimistic: it
leaves out the KV cache's reads (it grows with the context), attention's FLOPs, the prompt's prefill and
the sampling itself (softmax and draw over the vocabulary), so no sampler reaches 100%. The triad
(a = b + s * c over arrays far larger than the caches; 3 x 4 bytes an element, as STREAM counts) and the
matmuls run with torch's current thread count.
"""

from __future__ import annotations

import time

import torch

BYTES = {"fp32": 4, "bf16": 2, "int8": 1}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def best_time(fn, repeats: int) -> float:
    """Fastest of `repeats` timed calls after one warm-up (the least disturbed by other load)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def triad_bandwidth(n: int = 32 * 2**20, repeats: int = 5) -> float:
    """Bytes/s of a = b + 3 c over n fp32 elements (128 MiB per array by default)."""
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    return 3 * 4 * n / best_time(lambda: torch.add(b, c, alpha=3.0, out=a), repeats)


def matmul_rate(dtype: torch.dtype, m: int = 1024, k: int = 576, n: int = 1536, repeats: int = 5) -> float:
    """FLOP/s of an (m, k) x (k, n) matmul; k and n are the embedded model's hidden and MLP widths."""
    x, w = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    return 2 * m * k * n / best_time(lambda: torch.mm(x, w), repeats)


def measure() -> dict:
    """{"bandwidth_gbs", "fp32_gflops", "bf16_gflops", "threads"} on this machine now."""
    return {
        "bandwidth_gbs": triad_bandwidth() / 1e9,
        "fp32_gflops": matmul_rate(torch.float32) / 1e9,
        "bf16_gflops": matmul_rate(torch.bfloat16) / 1e9,
        "threads": torch.get_num_threads(),
    }


def decode_bound(params: float, batch: int, precision: str, bandwidth_gbs: float, gflops: float) -> dict:
    """The roofline's tokens/s for `batch` rows at `precision`, and which side binds."""
    memory = batch * bandwidth_gbs * 1e9 / (params * BYTES[precision])
    compute = gflops * 1e9 / (2 * params)
    return {"bound_tok_s": min(memory, compute), "limit": "memory" if memory <= compute else "compute"}


def main() -> None:
    m = measure()
    print(
        f"triad {m['bandwidth_gbs']:.1f} GB/s, fp32 matmul {m['fp32_gflops']:.0f} GFLOP/s, "
        f"bf16 matmul {m['bf16_gflops']:.0f} GFLOP/s ({m['threads']} threads)"
    )


if __name__ == "__main__":
    main()
