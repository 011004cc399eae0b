"""export: merged LoRA, serving files, logits check; generate from the export."""

import json
from pathlib import Path

from rlcw.config import load_config
from rlcw.data.records import read_stories


def test_export_then_generate(grpo_run, runs_root):
    from rlcw.recipes import export, generate

    cfg = load_config(export.ExportConfig, None, [f"output_dir={runs_root}", "run_name=export", f"model.name={grpo_run['artifacts']['policy']}"])
    out = export.main(cfg)
    model_dir = Path(out["artifacts"]["model"])
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer_config.json").is_file()
    assert "base_model:" in (model_dir / "README.md").read_text()
    gen_cfg = json.loads((model_dir / "generation_config.json").read_text())
    assert gen_cfg["do_sample"] is True and gen_cfg["temperature"] == 0.8
    assert not (model_dir / "adapter_config.json").exists()
    assert out["metrics"]["max_logit_diff"] <= 1e-4

    g = load_config(generate.GenerateConfig, None, [f"output_dir={runs_root}", "run_name=gen", f"model.name={model_dir}",
                                                    "data.max_prompts=3", "sampling.max_new_tokens=6", "system=tuned"])
    res = generate.main(g)
    stories = read_stories(res["artifacts"]["stories"])
    assert len(stories) == 3 and {s["system"] for s in stories} == {"tuned"}
    again = generate.main(g)  # same seed, same prompts -> same stories
    assert [s["story"] for s in read_stories(again["artifacts"]["stories"])] == [s["story"] for s in stories]
