"""Which kernels this process's CPU matmuls run on, for choosing a precision at run time.

    from rlcw.cpu_isa import describe, native_bf16, amx_bf16, resolve_cpu_precision
    describe()                        # "torch ISA path AVX512, avx512_bf16 yes, AMX yes, oneDNN limit -, ..."
    resolve_cpu_precision("auto")     # ("bf16", "auto: AMX runs bf16 matmuls here") or ("fp32", why)
    cpu_autocast("auto", False, "grpo")  # True where a training step should autocast to bf16 here (said in the log)

torch picks its CPU kernels by instruction set: ATen's vectorised operators by `ATEN_CPU_CAPABILITY` (what
`torch.backends.cpu.get_cpu_capability()` reports), oneDNN's matmuls (bf16 ones among them) up to
`ONEDNN_MAX_CPU_ISA`, MKL's fp32 ones up to `MKL_ENABLE_INSTRUCTIONS`. Setting all three to the AVX2 level on an
AVX-512 box runs the AVX2 path of an older CPU. bf16 matmuls are native with AVX512-BF16 or AMX and emulated
otherwise (slower than fp32 by orders of magnitude). AMX's tiles compute them many times faster than fp32, so there
bf16 wins at every size. With AVX512-BF16 alone it depends on the CPU: an Intel Xeon without AMX computed them
slower than fp32 (bf16 won only where memory binds, decoding a few rows), an AMD EPYC many times faster; so there
`auto` times one matmul in both precisions, once a process, and takes bf16 where it ran at least
`BF16_MIN_SPEEDUP` times as fast (a CPU timing close to that could choose differently in two processes or ranks:
set the precision there). Measured rates on each path: `scripts/bench_stages.py` and docs/results/speed.md.
"""

from __future__ import annotations

import functools
import os
import statistics
import time

import torch

# oneDNN ISA limits (ONEDNN_MAX_CPU_ISA) under which bf16 matmuls are emulated
NO_BF16_ISA = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
CPU_PRECISIONS = ("auto", "fp32", "bf16")
BF16_MIN_SPEEDUP = 1.5  # bf16 against fp32 matmul rate that `auto` needs without AMX (docs/results/speed.md)
PROBE_PAIRS = 15  # fp32-bf16 matmul pairs the bf16 probe times (their median ratio)
SPEEDUP_SHAPE = (512, 576, 1536)  # rows x in x out: the embedded model's MLP up-projection at a training batch's rows


def isa_limits() -> tuple[str, str]:
    """(ONEDNN_MAX_CPU_ISA upper-cased, ATEN_CPU_CAPABILITY lower-cased), "" where unset."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper(), os.environ.get("ATEN_CPU_CAPABILITY", "").lower()


def _limited_away() -> str | None:
    """Why bf16 is emulated under this process's ISA limits (e.g. the AVX2 path), or None."""
    isa, aten = isa_limits()
    if isa in NO_BF16_ISA or aten in ("default", "avx2"):
        return f"bf16 limited away (ONEDNN_MAX_CPU_ISA={isa or '-'}, ATEN_CPU_CAPABILITY={aten or '-'})"
    return None


def native_bf16() -> tuple[bool, str]:
    """(bf16 matmuls run natively here, why): a CUDA device with bf16, or a CPU with AVX512-BF16 or AMX that
    neither oneDNN nor ATen is told to ignore (ONEDNN_MAX_CPU_ISA / ATEN_CPU_CAPABILITY, e.g. the AVX2 path)."""
    if torch.cuda.is_available():
        ok = torch.cuda.is_bf16_supported()
        return ok, f"{torch.cuda.get_device_name()} {'has' if ok else 'lacks'} bf16"
    limited = _limited_away()
    if limited:
        return False, limited
    found = [
        n
        for n, ok in (
            ("amx_bf16", torch.cpu._is_amx_tile_supported()),
            ("avx512_bf16", torch.cpu._is_avx512_bf16_supported()),
        )
        if ok
    ]
    return (True, f"the CPU has {found[0]}") if found else (False, "the CPU has neither avx512_bf16 nor amx_bf16")


def amx_bf16() -> tuple[bool, str]:
    """(AMX runs this process's bf16 matmuls, why): the CPU has AMX tiles and ONEDNN_MAX_CPU_ISA, if set, still
    allows them (a limit naming AMX, or ALL), and ATen is not held to the AVX2 path."""
    limited = _limited_away()
    if limited:
        return False, limited
    if not torch.cpu._is_amx_tile_supported():
        why = "avx512_bf16 without AMX" if torch.cpu._is_avx512_bf16_supported() else "no native bf16"
        return False, f"the CPU has {why}"
    isa, _ = isa_limits()
    if isa and isa != "ALL" and "AMX" not in isa:
        return False, f"AMX limited away (ONEDNN_MAX_CPU_ISA={isa})"
    return True, "AMX runs bf16 matmuls here"


def bf16_matmul_speedup() -> float:
    """fp32 seconds / bf16 seconds of one `SPEEDUP_SHAPE` matmul here, at torch's current thread count, measured
    once a process and thread count: the median over `PROBE_PAIRS` back-to-back pairs (one fp32 matmul, one bf16)
    after a warm-up of each. A matmul lasts a few ms, less than a scheduler slice, so on a machine busy with another
    job a single timing can hold a descheduled thread's wait: the fastest of 5 timings per precision, the probe
    before, sent a quickstart down the fp32 path on a box where bf16 runs several times faster. A pair's two
    timings share the moment's load and their median is far steadier (scripts/bench_isa_probe.py,
    docs/results/speed.md): less sensitive, not immune; set the precision where a run must take one path."""
    return _speedup(torch.get_num_threads())


@functools.cache
def _speedup(threads: int) -> float:
    rows, d_in, d_out = SPEEDUP_SHAPE
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, d_in, generator=gen), torch.randn(d_in, d_out, generator=gen)
    x16, w16 = x.bfloat16(), w.bfloat16()
    x @ w, x16 @ w16  # warm-up (oneDNN builds its bf16 kernel on the first call)

    def seconds(a: torch.Tensor, b: torch.Tensor) -> float:
        start = time.perf_counter()
        a @ b
        return time.perf_counter() - start

    return statistics.median(seconds(x, w) / seconds(x16, w16) for _ in range(PROBE_PAIRS))


def resolve_cpu_precision(precision: str) -> tuple[str, str]:
    """A CPU compute precision (auto | fp32 | bf16) -> (fp32 | bf16, why). auto takes bf16 where AMX runs it, and
    where bf16 is native without AMX only if one matmul at a training step's size ran at least `BF16_MIN_SPEEDUP`
    times fp32's rate here (`bf16_matmul_speedup`); on a GPU auto is fp32 (its precision is the trainer's `bf16`
    flag)."""
    if precision not in CPU_PRECISIONS:
        raise ValueError(f"precision must be one of {CPU_PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision, "set in the config"
    if torch.cuda.is_available():
        return "fp32", "auto: a GPU (its precision is train.bf16)"
    ok, why = amx_bf16()
    if ok or not native_bf16()[0]:
        return ("bf16" if ok else "fp32"), f"auto: {why}"
    ratio = bf16_matmul_speedup()
    chosen = "bf16" if ratio >= BF16_MIN_SPEEDUP else "fp32"
    return (
        chosen,
        f"auto: {why}, bf16 matmuls measured at {ratio:.1f}x fp32's rate here (bf16 needs {BF16_MIN_SPEEDUP}x)",
    )


def cpu_autocast(precision: str, hf_bf16: bool, who: str, what: str = "training step", extra: str = "") -> bool:
    """Whether `what` (a training step, a loss) autocasts to bf16 on this CPU: a recipe's `train.cpu_precision`
    resolved here (`resolve_cpu_precision`) and said in the log as `who`'s line, with `extra` appended. False on a
    GPU and where `hf_bf16` (the recipe's `train.bf16`, the HF trainer's own flag) is set: that flag decides."""
    if torch.cuda.is_available() or hf_bf16:
        return False
    from rlcw.logs import say

    chosen, why = resolve_cpu_precision(precision)
    say(who, f"{what} in {chosen} on the CPU ({why}){extra}")
    return chosen == "bf16"


def describe() -> str:
    """One line for logs and benchmarks: torch's ISA path, the CPU's bf16 hardware, the limits set."""
    isa, aten = isa_limits()
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "")
    amx, why = amx_bf16()
    return (
        f"torch ISA path {torch.backends.cpu.get_cpu_capability()}, "
        f"avx512_bf16 {'yes' if torch.cpu._is_avx512_bf16_supported() else 'no'}, "
        f"AMX {'yes' if torch.cpu._is_amx_tile_supported() else 'no'} ({'in use' if amx else why}), "
        f"limits ONEDNN_MAX_CPU_ISA={isa or '-'} ATEN_CPU_CAPABILITY={aten or '-'} MKL_ENABLE_INSTRUCTIONS={mkl or '-'}"
    )
