"""`rollout.precision=auto`: bf16 only where bf16 matmuls run natively, fp32 on the AVX2 path."""

from __future__ import annotations

import pytest

from rlcw.errors import RlcwError
from rlcw.rl.grpo.rollout import check_fast_rollout, resolve_precision


def test_auto_takes_bf16_where_the_cpu_has_it(cpu_flags):
    cpu_flags(avx512_bf16=True, amx=False)
    assert resolve_precision("auto") == ("bf16", "auto: the CPU has avx512_bf16")
    cpu_flags(avx512_bf16=True, amx=True)
    assert resolve_precision("auto") == ("bf16", "auto: the CPU has amx_bf16")


def test_auto_takes_fp32_without_native_bf16_or_on_the_avx2_path(cpu_flags, monkeypatch):
    cpu_flags(avx512_bf16=False, amx=False)
    assert resolve_precision("auto")[0] == "fp32"
    cpu_flags(avx512_bf16=True, amx=True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    precision, why = resolve_precision("auto")
    assert precision == "fp32" and "ONEDNN_MAX_CPU_ISA=AVX2" in why
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert resolve_precision("auto")[0] == "fp32"


def test_a_set_precision_is_kept_and_auto_is_a_valid_key(cpu_flags):
    cpu_flags(avx512_bf16=False, amx=False)
    assert resolve_precision("bf16") == ("bf16", "set in the config")
    check_fast_rollout("fast", "auto", 3.0, deepspeed=None, agents_variant=None)
    with pytest.raises(RlcwError, match="fp32, bf16 or auto"):
        check_fast_rollout("fast", "int8", 3.0, deepspeed=None, agents_variant=None)
