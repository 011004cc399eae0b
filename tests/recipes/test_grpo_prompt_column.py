"""grpo main() on the tiny model with prompts from a plain jsonl `prompt` column (`data.sources.<name> =
{style: column, prompts: FILE}`): the trained prompts are the file's rows, logged under the source's name."""

import json
from pathlib import Path

from rlcw.config import load_config


def test_grpo_trains_on_a_plain_prompt_column(tmp_path, runs_root, rm_run, tiny_model_dir):
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    mine = tmp_path / "my_prompts.jsonl"
    mine.write_text("".join(json.dumps({"prompt": f"Write 20 to 30 words about a {w}."}) + "\n" for w in "ab"))
    cfg = load_config(
        GRPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=grpo_column",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={rm_run['artifacts']['model']}",
            f"data.sources={{mine: {{style: column, prompts: '{mine}'}}}}",
            "train.max_steps=1",
            "train.batch_size=4",
            "train.num_generations=2",
            "train.max_completion_length=8",
            "train.log_kl_every=0",
            "train.report_to=[none]",
            "eval.every_steps=0",
            "lora.r=4",
        ],
    )
    summary = main(cfg)
    run_dir = Path(summary["artifacts"]["metrics"]).parent
    assert summary["status"] == "completed"
    (order,) = [json.loads(x) for x in (run_dir / "samples" / "data_order.jsonl").read_text().splitlines()]
    assert set(order["prompt_ids"]) == {"my_prompts-000001", "my_prompts-000002"}
    (row,) = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if "reward" in x]
    assert "source/mine/reward" in row
