"""`train.report_to` end to end on the tiny model: wandb (offline, no network) receives the same metrics as
metrics.jsonl from GRPO (TRL's metrics + the eval rows) and PPO (rlcw's loop), and no TensorBoard folder is
written unless asked for; `none` writes no tracker files at all (DPO)."""

import json
from pathlib import Path

import pytest

from rlcw.config import load_config


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))  # overridden by the Tracker's dir=<run>
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # any network use would fail


def wandb_history(run_dir: Path) -> list[dict]:
    """The history rows of the one offline run under `<run_dir>/wandb` (read from its .wandb record log)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, pos, buf, rows = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):  # LevelDB-log layout: 32 KiB blocks of (crc32, length, type) + payload chunks
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        buf, pos = buf + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # FULL or LAST chunk: one whole record
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


def jsonl(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_grpo_report_to_wandb_offline(offline_wandb, tiny_grpo_overrides):
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    cfg = load_config(
        GRPORecipeConfig,
        None,
        tiny_grpo_overrides(
            "grpo_wandb",
            "train.log_kl_every=0",
            "train.report_to=[wandb]",
            "eval.every_steps=1",
            "eval.num_prompts=2",
            "eval.max_new_tokens=8",
            "eval.evaluators={length: {}}",
        ),
    )
    run_dir = Path(main(cfg)["artifacts"]["metrics"]).parent
    history, logged = wandb_history(run_dir), jsonl(run_dir)
    train = next(r for r in logged if "reward" in r)
    sent = next(h for h in history if "train/reward" in h)  # TRL's keys in HF's layout (train/...)
    assert sent["_step"] == train["step"] == 1 and sent["train/reward"] == pytest.approx(train["reward"])
    evals = {h["_step"]: h["eval/length/mean_words"] for h in history if "eval/length/mean_words" in h}
    assert evals == {
        r["step"]: pytest.approx(r["eval/length/mean_words"]) for r in logged if "eval/length/mean_words" in r
    }
    assert sorted(evals) == [0, 1]  # the baseline and the step-1 evaluation
    assert not (run_dir / "tensorboard").exists()  # TRL's own TensorBoard callback is off (report_to="none")


def test_ppo_report_to_wandb_offline(offline_wandb, runs_root, rm_run, tiny_model_dir):
    from rlcw.recipes.ppo import PPORecipeConfig, main

    cfg = load_config(
        PPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=ppo_wandb",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={rm_run['artifacts']['model']}",
            "train.max_steps=1",
            "train.batch_size=2",
            "train.minibatch_size=2",
            "train.micro_batch_size=2",
            "train.ppo_epochs=1",
            "train.max_new_tokens=8",
            "train.report_to=[wandb]",
            "eval.every_steps=0",
            "lora.r=4",
            "value.lora.r=4",
            "data.max_train_prompts=4",
        ],
    )
    run_dir = Path(main(cfg)["artifacts"]["metrics"]).parent
    (train,) = [r for r in jsonl(run_dir) if "reward" in r]
    (sent,) = [h for h in wandb_history(run_dir) if "reward" in h]  # rlcw's own loop: its keys as logged
    assert sent["_step"] == 1
    for key in ("reward", "kl", "ppo/policy_loss", "completions/mean_length"):
        assert sent[key] == pytest.approx(train[key])
    assert not (run_dir / "tensorboard").exists()


def test_dpo_report_to_none_writes_no_tracker_files(tmp_path, runs_root, tiny_model_dir):
    from rlcw.recipes.dpo import DPORecipeConfig, main

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps({"prompt": f"A story about thing {i}.", "chosen": "The fox sang.", "rejected": "fox fox fox"})
            + "\n"
            for i in range(4)
        )
    )

    cfg = load_config(
        DPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=dpo_none",
            f"model.name={tiny_model_dir}",
            f"data.train_file={pairs}",
            "train.max_steps=1",
            "train.batch_size=2",
            "train.max_length=64",
            "train.save_steps=0",
            "train.report_to=[none]",
            "eval.every_steps=0",
            "lora.r=4",
        ],
    )
    run_dir = Path(main(cfg)["artifacts"]["metrics"]).parent
    assert any("loss" in r for r in jsonl(run_dir))  # metrics.jsonl is written whatever report_to says
    assert not (run_dir / "tensorboard").exists() and not (run_dir / "wandb").exists()
    assert not list(run_dir.rglob("events.out.tfevents*"))  # nor HF's own TensorBoard callback anywhere
