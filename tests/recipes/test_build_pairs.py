"""build-pairs on the bundled stories."""

import json
from pathlib import Path

from rlcw.data.records import validate_preference
from rlcw.metrics.text import count_words


def test_build_pairs_writes_length_matched_split_pairs(pairs_run):
    assert pairs_run["status"] == "completed"
    train = [json.loads(x) for x in Path(pairs_run["artifacts"]["train"]).read_text().splitlines()]
    held = [json.loads(x) for x in Path(pairs_run["artifacts"]["eval"]).read_text().splitlines()]
    assert len(train) == pairs_run["metrics"]["train_pairs"] > 100
    assert len(held) == pairs_run["metrics"]["eval_pairs"] > 20
    assert not {p["meta"]["story_id"] for p in train} & {p["meta"]["story_id"] for p in held}
    for p in train + held:
        validate_preference(p)
        c, r = count_words(p["chosen"]), count_words(p["rejected"])
        assert abs(c - r) <= max(1, round(0.05 * c))
    assert {p["meta"]["kind"] for p in train} == {"shuffle", "splice", "substitute", "repeat", "truncate"}
    run_dir = Path(pairs_run["artifacts"]["train"]).parent.parent
    assert (run_dir / "config.yaml").read_text().startswith("# rlcw build-pairs\n# git_sha:")


def test_build_pairs_human_vs_model_from_generate_records(tmp_path):
    from rlcw.config import load_config
    from rlcw.recipes.build_pairs import BuildPairsConfig, main

    human = " ".join(f"The old keeper number {i} lit the lamp." for i in range(6))  # 6 sentences x 8 words = 48
    model = " ".join(f"A boat {i} came in at night." for i in range(5)) + " And then"  # 5 x 7 + 2 = 37, no final end
    recs = [
        {
            "id": f"train/{i}",
            "prompt": f"Story {i} about a lighthouse.",
            "story": model,
            "system": "base",
            "reference": human,
        }
        for i in range(12)
    ]
    recs.append({"id": "train/short", "prompt": "Tiny.", "story": "Too short.", "system": "base", "reference": human})
    stories = tmp_path / "stories.jsonl"
    stories.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    res = main(
        load_config(
            BuildPairsConfig,
            None,
            [
                f"output_dir={tmp_path}",
                "run_name=gold",
                "data.kind=human_vs_model",
                f"data.stories={stories}",
                "data.eval_fraction=0.4",
                "data.tolerance=0.1",
            ],
        )
    )
    m = res["metrics"]
    # budget = min(48, 37) = 37; human's last sentence end within it is 32 < 0.9 * 37 = 33.3 -> cut at 37 words;
    # model's is 35 >= 33.3 -> 35 words; |37 - 35| = 2 <= round(0.1 * 37) = 4 -> kept
    assert (m["pairs"], m["dropped/too_short"], m["dropped/length_mismatch"]) == (12, 1, 0)
    assert (m["mean_words/chosen"], m["mean_words/rejected"]) == (37, 35)
    train = [json.loads(x) for x in Path(res["artifacts"]["train"]).read_text().splitlines()]
    held = [json.loads(x) for x in Path(res["artifacts"]["eval"]).read_text().splitlines()]
    assert len(train) == m["train_pairs"] and len(held) == m["eval_pairs"] and len(train) + len(held) == 12
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held}
    assert all(p["meta"]["rejected_system"] == "base" and p["rejected"].endswith("night.") for p in train + held)
    assert (
        (Path(res["artifacts"]["train"]).parent.parent / "report.md").read_text().startswith("# Human-vs-model pairs")
    )
