"""train-rm rm.type=genrm on the tiny model: folder contract, both orders, CoT from a file and a teacher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.preferences import load_preferences
from rlcw.data.rationales import pair_key
from rlcw.errors import RlcwError
from rlcw.recipes.train_rm import TrainRMConfig, main
from rlcw.rewards.genrm import GenRMReward, GenRMScorer
from rlcw.rm.render import RMSpec, load_spec, verdict_token_ids
from rlcw.rm.train_data import build_genrm_dataset


def genrm_cfg(runs_root, pairs_run, tiny_model_dir, name, *extra):
    return load_config(
        TrainRMConfig,
        None,
        [
            f"output_dir={runs_root}",
            f"run_name={name}",
            f"model.name={tiny_model_dir}",
            "rm.type=genrm",
            f"data.train_file={pairs_run['artifacts']['train']}",
            f"data.eval_file={pairs_run['artifacts']['eval']}",
            "data.max_train_pairs=8",
            "data.max_eval_pairs=4",
            "train.max_steps=2",
            "train.batch_size=4",
            "train.logging_steps=1",
            "rm.max_length=192",
            "lora.r=4",
            "train.learning_rate=1e-2",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def genrm_run(runs_root, pairs_run, tiny_model_dir):
    return main(genrm_cfg(runs_root, pairs_run, tiny_model_dir, "genrm", "train.eval_before=true"))


def test_genrm_folder_and_scorer(genrm_run, tiny_model_dir):
    model_dir = Path(genrm_run["artifacts"]["model"])
    spec = load_spec(model_dir)
    assert spec.type == "genrm" and spec.extra["cot"] is False and spec.base_model == str(tiny_model_dir)
    assert not (model_dir / "adapter_config.json").exists() and (model_dir / "model.safetensors").is_file()  # merged
    m = genrm_run["metrics"]
    assert m["train/steps"] == 2 and m["eval/pairs"] == 4 and 0.0 <= m["eval/accuracy"] <= 1.0
    assert {"before/accuracy", "eval/order_consistency", "eval/length_baseline_accuracy"} <= set(m)
    scorer = GenRMScorer(model_dir)
    # the reported numbers are the saved model's under the two-order rule (a range check would only catch NaN)
    from omegaconf import OmegaConf

    from rlcw.metrics.pairwise import two_order_metrics

    pairs = load_preferences(OmegaConf.load(model_dir.parent / "config.yaml").data.eval_file)[:4]
    prompts, chosen, rejected = ([p[k] for p in pairs] for k in ("prompt", "chosen", "rejected"))
    again = two_order_metrics(
        scorer.prefer_ordered(prompts, chosen, rejected), scorer.prefer_ordered(prompts, rejected, chosen)
    )
    assert m["eval/accuracy"] == pytest.approx(again["accuracy"], abs=1e-6)
    assert m["eval/order_consistency"] == pytest.approx(again["order_consistency"], abs=1e-6)
    ordered = scorer.prefer_ordered(["p", "p"], ["A calm story.", "Two."], ["Two.", "A calm story."])
    assert all(0.0 < v < 1.0 for v in ordered)
    assert scorer.prefer(["p"], ["A calm story."], ["Two."]) == pytest.approx([(ordered[0] + 1 - ordered[1]) / 2])
    with pytest.raises(RlcwError, match="expected a genrm"):
        GenRMScorer(tiny_model_dir, spec=RMSpec(type="bt"))


def test_genrm_dataset_has_both_orders(tokenizer):
    spec = RMSpec(type="genrm", max_length=128)
    ds = build_genrm_dataset([{"prompt": "P", "chosen": "good tale", "rejected": "bad tale"}], spec, tokenizer, None)
    a, b = verdict_token_ids(tokenizer)
    assert len(ds) == 2
    answers = [[t for t in row if t != -100] for row in ds["labels"]]
    assert answers == [[a], [b]]  # only the verdict token is learnt
    texts = [tokenizer.decode(ids) for ids in ds["input_ids"]]
    assert texts[0].index("good tale") < texts[0].index("bad tale") and texts[1].index("bad tale") < texts[1].index(
        "good tale"
    )


def test_genrm_reward_on_the_trained_model(genrm_run):
    reward = GenRMReward(genrm_run["artifacts"]["model"], mode="groupmates", k=1, num_generations=2)
    got = reward(["p", "p"], ["One calm story.", "Another story."])
    assert len(got) == 2 and sum(got) == pytest.approx(1.0, abs=1e-6)  # one comparison: the two win rates sum to 1


def test_genrm_cot_from_file(runs_root, pairs_run, tiny_model_dir):
    pairs = load_preferences(pairs_run["artifacts"]["train"], limit=4)
    path = runs_root / "rationales.jsonl"
    rows = [
        {"key": pair_key(p["prompt"], p["chosen"], p["rejected"]), "rationale": "Story A flows; Story B jumps."}
        for p in pairs[:3]
    ]
    rows.append(
        {
            **{k: pairs[3][k] for k in ("prompt", "chosen", "rejected")},
            "rationale": "Story B is garbled.",
            "shown_first": "rejected",
        }
    )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = main(
        genrm_cfg(
            runs_root,
            pairs_run,
            tiny_model_dir,
            "genrm_cot_file",
            "rm.cot=true",
            "data.max_train_pairs=4",
            "rm.rationales.source=file",
            f"rm.rationales.file={path}",
            "rm.max_rationale_tokens=24",
            "train.max_steps=1",
            "data.max_eval_pairs=2",
        )
    )
    saved = [json.loads(x) for x in (runs_root / "genrm_cot_file" / "rationales.jsonl").read_text().splitlines()]
    assert (
        saved[0]["rationale"] == "Story A flows; Story B jumps." and saved[3]["rationale"] == "Story A is garbled."
    )  # normalised: chosen = A
    assert load_spec(summary["artifacts"]["model"]).extra == {"cot": True, "max_rationale_tokens": 24}
    assert summary["metrics"]["eval/no_verdict"] <= 4  # a random model rarely writes "Preferred:": None, never a crash


def test_rationale_file_missing_pair_and_bad_rows(tmp_path):
    from rlcw.data.rationales import rationales_from_file

    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"key": "nope", "rationale": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(RlcwError, match="no rationale for training pair 1"):
        rationales_from_file(path, [{"prompt": "P", "chosen": "a", "rejected": "b"}])
    path.write_text(
        json.dumps({"key": "k", "rationale": "x"}) + "\n" + json.dumps({"key": "k2"}) + "\n", encoding="utf-8"
    )
    with pytest.raises(RlcwError, match=r"r.jsonl:2 field 'rationale'"):
        rationales_from_file(path, [])


def test_teacher_rationales_are_generated_and_saved(tmp_path, tiny_model_dir):
    from types import SimpleNamespace

    from rlcw.recipes.train_rm import genrm_rationales

    cfg = load_config(
        TrainRMConfig,
        None,
        [
            "rm.type=genrm",
            "rm.cot=true",
            "rm.rationales.source=teacher",
            f"rm.rationales.teacher_model={tiny_model_dir}",
            "rm.rationales.max_new_tokens=6",
        ],
    )
    pairs = [
        {"prompt": "P", "chosen": "A calm tale.", "rejected": "tale calm A."},
        {"prompt": "Q", "chosen": "Sun rose.", "rejected": "Rose sun."},
    ]
    texts = genrm_rationales(cfg, SimpleNamespace(path=tmp_path), pairs)
    rows = [json.loads(x) for x in (tmp_path / "rationales.jsonl").read_text().splitlines()]
    assert len(texts) == 2 and all(t.strip() for t in texts)
    assert [r["rationale"] for r in rows] == texts and rows[1]["key"] == pair_key("Q", "Sun rose.", "Rose sun.")
