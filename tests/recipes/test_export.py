"""export: merged LoRA, serving files, logits check; generate from the export."""

import json
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import read_stories


def test_export_then_generate(grpo_run, runs_root):
    from rlcw.recipes import export, generate

    cfg = load_config(
        export.ExportConfig,
        None,
        [f"output_dir={runs_root}", "run_name=export", f"model.name={grpo_run['artifacts']['policy']}"],
    )
    out = export.main(cfg)
    model_dir = Path(out["artifacts"]["model"])
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer_config.json").is_file()
    card = (model_dir / "README.md").read_text()
    assert "base_model:" in card
    assert "- training steps: 2" in card  # read from the grpo run's summary.json
    assert "rlcw bundled prompts" in card and "Apache-2.0" in card  # data and licence attribution
    assert "| eval/" in card  # the run's last periodic evaluation
    assert (model_dir / "chat_template.jinja").is_file()
    gen_cfg = json.loads((model_dir / "generation_config.json").read_text())
    assert gen_cfg["do_sample"] is True and gen_cfg["temperature"] == 0.8
    assert not (model_dir / "adapter_config.json").exists()
    assert out["metrics"]["max_logit_diff"] <= 1e-4

    g = load_config(
        generate.GenerateConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=gen",
            f"model.name={model_dir}",
            "data.max_prompts=3",
            "sampling.max_new_tokens=6",
            "system=tuned",
        ],
    )
    res = generate.main(g)
    stories = read_stories(res["artifacts"]["stories"])
    assert len(stories) == 3 and {s["system"] for s in stories} == {"tuned"}
    g.overwrite = True  # a used run folder is refused otherwise (the run-folder contract)
    again = generate.main(g)  # same seed, same prompts -> same stories
    assert [s["story"] for s in read_stories(again["artifacts"]["stories"])] == [s["story"] for s in stories]


def test_push_to_hub_needs_repo_and_token(monkeypatch, tmp_path):
    from rlcw.errors import RlcwError
    from rlcw.recipes.export import HubSection, push_to_hub

    with pytest.raises(RlcwError, match="repo_id"):
        push_to_hub(tmp_path, HubSection(push=True))
    monkeypatch.delenv("RLCW_TEST_NO_TOKEN", raising=False)
    with pytest.raises(RlcwError, match="RLCW_TEST_NO_TOKEN"):
        push_to_hub(tmp_path, HubSection(push=True, repo_id="me/x", token_env="RLCW_TEST_NO_TOKEN"))
