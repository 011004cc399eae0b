"""rlcw.tracking: report_to parsing, the secret check on what a tracker would receive, redaction of
command lines and git remotes, TensorBoard scalars on disk, and wandb in offline mode (no network)
when wandb is installed."""

from __future__ import annotations

import pytest

from rlcw.errors import RlcwError
from rlcw.tracking import Tracker, check_outgoing, parse_report_to, redact_argv, redact_url, run_metadata


def test_parse_report_to():
    assert parse_report_to("tensorboard,wandb") == ["tensorboard", "wandb"]
    assert parse_report_to(["wandb", "trackio", "wandb"]) == ["wandb", "trackio"]
    assert parse_report_to("none") == [] and parse_report_to(None) == [] and parse_report_to([]) == []
    with pytest.raises(RlcwError, match="unknown tracker 'mlflow'"):
        parse_report_to("tensorboard,mlflow")
    with pytest.raises(RlcwError, match="'none' cannot be combined"):
        parse_report_to(["none", "wandb"])


ENV = {
    "OPENAI_API_KEY": "sk-live-abcdefghijkl",
    "HF_TOKEN": "secret-hub-value",
    "HOME": "/root",
    "RLCW_RM_TOKEN": "tok123456",
}


@pytest.mark.parametrize(
    "payload,message",
    [
        ({"config": {"client": {"key": "sk-live-abcdefghijkl"}}}, "OPENAI_API_KEY"),  # an env secret's value
        ({"command": ["rlcw", "grpo", "hub.token=secret-hub-value"]}, "HF_TOKEN"),
        ({"note": "Authorization: Bearer tok123456"}, "RLCW_RM_TOKEN"),
        ({"x": "hf_" + "a" * 30}, "token-shaped"),  # no env var needed
        ({"x": ["ghp_" + "b" * 36]}, "token-shaped"),
        ({"git_remote": "https://user:pw12345@github.com/o/r.git"}, "user:password"),
        ({"sk-" + "c" * 20: 1}, "token-shaped"),  # keys are checked too
    ],
)
def test_check_outgoing_refuses_secrets(payload, message):
    with pytest.raises(RlcwError, match=message) as err:
        check_outgoing(payload, ENV)
    for value in ENV.values():
        assert value not in str(err.value)  # the error never repeats the secret


def test_check_outgoing_passes_ordinary_payloads():
    check_outgoing({"config": {"lr": 3e-4, "home": "/root", "model": "smollm2"}, "command": ["rlcw", "grpo"]}, ENV)


def test_redaction():
    assert redact_url("https://x-access-token:ghs_abc@github.com/o/r.git") == "https://github.com/o/r.git"
    assert redact_url("git@github.com:o/r.git") == "git@github.com:o/r.git"
    assert redact_argv(["rlcw", "serve-rm", "token=abc", "--api-key=zzz", "lr=1e-3"]) == [
        "rlcw",
        "serve-rm",
        "token=<redacted>",
        "--api-key=<redacted>",
        "lr=1e-3",
    ]
    assert run_metadata(["rlcw", "grpo", "hub.token=abc"])["command"] == ["rlcw", "grpo", "hub.token=<redacted>"]


def test_tensorboard_scalars_on_disk(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker("tensorboard", tmp_path, run_name="t", config={"lr": 1.0})
    tracker.log({"train/loss": 0.5, "note": "skipped", "flag": True}, step=1)
    tracker.log({"train/loss": 0.25}, step=2)
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["train/loss"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(1, 0.5), (2, 0.25)]


def test_tracker_refuses_a_config_holding_a_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "do-not-send-me")
    with pytest.raises(RlcwError, match="MY_SERVICE_TOKEN"):
        Tracker("tensorboard", tmp_path, run_name="t", config={"remote": {"token": "do-not-send-me"}})
    assert not (tmp_path / "tb").exists()  # nothing was started


def test_none_logs_nothing(tmp_path):
    tracker = Tracker("none", tmp_path, run_name="t")
    tracker.log({"a": 1.0}, step=0)
    tracker.close()
    assert list(tmp_path.iterdir()) == []


def test_wandb_offline_without_network(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # any network use would fail
    tracker = Tracker("wandb", tmp_path, run_name="offline-run", config={"lr": 0.1}, argv=["rlcw", "grpo", "k=v"])
    run = tracker._wandb
    tracker.log({"train/loss": 1.5}, step=0)
    tracker.log({"train/loss": 0.5}, step=1)
    assert run.settings.mode == "offline" and run.config["rlcw_meta"]["command"] == ["rlcw", "grpo", "k=v"]
    tracker.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), "the offline run file was written"
    assert wandb.run is None
