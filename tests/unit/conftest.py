"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def cpu_flags(monkeypatch):
    """A CPU box without ISA limits whose bf16 hardware the test sets: `cpu_flags(avx512_bf16=..., amx=...)`."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(name, raising=False)

    def flags(avx512_bf16: bool, amx: bool) -> None:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)

    return flags
