"""scripts/uv_env.py (pip's configuration for uv), scripts/roofline.py's decode bound, hand-worked, and the benches'
quickstart sizes (scripts/quickstart_sizes.py), scripts/heldout_power.py's pairing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# what `pip config list` printed on a machine with local indexes, a wheel folder and a constraint file
PIP_CONFIG_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/other'
download.dest='/tmp/dl'
"""


def test_pip_config_becomes_uv_environment():
    uv_env = load("uv_env")
    options = uv_env.parse_pip_config(PIP_CONFIG_LIST)
    assert options["find-links"] == "/opt/wheels"  # the environment beats the file, as in pip
    assert "dest" not in options  # another command's section
    lines = uv_env.uv_exports(options, environ={"SSL_CERT_FILE": "/mine.pem"})
    assert lines == [
        "export UV_EXTRA_INDEX_URL='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "export UV_FIND_LINKS=/opt/wheels",
        "export UV_CONSTRAINT=/etc/xdg/pip/constraints.txt",
        "export UV_INDEX_STRATEGY=unsafe-best-match",
    ]  # SSL_CERT_FILE already set: kept
    assert uv_env.uv_exports({"find-links": "/a /b"}, {}) == ["export UV_FIND_LINKS=/a,/b"]
    assert uv_env.uv_exports({}, {}) == []


def test_pip_config_line_without_a_scope_is_an_error_naming_the_line():
    uv_env = load("uv_env")
    with pytest.raises(ValueError, match="line 2"):
        uv_env.parse_pip_config("global.find-links='/a'\nnonsense\n")


def test_decode_bound_hand_worked():
    roofline = load("roofline")
    # 100M weights in bf16 = 200 MB a step; 20 GB/s -> 100 steps/s -> 8 rows: 800 tok/s; compute 1000 GFLOP/s / 0.2
    # GFLOP a token = 5000 tok/s: memory binds
    assert roofline.decode_bound(100e6, 8, "bf16", 20.0, 1000.0) == {
        "bound_tok_s": pytest.approx(800.0),
        "limit": "memory",
    }
    # 64 rows: 6400 tok/s of bandwidth against 5000 of compute: compute binds
    assert roofline.decode_bound(100e6, 64, "bf16", 20.0, 1000.0) == {
        "bound_tok_s": pytest.approx(5000.0),
        "limit": "compute",
    }
    assert roofline.decode_bound(100e6, 8, "fp32", 20.0, 1000.0)["bound_tok_s"] == pytest.approx(400.0)


def test_bench_sizes_follow_the_quickstart_config(tmp_path):
    import argparse

    import yaml

    sizes = load("quickstart_sizes")
    p = argparse.ArgumentParser()
    sizes.add_size_args(p, "--max-new-tokens")
    args = p.parse_args([])
    cfg = yaml.safe_load(sizes.QUICKSTART.read_text())["grpo"]
    train = cfg["train"]
    assert (args.batch, args.num_generations, args.max_new_tokens) == (
        train["batch_size"],
        train["num_generations"],
        train["max_completion_length"],
    )
    assert args.top_layers == cfg["lora"]["top_layers"]
    assert p.parse_args(["--top-layers", "all"]).top_layers is None
    assert p.parse_args(["--top-layers", "8"]).top_layers == 8

    edited = tmp_path / "cpu.yaml"
    edited.write_text(sizes.QUICKSTART.read_text().replace("num_generations: 4", "num_generations: 8"))
    assert sizes.grpo_sizes(edited)["num_generations"] == 8
    rollout = argparse.ArgumentParser()
    sizes.add_size_args(rollout, "--completion-tokens", lora=False)
    assert not hasattr(rollout.parse_args([]), "top_layers")


def test_heldout_power_pairs_a_runs_samples_by_prompt_and_sample(tmp_path):
    import json

    power = load("heldout_power")
    measures = {"score": 0.0, "words": 40, "finished": True, "in_range": True, "rep": 0.0}  # what every record holds
    held = tmp_path / "run" / "heldout"
    held.mkdir(parents=True)
    # start all 0; tuned 1 at (prompt 0, sample 1) and (prompt 1, both samples): changes [[0, 1], [1, 1]]
    for name, ones in (("start.jsonl", set()), ("tuned.jsonl", {(0, 1), (1, 0), (1, 1)})):
        rows = [
            {"prompt_index": p, "sample_index": k, "ended_short": (p, k) in ones, **measures}
            for k in (1, 0)
            for p in (1, 0)
        ]
        (held / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    change = power.paired_change(tmp_path / "run", "ended_short")
    assert change.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    assert (power.paired_change(held, "ended_short") == change).all()  # the heldout/ folder itself works too
    with pytest.raises(SystemExit, match="no 'slop' in its records"):
        power.paired_change(held, "slop")
    (held / "tuned.jsonl").unlink()
    with pytest.raises(SystemExit, match="tuned.jsonl: not found"):
        power.paired_change(held, "ended_short")
    assert power.design("64x2") == (64, 2)
