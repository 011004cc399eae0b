"""train-rm with rm.length_head=true (ODIN) on a tiny model: the two-head folder, scoring by head through
BTScorer and a reward spec, the per-head held-out accuracies and the logged loss parts."""

import json
from pathlib import Path

import pytest

from rlcw.rewards.factory import build_rewards
from rlcw.rm.render import load_spec
from rlcw.rm.scoring import load_rm

STORIES = ["A short story. It ends.", "Another one that is longer. It goes on and on. Then, at last, it ends."]


@pytest.fixture(scope="module")
def odin_run(runs_root, pairs_run, tiny_model_dir):
    from rlcw.config import load_config
    from rlcw.recipes.train_rm import TrainRMConfig, main

    cfg = load_config(
        TrainRMConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=rm_odin",
            f"model.name={tiny_model_dir}",
            f"data.train_file={pairs_run['artifacts']['train']}",
            f"data.eval_file={pairs_run['artifacts']['eval']}",
            "data.max_train_pairs=32",
            "data.max_eval_pairs=16",
            "train.max_steps=4",
            "train.batch_size=4",
            "train.eval_steps=2",
            "train.logging_steps=1",
            "rm.max_length=64",
            "rm.length_head=true",
            "rm.odin.orthogonality=0.5",
            "lora.r=4",
        ],
    )
    return main(cfg)


def test_folder_names_its_heads_and_loads_in_transformers(odin_run):
    from transformers import AutoModelForSequenceClassification

    model_dir = Path(odin_run["artifacts"]["model"])
    assert load_spec(model_dir).extra["heads"] == ["quality", "length"]
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    assert model.config.num_labels == 2 and model.config.id2label == {0: "quality", 1: "length"}


def test_scorers_and_reward_specs_use_the_quality_head_unless_told(odin_run):
    model_dir = odin_run["artifacts"]["model"]
    heads = load_rm(model_dir).score_heads(["p", "p"], STORIES)
    assert heads["sum"] == pytest.approx([q + n for q, n in zip(heads["quality"], heads["length"], strict=True)])
    assert heads["quality"] != pytest.approx(heads["length"], abs=1e-6)
    assert load_rm(model_dir).score(["p", "p"], STORIES) == pytest.approx(heads["quality"], abs=1e-5)
    (default, length, summed), _ = build_rewards(
        {
            "q": {"type": "bt", "rm_path": model_dir},
            "n": {"type": "bt", "rm_path": model_dir, "head": "length"},
            "s": {"type": "bt", "rm_path": model_dir, "head": "sum"},
        }
    )
    prompts = [[{"role": "user", "content": "p"}]] * 2
    completions = [[{"role": "assistant", "content": s}] for s in STORIES]
    assert default(prompts, completions) == pytest.approx(heads["quality"], abs=1e-5)
    assert length(prompts, completions) == pytest.approx(heads["length"], abs=1e-5)
    assert summed(prompts, completions) == pytest.approx(heads["sum"], abs=1e-5)


def test_metrics_hold_every_head_and_the_loss_parts(odin_run):
    m = odin_run["metrics"]
    for head in ("quality", "length", "sum"):
        assert 0.0 <= m[f"eval/{head}/accuracy"] <= 1.0
    assert m["eval/accuracy"] == m["eval/quality/accuracy"]
    rows = [
        json.loads(x) for x in (Path(odin_run["artifacts"]["model"]).parent / "metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in rows if "odin/rho_length" in r]
    assert train and all(-1.0 <= r["odin/rho_length"] <= 1.0 and "odin/head_dot" in r for r in train)
    assert any("eval_odin/bt_loss" in r for r in rows)


def test_length_head_only_for_bt_and_without_centering():
    from rlcw.config import load_config
    from rlcw.errors import RlcwError
    from rlcw.recipes.train_rm import TrainRMConfig, validate

    with pytest.raises(RlcwError, match="rm.type=bt"):
        validate(load_config(TrainRMConfig, None, ["rm.type=genrm", "rm.length_head=true"]))
    with pytest.raises(RlcwError, match="center_rewards_coefficient"):
        validate(load_config(TrainRMConfig, None, ["rm.length_head=true", "rm.center_rewards_coefficient=0.01"]))


def test_eval_rm_reports_every_head_and_the_ending_prices(odin_run, pairs_run, tmp_path):
    from rlcw.config import load_config
    from rlcw.data.preferences import load_preferences
    from rlcw.metrics.ending import ending_prices
    from rlcw.metrics.pairwise import length_correlation
    from rlcw.metrics.text import count_words
    from rlcw.recipes.eval_rm import EvalRMConfig, main

    model_dir, eval_file = odin_run["artifacts"]["model"], pairs_run["artifacts"]["eval"]
    samples = [
        {
            "prompt_id": f"p{i % 3}",
            "prompt": f"prompt {i % 3}",
            "story": s,
            "finished": i % 4 != 0,
            "min_words": 8,
            "max_words": 14,
        }
        for i, s in enumerate(
            [
                "One two three.",
                "A fox ran far away into the dark wood and did not come back.",
                "Short. End.",
                "It rained all day, and the town slept, and no one came to the door at all.",
                "The end came soon.",
                "She sang; he listened; the night went on and on until the morning light.",
            ]
        )
    ]
    path = tmp_path / "start.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    cfg = load_config(
        EvalRMConfig,
        None,
        [
            f"output_dir={tmp_path}",
            "run_name=ev",
            f"scorer.path={model_dir}",
            f"data.file={eval_file}",
            "data.max_pairs=12",
            "bootstrap_resamples=100",
            f"ending.samples={path}",
            "ending.n_resamples=100",
        ],
    )
    m = main(cfg)["metrics"]
    pairs = load_preferences(eval_file)[:12]
    scorer = load_rm(model_dir)
    prompts = [p["prompt"] for p in pairs]
    c, r = (
        scorer.score_heads(prompts, [p["chosen"] for p in pairs]),
        scorer.score_heads(prompts, [p["rejected"] for p in pairs]),
    )
    words = [float(count_words(p["chosen"])) for p in pairs] + [float(count_words(p["rejected"])) for p in pairs]
    for head in ("quality", "length", "sum"):
        corr = length_correlation(c[head] + r[head], words)["pearson"]
        assert m[f"head/{head}/score_length_pearson"] == pytest.approx(corr, abs=1e-5)
        assert f"head/{head}/accuracy_chosen_shorter" in m and f"head/{head}/accuracy_chosen_longer" in m
    assert m["score_length_pearson"] == pytest.approx(m["head/quality/score_length_pearson"])
    s = scorer.score_heads([x["prompt"] for x in samples], [x["story"] for x in samples])
    for head in ("quality", "length"):
        recs = [
            {**x, "prompt_index": x["prompt_id"], "score": v, "words": count_words(x["story"])}
            for x, v in zip(samples, s[head], strict=True)
        ]
        want = ending_prices(recs, 100, 0)
        for key in ("ended_minus_cut", "short_minus_inside", "per_10_words_ended", "words_pearson"):
            assert m[f"head/{head}/ending/{key}"] == pytest.approx(want[key], abs=1e-5, nan_ok=True)
    assert m["ending/ended_minus_cut"] == pytest.approx(m["head/quality/ending/ended_minus_cut"])
    report = (tmp_path / "ev" / "report.md").read_text()
    assert "length head" in report and "ending/short_minus_inside" in report


def test_a_ppo_value_model_from_a_two_head_rm_starts_from_its_quality_head(odin_run):
    from transformers import AutoModelForSequenceClassification

    from rlcw.rl.ppo.value import load_value_model

    model_dir = odin_run["artifacts"]["model"]
    value = load_value_model(model_dir)
    rows = AutoModelForSequenceClassification.from_pretrained(model_dir).score.weight.detach()  # (2, hidden)
    assert value.head.weight.shape == (1, rows.shape[1])
    assert value.head.weight.detach()[0].tolist() == pytest.approx(rows[0].tolist())


@pytest.mark.parametrize("head", ["quality", "length"])
def test_best_of_n_scores_candidates_with_the_chosen_head(odin_run, runs_root, tiny_model_dir, head):
    from rlcw.config import load_config
    from rlcw.data.records import read_stories
    from rlcw.recipes import generate

    model_dir = odin_run["artifacts"]["model"]
    overrides = [f"output_dir={runs_root}", f"run_name=bon_odin_{head}", f"model.name={tiny_model_dir}"]
    overrides += ["data.max_prompts=2", "sampling.max_new_tokens=6", "best_of.n=2", f"best_of.rm_path={model_dir}"]
    summary = generate.main(load_config(generate.GenerateConfig, None, [*overrides, f"best_of.head={head}"]))
    cands = read_stories(Path(summary["artifacts"]["stories"]).parent / "candidates.jsonl")
    want = load_rm(model_dir).score_heads([c["prompt"] for c in cands], [c["story"] for c in cands])[head]
    assert [c["meta"]["score"] for c in cands] == pytest.approx(want, abs=1e-5)
