"""train-rm rm.ensemble.size=3 on the tiny model: one folder, shared-trunk scoring equal to each member run
whole, the aggregate through every loader (BTScorer, reward spec, serve-rm app, eval-rm), RL logging; joint
training on the shared trunk (the default for LoRA'd top layers), its resume, and the sequential path it replaces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.rm.aggregate import aggregate
from rlcw.rm.ensemble import MANIFEST_FILE, load_manifest
from rlcw.rm.scoring import load_rm

STORIES = [
    "A fox found a key. It opened the old gate. The garden was full of light.",
    "One. Two.",
    "The rain fell on the town all night, and in the morning the river had a new voice.",
    "She wrote a letter to the sea. The sea did not answer. She wrote again.",
]
PROMPTS = ["Write a story."] * len(STORIES)


def _train(runs_root, pairs_run, tiny_model_dir, name: str, *extra: str) -> dict:
    from rlcw.recipes.train_rm import TrainRMConfig, main

    cfg = load_config(
        TrainRMConfig,
        None,
        [
            f"output_dir={runs_root}",
            f"run_name={name}",
            f"model.name={tiny_model_dir}",
            f"data.train_file={pairs_run['artifacts']['train']}",
            f"data.eval_file={pairs_run['artifacts']['eval']}",
            "data.max_train_pairs=24",
            "data.max_eval_pairs=12",
            "train.max_steps=3",
            "train.batch_size=4",
            "train.eval_steps=0",
            "train.logging_steps=1",
            "train.report_to=[none]",
            "train.learning_rate=5e-3",
            "rm.max_length=64",
            "lora.r=4",
            "rm.ensemble.size=3",
            "rm.ensemble.offset_stories=16",
            *extra,
        ],
    )
    return main(cfg)


@pytest.fixture(scope="module")
def ens_run(runs_root, pairs_run, tiny_model_dir):
    # the tiny model has 2 layers: LoRA on the top 1 leaves layer 0 (and the embeddings) shared
    return _train(runs_root, pairs_run, tiny_model_dir, "rm_ens", "lora.top_layers=1", "rm.ensemble.aggregate=wco")


def _member_whole(model_dir: Path, j: int):
    """Member j as an ordinary sequence-classification model: the folder's model with member j's tensors loaded."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tensors = load_file(str(model_dir / "members" / f"{j}.safetensors"))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected and all(".layers.0." in k or "embed_tokens" in k for k in missing)
    return model


def test_folder_and_manifest(ens_run):
    model_dir = Path(ens_run["artifacts"]["model"])
    m = load_manifest(model_dir)
    assert len(m.members) == 3 and m.shared_layers == 1 and m.aggregate == "wco" and m.bootstrap
    assert [x.seed for x in m.members] == [0, 1, 2]
    assert len({x.offset for x in m.members}) == 3  # each member's own mean on training stories
    assert ens_run["metrics"]["train/members"] == 3 and ens_run["metrics"]["train/steps"] == 3
    assert ens_run["metrics"]["train/joint"] == 1.0  # rm.ensemble.joint=auto: LoRA on the top layer shares a trunk
    assert ens_run["metrics"]["train/mean_unique_pairs"] < 24  # bootstrap resamples, not the same 24 pairs
    # a member file holds only the member's own tensors: the top layer, the final norm and the head
    from safetensors.torch import load_file

    keys = set(load_file(str(model_dir / "members" / "1.safetensors")))
    assert "score.weight" in keys and "model.norm.weight" in keys
    assert not any(".layers.0." in k or "embed_tokens" in k for k in keys)


def test_shared_trunk_scores_equal_each_member_run_whole(ens_run):
    """The branching forward (trunk once, then each member's top) gives what each member gives alone."""
    from rlcw.rm.render import encode_for_rm

    model_dir = Path(ens_run["artifacts"]["model"])
    scorer = load_rm(model_dir, length_control=False)
    members = scorer.score_members(PROMPTS, STORIES)  # (3, n), centred
    offsets = [m.offset for m in load_manifest(model_dir).members]
    encoded = encode_for_rm(scorer.spec, scorer.tokenizer, PROMPTS, STORIES)
    for j in range(3):
        whole = _member_whole(model_dir, j)
        with torch.inference_mode():
            alone = [whole(input_ids=torch.tensor([e])).logits[0, 0].item() for e in encoded]
        assert [s + offsets[j] for s in members[j]] == pytest.approx(alone, abs=1e-4)
    assert members[0] != pytest.approx(members[1], abs=1e-3)  # the members differ


def test_aggregate_is_the_manifest_choice_and_can_be_overridden(ens_run):
    from rlcw.rewards.factory import build_reward

    model_dir = ens_run["artifacts"]["model"]
    scorer = load_rm(model_dir, length_control=False)
    members = scorer.score_members(PROMPTS, STORIES)
    assert scorer.score(PROMPTS, STORIES) == pytest.approx(
        [min(c) for c in zip(*members, strict=True)], abs=1e-6
    )  # wco
    uwo = build_reward(
        {"type": "bt", "rm_path": model_dir, "aggregate": "uwo", "uwo_lambda": 2.0, "length_control": False}
    )
    assert uwo.scorer.score(PROMPTS, STORIES) == pytest.approx(aggregate(members, "uwo", 2.0), abs=1e-6)
    mean = build_reward({"type": "bt", "rm_path": model_dir, "aggregate": "mean", "length_control": False})
    assert mean.scorer.score(PROMPTS, STORIES) == pytest.approx(aggregate(members, "mean"), abs=1e-6)
    with pytest.raises(RlcwError, match="reward spec.*aggregate must be one of"):
        build_reward({"type": "bt", "rm_path": model_dir, "aggregate": "max"})


def test_aggregate_options_on_a_single_rm_are_an_error(rm_run):
    from rlcw.rewards.factory import build_reward

    with pytest.raises(RlcwError, match="apply to RM ensembles"):
        build_reward({"type": "bt", "rm_path": rm_run["artifacts"]["model"], "aggregate": "wco"})


def test_reward_function_logs_members_and_disagreement(ens_run):
    from rlcw.rewards.bt import BTScorer

    reward = BTScorer(load_rm(ens_run["artifacts"]["model"], length_control=False))
    logged: dict[str, float] = {}
    rewards = reward(PROMPTS, STORIES, log_metric=logged.__setitem__)
    members = reward.scorer.score_members(PROMPTS, STORIES)
    name = reward.__name__
    for j in range(3):
        assert logged[f"rewards/{name}/member_{j}/mean"] == pytest.approx(sum(members[j]) / len(STORIES), abs=1e-6)
    spread = [torch.tensor(c).std(unbiased=False).item() for c in zip(*members, strict=True)]
    assert logged[f"rewards/{name}/disagreement"] == pytest.approx(sum(spread) / len(spread), abs=1e-6)
    assert len(rewards) == len(STORIES)


def test_serve_rm_serves_the_aggregate(ens_run):
    from fastapi.testclient import TestClient

    from rlcw.recipes.serve_rm import ServeRMConfig, build_app

    model_dir = ens_run["artifacts"]["model"]
    expected = load_rm(model_dir).score(PROMPTS, STORIES)
    with TestClient(build_app(ServeRMConfig(rm_path=model_dir))) as client:
        r = client.post("/score", json={"prompts": PROMPTS, "completions": STORIES})
    assert r.status_code == 200 and r.json()["rewards"] == pytest.approx(expected, abs=1e-5)


def test_eval_rm_reports_members_aggregate_and_agreement(ens_run, pairs_run, runs_root):
    from rlcw.recipes.eval_rm import EvalRMConfig, main

    cfg = load_config(
        EvalRMConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=eval_ens",
            f"scorer.path={ens_run['artifacts']['model']}",
            f"data.file={pairs_run['artifacts']['eval']}",
            "data.max_pairs=12",
            "bootstrap_resamples=50",
        ],
    )
    m = main(cfg)["metrics"]
    train = ens_run["metrics"]
    assert m["accuracy"] == pytest.approx(train["eval/accuracy"], abs=1e-9)
    for j in range(3):
        assert m[f"ensemble/member_{j}/accuracy"] == pytest.approx(train[f"eval/member_{j}/accuracy"], abs=1e-9)
    assert m["ensemble/member_agreement"] == pytest.approx(train["eval/member_agreement"], abs=1e-9)
    assert m["ensemble/members"] == 3
    report = (Path(runs_root) / "eval_ens" / "report.md").read_text()
    assert "member_0" in report and "agreement" in report


def test_bad_manifest_names_file_and_key(ens_run, tmp_path):
    import shutil

    bad = tmp_path / "rm"
    shutil.copytree(ens_run["artifacts"]["model"], bad)
    raw = json.loads((bad / MANIFEST_FILE).read_text())
    for key, value, match in (
        ("aggregate", "max", "field 'aggregate'.*unknown aggregate"),
        ("uwo_lambda", -1, "field 'uwo_lambda'.*>= 0"),
        ("members", [], "field 'members'"),
        ("members", [{"file": "members/9.safetensors"}], r"field 'members\[0\].file'.*does not exist"),
        ("shared_layers", "one", "field 'shared_layers'"),
    ):
        (bad / MANIFEST_FILE).write_text(json.dumps({**raw, key: value}))
        with pytest.raises(RlcwError, match=match) as err:
            load_rm(bad)
        assert MANIFEST_FILE in str(err.value)
    (bad / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(RlcwError, match="corrupt rlcw_ensemble.json"):
        load_rm(bad)


def test_whole_members_are_scored_one_after_another(runs_root, pairs_run, tiny_model_dir):
    """lora.enabled=false: nothing is shared, member files are whole models, scores still match each member."""
    run = _train(runs_root, pairs_run, tiny_model_dir, "rm_ens_full", "lora.enabled=false", "data.max_eval_pairs=4")
    model_dir = Path(run["artifacts"]["model"])
    assert load_manifest(model_dir).shared_layers == 0
    scorer = load_rm(model_dir, length_control=False)
    members = scorer.score_members(PROMPTS[:2], STORIES[:2])
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    from rlcw.rm.render import encode_for_rm

    encoded = encode_for_rm(scorer.spec, scorer.tokenizer, PROMPTS[:2], STORIES[:2])
    for j, m in enumerate(load_manifest(model_dir).members):
        whole = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
        whole.load_state_dict(load_file(str(model_dir / m.file)))
        with torch.inference_mode():
            alone = [whole(input_ids=torch.tensor([e])).logits[0, 0].item() - m.offset for e in encoded]
        assert members[j] == pytest.approx(alone, abs=1e-4)


def _metric_rows(summary) -> list[dict]:
    run_dir = Path(summary["artifacts"]["metrics"]).parent
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_grpo_logs_members_and_warns_on_disagreement(ens_run, runs_root, tiny_model_dir):
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    cfg = load_config(
        GRPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=grpo_ens",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={ens_run['artifacts']['model']}",
            "train.max_steps=2",
            "train.batch_size=4",
            "train.num_generations=2",
            "train.max_completion_length=8",
            "eval.every_steps=0",
            "lora.r=4",
            "data.max_train_prompts=8",
            "monitor.warn={max_ensemble_disagreement: 0.0}",  # any disagreement at all warns
        ],
    )
    summary = main(cfg)
    rows = [r for r in _metric_rows(summary) if any(k.endswith("/disagreement") for k in r)]
    assert len(rows) == 2  # one per step
    name = next(k for k in rows[0] if k.endswith("/disagreement")).split("/")[1]
    for r in rows:
        assert all(f"rewards/{name}/member_{j}/mean" in r for j in range(3))
        assert r[f"rewards/{name}/disagreement"] > 0
    run_dir = Path(summary["artifacts"]["metrics"]).parent
    report = (run_dir / "report.md").read_text()
    assert "ensemble_disagreement=" in report and "max_ensemble_disagreement" in report
    assert (run_dir / "plots" / "reward.png").is_file() and (run_dir / "plots" / "monitors.png").is_file()


def test_ppo_logs_members_and_disagreement(ens_run, runs_root, tiny_model_dir):
    from rlcw.recipes.ppo import PPORecipeConfig, main

    cfg = load_config(
        PPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=ppo_ens",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={ens_run['artifacts']['model']}",
            "train.batch_size=4",
            "train.minibatch_size=2",
            "train.micro_batch_size=2",
            "train.ppo_epochs=1",
            "train.max_new_tokens=8",
            "train.max_steps=1",
            "eval.every_steps=0",
            "lora.r=4",
            "value.lora.r=4",
            "data.max_train_prompts=8",
            "monitor.warn={max_ensemble_disagreement: 0.0}",
        ],
    )
    summary = main(cfg)
    rows = [r for r in _metric_rows(summary) if any(k.endswith("/disagreement") for k in r)]
    assert rows, "PPO logged no ensemble disagreement"
    name = next(k for k in rows[0] if k.endswith("/disagreement")).split("/")[1]
    assert all(f"rewards/{name}/member_{j}/mean" in rows[0] for j in range(3))
    run_dir = Path(summary["artifacts"]["metrics"]).parent
    assert "ensemble_disagreement=" in (run_dir / "report.md").read_text()


def test_eval_rm_prices_ending_with_the_ensemble_aggregate(ens_run, pairs_run, runs_root, tmp_path):
    """eval-rm's ending prices (rlcw.metrics.ending) score an ensemble through its aggregate."""
    from rlcw.metrics.text import count_words
    from rlcw.recipes.eval_rm import EvalRMConfig, main

    samples = tmp_path / "start.jsonl"
    finished = [True, False, True, True]
    rows = [
        {"prompt_id": f"p{i % 2}", "prompt": p, "story": s, "finished": f, "min_words": 12, "max_words": 40}
        for i, (p, s, f) in enumerate(zip(PROMPTS, STORIES, finished, strict=True))
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        f"output_dir={runs_root}",
        f"scorer.path={ens_run['artifacts']['model']}",
        f"data.file={pairs_run['artifacts']['eval']}",
        "data.max_pairs=4",
        "bootstrap_resamples=20",
        "ending.n_resamples=20",
        f"ending.samples={samples}",
    ]
    m = main(load_config(EvalRMConfig, None, ["run_name=eval_ens_ending", *overrides]))["metrics"]
    s = load_rm(ens_run["artifacts"]["model"]).score(PROMPTS, STORIES, raw=True)  # wco of the members
    # ended: 0, 2, 3; cut: 1 ("One. Two."); none of the ended ones is under 12 words
    assert [count_words(x) >= 12 for x in STORIES] == [True, False, True, True]
    assert m["ending/ended_minus_cut"] == pytest.approx((s[0] + s[2] + s[3]) / 3 - s[1], abs=1e-6)
    assert m["ending/n_ended"] == 3 and m["ending/n_short"] == 0


# --- joint training on the shared trunk (rlcw.rm.ensemble_trainer) ---


def _rows(summary) -> list[dict]:
    return _metric_rows(summary)


def _by_step(summary) -> dict[int, dict]:
    """Every key logged at each step (members log separate rows; a resumed run's later rows win)."""
    out: dict[int, dict] = {}
    for r in _rows(summary):
        out.setdefault(r["step"], {}).update(r)
    return out


def test_joint_run_logs_every_member_and_records_held_out_accuracy(ens_run):
    rows = _rows(ens_run)
    for j in range(3):
        steps = [r["step"] for r in rows if f"member_{j}/loss" in r]
        assert steps == [1, 2, 3]  # train.logging_steps=1
        assert all(
            f"member_{j}/learning_rate" in r and f"member_{j}/grad_norm" in r for r in rows if f"member_{j}/loss" in r
        )
        assert 0.0 <= ens_run["metrics"][f"eval/member_{j}/accuracy"] <= 1.0
    assert (Path(ens_run["artifacts"]["model"]).parent / "members" / "2.json").is_file()


def test_joint_false_keeps_the_sequential_path(ens_run, runs_root, pairs_run, tiny_model_dir):
    """The path the default switches off for shared-trunk members: TRL's RewardTrainer, member by member, on the
    same bootstrap draws (the joint path's counts are that resample counted). Joint != sequential is not expected
    (the data order differs), but both record every member's held-out accuracy."""
    run = _train(runs_root, pairs_run, tiny_model_dir, "rm_ens_seq", "lora.top_layers=1", "rm.ensemble.joint=false")
    m = run["metrics"]
    assert m["train/joint"] == 0.0 and m["train/members"] == 3 and m["train/steps"] == 3
    assert m["train/mean_unique_pairs"] == ens_run["metrics"]["train/mean_unique_pairs"]  # the same resamples
    assert all(0.0 <= m[f"eval/member_{j}/accuracy"] <= 1.0 for j in range(3))
    model_dir = Path(run["artifacts"]["model"])
    assert load_manifest(model_dir).shared_layers == 1
    members = load_rm(model_dir, length_control=False).score_members(PROMPTS, STORIES)
    assert members[0] != pytest.approx(members[1], abs=1e-3)
    rows = _rows(run)
    assert [r["step"] for r in rows if "member_2/loss" in r] == [1, 2, 3]  # TRL's own log rows, per member


def test_joint_true_with_whole_members_is_an_error_before_anything_loads(runs_root, pairs_run, tiny_model_dir):
    with pytest.raises(RlcwError, match="rm.ensemble.joint=true needs members that share a trunk"):
        _train(runs_root, pairs_run, tiny_model_dir, "rm_ens_bad", "lora.enabled=false", "rm.ensemble.joint=true")
    assert not (Path(runs_root) / "rm_ens_bad" / "metrics.jsonl").exists()


def _member_files(summary) -> list[dict]:
    from safetensors.torch import load_file

    model_dir = Path(summary["artifacts"]["model"])
    return [load_file(str(model_dir / m.file)) for m in load_manifest(model_dir).members]


def test_joint_resume_equals_an_uninterrupted_run(runs_root, pairs_run, tiny_model_dir, monkeypatch):
    """Stop a joint run right after its step-2 checkpoint, resume with train.resume=true: members, per-step
    losses and the in-loop held-out evaluation equal an uninterrupted run's."""
    from rlcw.rm import ensemble_trainer

    extra = ("lora.top_layers=1", "train.max_steps=4", "train.save_steps=2", "train.eval_steps=2")
    full = _train(runs_root, pairs_run, tiny_model_dir, "rm_ens_joint_full", *extra)
    real = ensemble_trainer.save_checkpoint

    def save_then_die(path, step, *args, **kwargs):
        out = real(path, step, *args, **kwargs)
        if step == 2:
            raise KeyboardInterrupt("killed after the step-2 checkpoint")
        return out

    monkeypatch.setattr(ensemble_trainer, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        _train(runs_root, pairs_run, tiny_model_dir, "rm_ens_joint_killed", *extra)
    monkeypatch.undo()
    ckpt = Path(runs_root) / "rm_ens_joint_killed" / "checkpoints" / "checkpoint-2"
    assert json.loads((ckpt / "trainer_state.json").read_text())["step"] == 2
    assert not (Path(runs_root) / "rm_ens_joint_killed" / "model").exists()
    resumed = _train(runs_root, pairs_run, tiny_model_dir, "rm_ens_joint_killed", *extra, "train.resume=true")
    assert resumed["status"] == "completed" and resumed["metrics"]["train/steps"] == 4
    for a, b in zip(_member_files(full), _member_files(resumed), strict=True):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6, msg=k)
    a, b = _by_step(full), _by_step(resumed)
    for step in (3, 4):
        for j in range(3):
            for key in (f"member_{j}/loss", f"member_{j}/grad_norm", f"member_{j}/learning_rate"):
                assert b[step][key] == pytest.approx(a[step][key], abs=1e-6), (step, key)
    eval_rows = [[r for r in _rows(s) if "member_1/eval_accuracy" in r] for s in (full, resumed)]
    assert [r["step"] for r in eval_rows[0]] == [0, 2, 4]
    assert eval_rows[1][-1]["member_1/eval_loss"] == pytest.approx(eval_rows[0][-1]["member_1/eval_loss"], abs=1e-6)
    assert resumed["metrics"]["eval/accuracy"] == full["metrics"]["eval/accuracy"]
    for j in range(3):  # the loop's held-out accuracy at the last step is the saved folder's, scored by BTScorer
        assert a[4][f"member_{j}/eval_accuracy"] == full["metrics"][f"eval/member_{j}/accuracy"]
    # resumed once more after it finished: the members are kept (no training), the folder is the same
    trained = sum("member_0/loss" in r for r in _rows(resumed))
    again = _train(runs_root, pairs_run, tiny_model_dir, "rm_ens_joint_killed", *extra, "train.resume=true")
    assert again["metrics"]["train/steps"] == 4 and sum("member_0/loss" in r for r in _rows(again)) == trained
    for a, b in zip(_member_files(resumed), _member_files(again), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_member_with_zero_weights_does_not_move_and_the_trunk_is_shared(tiny_model_dir, tokenizer, tmp_path):
    """train_joint on the tiny model: member 1 draws no pair (all weights 0) and keeps its initial tensors;
    member 0 learns; every member holds the very trunk modules of the base, untouched."""
    from peft import LoraConfig, TaskType
    from transformers import AutoModelForSequenceClassification
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from rlcw.rm.ensemble_trainer import JointSettings, member_model, train_joint
    from rlcw.training_state import trainable_state

    base = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    base.config.pad_token_id = tokenizer.pad_token_id
    trunk_before = {k: v.clone() for k, v in base.model.layers[0].state_dict().items()}
    peft = LoraConfig(task_type=TaskType.SEQ_CLS, r=4, target_modules=["q_proj", "v_proj"], layers_to_transform=[1])
    members = [member_model(base, 1, seed, peft) for seed in (0, 1)]
    assert all(m.get_base_model().model.layers[0] is base.model.layers[0] for m in members)
    assert all(m.get_base_model().model.embed_tokens is base.model.embed_tokens for m in members)
    start = [{k: v.clone() for k, v in trainable_state(m).items()} for m in members]
    assert not torch.equal(
        start[0]["base_model.model.score.modules_to_save.default.weight"],
        start[1]["base_model.model.score.modules_to_save.default.weight"],
    )  # own seeds
    ids = tokenizer(["a good story", "the end", "once upon a time", "no"])["input_ids"]
    rows = [{"chosen_ids": ids[i], "rejected_ids": ids[(i + 1) % 4]} for i in range(4)]
    weights = torch.tensor([[1.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    settings = JointSettings(learning_rate=1e-2, max_steps=2, batch_size=2, logging_steps=1)
    logged = []
    step = train_joint(
        base,
        members,
        1,
        rows,
        weights,
        settings,
        DataCollatorForPreference(tokenizer.pad_token_id),
        tmp_path,
        lambda s, j, m: logged.append((s, j, m)),
    )
    assert step == 2 and [(s, j) for s, j, _ in logged] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    after = [trainable_state(m) for m in members]
    assert all(torch.equal(after[1][k], start[1][k]) for k in start[1])  # no pair drawn: no update
    assert any(not torch.equal(after[0][k], start[0][k]) for k in start[0])
    assert all(m["loss"] == 0.0 for s, j, m in logged if j == 1)
    for k, v in base.model.layers[0].state_dict().items():
        assert torch.equal(v, trunk_before[k]), k


def _tiny_joint(tiny_model_dir, tokenizer, k: int = 2):
    """A tiny base (2 layers: layer 0 shared) with k members, and 4 preference rows."""
    from peft import LoraConfig, TaskType
    from transformers import AutoModelForSequenceClassification

    from rlcw.rm.ensemble_trainer import member_model

    base = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    base.config.pad_token_id = tokenizer.pad_token_id
    peft = LoraConfig(task_type=TaskType.SEQ_CLS, r=4, target_modules=["q_proj", "v_proj"], layers_to_transform=[1])
    members = [member_model(base, 1, seed, peft) for seed in range(k)]
    ids = tokenizer(["a good story", "the end", "once upon a time", "no", "a fox", "rain"])["input_ids"]
    rows = [{"chosen_ids": ids[i], "rejected_ids": ids[(i + 1) % 6]} for i in range(6)]
    return base, members, rows


@pytest.mark.parametrize("bf16", [False, True])
def test_gradient_accumulation_equals_one_larger_batch(tiny_model_dir, tokenizer, tmp_path, bf16):
    """grad_accum=2 x batch 2 takes the same optimizer step as batch 4 (the same 4 pairs of the shared order, the
    same per-pair weights); also under bf16 autocast (train.bf16), to a looser tolerance."""
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from rlcw.rm.ensemble_trainer import JointSettings, train_joint
    from rlcw.training_state import trainable_state

    weights = torch.tensor([[1.0, 2.0, 0.0, 1.0, 3.0, 0.0], [2.0, 0.0, 1.0, 1.0, 0.0, 1.0]])
    states, logs = [], []
    for batch, accum in ((4, 1), (2, 2)):
        base, members, rows = _tiny_joint(tiny_model_dir, tokenizer)
        s = JointSettings(learning_rate=1e-2, max_steps=1, batch_size=batch, grad_accum=accum, bf16=bf16)
        collate = DataCollatorForPreference(tokenizer.pad_token_id)
        logged = {}
        train_joint(
            base, members, 1, rows, weights, s, collate, tmp_path, lambda _, j, m, out=logged: out.update({j: m})
        )
        states.append([{k: v.clone() for k, v in trainable_state(m).items()} for m in members])
        logs.append(logged)
    start = [trainable_state(m) for m in _tiny_joint(tiny_model_dir, tokenizer)[1]]
    tol = 2e-2 if bf16 else 1e-5
    for j in range(2):  # Adam's first step hardly sees the gradient's scale: the loss and norm before clipping do
        for key in ("loss", "grad_norm"):
            assert logs[1][j][key] == pytest.approx(logs[0][j][key], rel=tol, abs=tol), (j, key)
    for j in range(2):
        assert any(not torch.equal(states[0][j][k], start[j][k]) for k in start[j])  # the step moved the member
        for k in states[0][j]:
            torch.testing.assert_close(states[1][j][k], states[0][j][k], rtol=tol, atol=tol, msg=k)


def test_margins_reach_the_joint_loss(tiny_model_dir, tokenizer, tmp_path):
    """rm.margin's per-pair margins ride in TRL's collated batch: margin 0 changes nothing, margin 1 raises the loss."""
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from rlcw.rm.ensemble_trainer import JointSettings, train_joint

    losses = []
    for margin in (None, 0.0, 1.0):
        base, members, rows = _tiny_joint(tiny_model_dir, tokenizer, k=1)
        if margin is not None:
            rows = [{**r, "margin": margin} for r in rows]
        logged = {}
        s = JointSettings(learning_rate=1e-2, max_steps=1, batch_size=6)
        collate = DataCollatorForPreference(tokenizer.pad_token_id)
        train_joint(
            base, members, 1, rows, torch.ones(1, 6), s, collate, tmp_path, lambda _, j, m, o=logged: o.update(m)
        )
        losses.append(logged["loss"])
    assert losses[1] == pytest.approx(losses[0], abs=1e-7) and losses[2] > losses[0] + 0.3


def test_a_joint_checkpoint_of_another_ensemble_is_a_clear_error(tiny_model_dir, tokenizer, tmp_path):
    from peft import LoraConfig, TaskType

    from rlcw.rm.ensemble_trainer import JointSettings, load_checkpoint, make_optimizer, member_model
    from rlcw.rm.ensemble_trainer import save_checkpoint as save

    base, members, _ = _tiny_joint(tiny_model_dir, tokenizer, k=2)
    s = JointSettings(learning_rate=1e-3, max_steps=2, batch_size=2)
    path = save(tmp_path / "checkpoint-1", 1, members, [make_optimizer(m, s) for m in members], s)
    three = _tiny_joint(tiny_model_dir, tokenizer, k=3)[1]
    with pytest.raises(RlcwError, match="holds 2 ensemble members, this run trains 3") as err:
        load_checkpoint(path, three, [make_optimizer(m, s) for m in three])
    assert "trainer_state.json" in str(err.value)
    wider = LoraConfig(task_type=TaskType.SEQ_CLS, r=4, target_modules=["q_proj", "k_proj"], layers_to_transform=[1])
    other = [member_model(base, 1, seed, wider) for seed in (0, 1)]
    with pytest.raises(RlcwError, match="member 0's checkpointed tensors do not fit") as err:
        load_checkpoint(path, other, [make_optimizer(m, s) for m in other])
    assert "member_0.safetensors" in str(err.value) and "lora" in str(err.value)
    assert load_checkpoint(path, members, [make_optimizer(m, s) for m in members]) == 1


# --- WARM: one RM whose weights are the members' mean ---


def test_average_members_is_the_elementwise_mean_in_each_dtype():
    from rlcw.rm.ensemble import average_members

    a = {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([[0.0]], dtype=torch.bfloat16)}
    b = {"w": torch.tensor([3.0, 6.0]), "h": torch.tensor([[1.0]], dtype=torch.bfloat16)}
    out = average_members([a, b])
    assert out["w"].tolist() == [2.0, 4.0] and out["h"].dtype == torch.bfloat16 and out["h"].item() == 0.5
    with pytest.raises(ValueError, match="other tensors"):
        average_members([a, {"w": torch.tensor([1.0, 2.0])}])


def test_weight_averaged_members_make_one_plain_rm(runs_root, pairs_run, tiny_model_dir):
    """rm.ensemble.average=true: the same members as the ensemble run, written as ONE RM whose member tensors are
    their mean (WARM); it scores like a model built from those averaged tensors by hand."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    from rlcw.rm.ensemble import is_ensemble
    from rlcw.rm.render import encode_for_rm

    run = _train(runs_root, pairs_run, tiny_model_dir, "rm_warm", "lora.top_layers=1", "rm.ensemble.average=true")
    model_dir = Path(run["artifacts"]["model"])
    assert not is_ensemble(model_dir) and run["metrics"]["train/weight_averaged"] == 1.0
    assert 0.0 <= run["metrics"]["eval/accuracy"] <= 1.0 and run["metrics"]["train/members"] == 3
    staged = [load_file(str(model_dir.parent / "members" / f"{j}.safetensors")) for j in range(3)]
    by_hand = AutoModelForSequenceClassification.from_pretrained(model_dir.parent / "members" / "trunk").eval()
    mean = {k: sum(m[k] for m in staged) / 3 for k in staged[0]}
    by_hand.load_state_dict(mean, strict=False)
    scorer = load_rm(model_dir, length_control=False)
    encoded = encode_for_rm(scorer.spec, scorer.tokenizer, PROMPTS, STORIES)
    with torch.inference_mode():
        want = [by_hand(input_ids=torch.tensor([e])).logits[0, 0].item() for e in encoded]
    assert scorer.score(PROMPTS, STORIES) == pytest.approx(want, abs=1e-4)
    assert staged[0]["score.weight"].tolist() != staged[1]["score.weight"].tolist()  # the members differ
