"""rlcw.cpu_isa: a CPU computes in bf16 only where AMX runs it, the ISA limits (the AVX2 path) are honoured, and one
line says which path torch is on."""

from __future__ import annotations

import pytest
import torch

from rlcw.cpu_isa import describe, native_bf16, resolve_cpu_precision


def test_auto_takes_bf16_only_where_amx_runs_it(cpu_flags):
    cpu_flags(avx512_bf16=True, amx=True)
    assert resolve_cpu_precision("auto") == ("bf16", "auto: AMX runs bf16 matmuls here")
    cpu_flags(avx512_bf16=True, amx=False)  # native bf16, but at half fp32's matmul rate
    precision, why = resolve_cpu_precision("auto")
    assert precision == "fp32" and "avx512_bf16 without AMX" in why
    assert native_bf16()[0]  # a decode of a few rows still takes bf16 there (rollout.precision=auto)
    cpu_flags(avx512_bf16=False, amx=False)
    assert resolve_cpu_precision("auto")[0] == "fp32"


def test_isa_limits_take_amx_or_bf16_away(cpu_flags, monkeypatch):
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
