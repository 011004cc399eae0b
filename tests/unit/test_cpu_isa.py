"""rlcw.cpu_isa: a CPU computes in bf16 where AMX runs it or, without AMX, where bf16 matmuls were measured faster
than fp32; the ISA limits (the AVX2 path) are honoured, and one line says which path torch is on."""

from __future__ import annotations

import pytest
import torch

from rlcw import cpu_isa
from rlcw.cpu_isa import bf16_matmul_speedup, describe, native_bf16, resolve_cpu_precision


@pytest.fixture
def speedup(monkeypatch):
    """Set what the bf16-vs-fp32 matmul timing reports: `speedup(0.5)`; returns the timings asked for from then on."""

    def set_ratio(ratio: float) -> list:
        calls = []
        monkeypatch.setattr(cpu_isa, "bf16_matmul_speedup", lambda: calls.append(ratio) or ratio)
        return calls

    return set_ratio


def test_auto_takes_bf16_where_amx_runs_it_or_where_it_was_measured_faster(cpu_flags, speedup):
    calls = speedup(8.0)
    cpu_flags(avx512_bf16=True, amx=True)
    assert resolve_cpu_precision("auto") == ("bf16", "auto: AMX runs bf16 matmuls here")
    assert not calls  # AMX: no timing
    cpu_flags(avx512_bf16=True, amx=False)  # native bf16 at 8x fp32's matmul rate (an AMD EPYC)
    precision, why = resolve_cpu_precision("auto")
    assert precision == "bf16" and "avx512_bf16 without AMX" in why and "8.0x" in why and calls == [8.0]
    speedup(0.5)  # at half fp32's rate (an Intel Xeon without AMX)
    precision, why = resolve_cpu_precision("auto")
    assert precision == "fp32" and "0.5x" in why
    speedup(cpu_isa.BF16_MIN_SPEEDUP)
    assert resolve_cpu_precision("auto")[0] == "bf16"
    assert native_bf16()[0]  # a decode of a few rows takes bf16 either way (rollout.precision=auto)
    calls = speedup(8.0)
    cpu_flags(avx512_bf16=False, amx=False)
    assert resolve_cpu_precision("auto")[0] == "fp32" and not calls


def test_the_matmul_timing_is_a_ratio_taken_once_per_thread_count(monkeypatch):
    cpu_isa._speedup.cache_clear()
    ratio = bf16_matmul_speedup()
    assert 0 < ratio < float("inf")
    timed = []
    monkeypatch.setattr(cpu_isa.time, "perf_counter", lambda: timed.append(1) or float(len(timed)))
    assert bf16_matmul_speedup() == ratio and not timed  # cached
    cpu_isa._speedup.cache_clear()
    # a fake clock ticking 1 s a read: every matmul "takes" 1 s; PROBE_PAIRS pairs, two timed matmuls each, 2 reads each
    assert bf16_matmul_speedup() == 1.0 and len(timed) == 4 * cpu_isa.PROBE_PAIRS


def test_isa_limits_take_amx_or_bf16_away(cpu_flags, speedup, monkeypatch):
    speedup(0.5)
    cpu_flags(avx512_bf16=True, amx=True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # bf16 without AMX
    precision, why = resolve_cpu_precision("auto")
    assert precision == "fp32" and "AMX limited away" in why and native_bf16()[0]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert resolve_cpu_precision("auto")[0] == "bf16"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # the AVX2 path: bf16 emulated
    precision, why = resolve_cpu_precision("auto")
    assert precision == "fp32" and "ONEDNN_MAX_CPU_ISA=AVX2" in why and not native_bf16()[0]
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert resolve_cpu_precision("auto")[0] == "fp32"


def test_a_set_precision_is_kept_a_gpu_leaves_it_to_the_trainer_and_a_bad_one_is_refused(cpu_flags, monkeypatch):
    cpu_flags(avx512_bf16=False, amx=False)
    assert resolve_cpu_precision("bf16") == ("bf16", "set in the config")
    assert resolve_cpu_precision("fp32") == ("fp32", "set in the config")
    with pytest.raises(ValueError, match="auto"):
        resolve_cpu_precision("int8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_cpu_precision("auto")[0] == "fp32"


def test_describe_names_the_isa_path_the_hardware_and_the_limits(cpu_flags, monkeypatch):
    cpu_flags(avx512_bf16=True, amx=True)
    assert "AMX yes (in use)" in describe()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    line = describe()
    assert f"torch ISA path {torch.backends.cpu.get_cpu_capability()}" in line
    assert "AMX yes (bf16 limited away" in line and "MKL_ENABLE_INSTRUCTIONS=AVX2" in line
