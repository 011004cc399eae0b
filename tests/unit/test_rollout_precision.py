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


def test_every_fast_sampler_key_a_trl_rollout_cannot_take_is_named_in_one_error():
    def error(kind, **keys):
        with pytest.raises(RlcwError) as info:
            check_fast_rollout(
                kind, keys.pop("precision", "fp32"), 3.0, deepspeed=keys.pop("ds", None), agents_variant=None, **keys
            )
        return info.value

    e = error("trl", precision="bf16", draw="inverse_cdf", block_short_endings=True)
    assert "rollout.precision and rollout.draw and rollout.block_short_endings apply to the fast rollout only" in str(
        e
    )
    assert e.where == "rollout.precision"
    assert "or set rollout.precision=fp32 rollout.draw=multinomial rollout.block_short_endings=false" in e.hint
    # a typo in a value is reported before a key that only needs the fast rollout
    with pytest.raises(RlcwError, match="unknown rollout.draw 'gumbel'"):
        check_fast_rollout("trl", "bf16", 3.0, deepspeed=None, agents_variant=None, draw="gumbel")
    # under ZeRO-3 the same keys go back with the sampler, in the same order
    e = error("fast", precision="auto", block_short_endings=True, ds="configs/deepspeed/zero3.json")
    assert e.hint.startswith("rollout.kind=trl rollout.precision=fp32 rollout.block_short_endings=false (")
    check_fast_rollout("trl", "fp32", 3.0, deepspeed="configs/deepspeed/zero3.json", agents_variant=None)
