"""A newcomer's first commands: `--version`, `env`, `--help` and value errors answered before torch is imported,
numbers out of range refused before anything is imported or written, and `--check` (a dry run)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcw import __version__, cli
from rlcw.config import load_config
from rlcw.config_help import describe
from rlcw.config_static import static_doc, static_help
from rlcw.errors import RlcwError

ROOT = Path(__file__).resolve().parents[2]


def _child(code: str, **env: str) -> dict:
    """Run `code` in a fresh interpreter; it prints one JSON object, to which torch's presence is added."""
    script = f"import json, sys\nout = {{}}\n{code}\nout['torch'] = 'torch' in sys.modules\nprint(json.dumps(out))\n"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_version_prints_the_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"rlcw {__version__}"


def test_env_reports_versions_cpu_and_cache_without_importing_torch(tmp_path):
    code = (
        "import io, contextlib\nfrom rlcw import cli\nbuf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n    out['code'] = cli.run(['env'])\nout['text'] = buf.getvalue()\n"
    )
    out = _child(code, RLCW_CACHE=str(tmp_path / "cache"))
    text = out["text"]
    assert out["code"] == 0 and not out["torch"]
    assert f"- rlcw: {__version__}" in text
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "omegaconf"):
        assert f"- {name}: " in text
    assert "- CPU flags: avx2 " in text and "avx512f " in text and "amx_bf16 " in text
    assert f"- rlcw cache: {tmp_path / 'cache'} ($RLCW_CACHE)" in text
    assert "embedded model (smollm2-135m-instruct): not prepared" in text
    assert "- CUDA: " in text


def test_env_reads_isa_flags_and_the_model_from_cpuinfo():
    from rlcw.recipes.env import cpu_info

    sample = "processor : 0\nmodel name : Some EPYC\nflags : fpu sse avx2 fma\n\nprocessor : 1\nflags : fpu\n"
    model, flags = cpu_info(sample)
    assert model == "Some EPYC"
    assert flags == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False}


def test_env_is_in_the_command_table_and_takes_no_arguments():
    assert "env" in cli.COMMANDS and "  env " in cli._usage()
    with pytest.raises(RlcwError, match="takes no arguments"):
        cli.run(["env", "extra"])


def test_help_read_from_source_equals_the_imported_help_for_every_command():
    sections = cli.dict_sections()
    from rlcw.rewards.factory import describe_types

    assert sections["specs"] == describe_types()  # the reward signatures read from source match the real ones
    for name, (module_name, cls_name, _) in cli.COMMANDS.items():
        if cls_name is None or not cli.is_built(name):
            continue
        module = importlib.import_module(module_name)
        text = static_help(module_name, cls_name, sections)
        assert text is not None, f"rlcw {name}: a default cannot be read from source (rlcw.config_static)"
        assert text == describe(getattr(module, cls_name), sections), name
        assert static_doc(module_name) == module.__doc__, name


def test_help_and_value_errors_answer_before_torch_is_imported():
    code = (
        "import io, contextlib\nfrom rlcw import cli\nfrom rlcw.errors import RlcwError\nbuf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n    out['help'] = cli.run(['grpo', '--help'])\n"
        "out['text'] = buf.getvalue()\nout['errors'] = []\n"
        "for argv in (['grpo', 'train.max_steps=abc'], ['grpo', 'train.max_steps=0'], ['ppo', 'train.max_steps=-1'],"
        " ['rloo', 'train.num_generations=1'], ['dpo', 'train.max_steps=0'], ['train-rm', 'train.max_steps=0'],"
        " ['grpo', 'train.num_generations=0'], ['quickstart', 'grpo.train.max_steps=0'],"
        " ['grpo', 'train.learning_rate=-1e-5'], ['train-rm', 'train.learning_rate=-1'],"
        " ['ppo', 'train.learning_rate=-1e-5'], ['ppo', 'train.value_learning_rate=-1'],"
        " ['ppo', 'train.minibatch_size=0'], ['ppo', 'train.save_steps=-1'], ['grpo', 'train.batch_size=0'],"
        " ['grpo', 'eval.every_steps=-5'], ['ppo', 'train.temperature=0'], ['grpo', 'model.dtype=bf16'],"
        " ['grpo', 'train.lr_scheduler_type=cosin']):\n"
        "    try:\n        cli.run(argv)\n        out['errors'].append(None)\n"
        "    except RlcwError as exc:\n        out['errors'].append(str(exc))\n"
    )
    out = _child(code)
    assert not out["torch"]
    assert out["help"] == 0 and "train.max_steps: int = 20  # optimizer steps of the run" in out["text"]
    assert "bt: rm_path (default reward.rm_path)" in out["text"] and "stats: words_mean" in out["text"]
    wrong_type, *bounds = out["errors"]
    assert "wrong type for 'train.max_steps': expected int, got 'abc'" in wrong_type
    expected = [
        "train.max_steps must be at least 1, got 0",
        "train.max_steps must be at least 1, got -1",
        "train.num_generations must be at least 2, got 1: the leave-one-out baseline",
        "train.max_steps must be at least 1, got 0",
        "train.max_steps must be at least 1, got 0",
        "train.num_generations must be at least 2, got 0: GRPO compares",
        "grpo.train.max_steps must be at least 1, got 0",
        "train.learning_rate must be at least 0, got -1e-05",
        "train.learning_rate must be at least 0, got -1",
        "train.learning_rate must be at least 0, got -1e-05",
        "train.value_learning_rate must be at least 0, got -1",
        "train.minibatch_size must be at least 1, got 0",
        "train.save_steps must be at least 0, got -1",
        "train.batch_size must be at least 1, got 0",
        "eval.every_steps must be at least 0, got -5",
        "train.temperature must be above 0, got 0.0: log-probs divide by it",
        "unknown model.dtype 'bf16'\n  hint: did you mean 'bfloat16'?",
        "unknown train.lr_scheduler_type 'cosin'\n  hint: did you mean 'cosine'?",
    ]
    for message, text in zip(bounds, expected, strict=True):
        assert message is not None and text in message and "command line" in message and "hint:" in message


def test_the_lr_schedulers_a_config_accepts_are_those_of_transformers():
    from transformers.trainer_utils import SchedulerType

    from rlcw.recipes.common.trl_stage import LR_SCHEDULERS

    assert LR_SCHEDULERS == tuple(s.value for s in SchedulerType)


def test_a_yaml_value_out_of_range_names_the_file(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  max_steps: 0\n", encoding="utf-8")
    with pytest.raises(RlcwError, match=r"c.yaml: train.max_steps must be at least 1, got 0"):
        cli.run(["grpo", "--config", str(config)])


@pytest.mark.parametrize(
    "module, cls_name, override, message",
    [
        ("grpo", "GRPORecipeConfig", "train.max_steps=0", "train.max_steps must be at least 1"),
        ("grpo", "GRPORecipeConfig", "train.num_generations=1", "train.num_generations must be at least 2"),
        ("rloo", "RLOORecipeConfig", "train.num_generations=0", "train.num_generations must be at least 2"),
        ("ppo", "PPORecipeConfig", "train.max_steps=-2", "train.max_steps must be at least 1"),
        ("ppo", "PPORecipeConfig", "train.learning_rate=-1e-5", "train.learning_rate must be at least 0"),
        ("ppo", "PPORecipeConfig", "train.value_learning_rate=-1", "train.value_learning_rate must be at least 0"),
        ("ppo", "PPORecipeConfig", "train.micro_batch_size=0", "train.micro_batch_size must be at least 1"),
        ("ppo", "PPORecipeConfig", "train.ppo_epochs=0", "train.ppo_epochs must be at least 1"),
        ("ppo", "PPORecipeConfig", "train.temperature=0", "train.temperature must be above 0"),
        (
            "rloo",
            "RLOORecipeConfig",
            "train.max_completion_length=0",
            "train.max_completion_length must be at least 1",
        ),
        ("grpo", "GRPORecipeConfig", "train.save_steps=-1", "train.save_steps must be at least 0"),
        ("dpo", "DPORecipeConfig", "eval.every_steps=-1", "eval.every_steps must be at least 0"),
        ("dpo", "DPORecipeConfig", "model.dtype=fp16", r"unknown model.dtype 'fp16'"),
        ("dpo", "DPORecipeConfig", "train.max_steps=0", "train.max_steps must be at least 1"),
        ("train_rm", "TrainRMConfig", "train.max_steps=0", "train.max_steps must be at least 1"),
    ],
)
def test_load_config_holds_every_bounded_key(module, cls_name, override, message):
    cls = getattr(importlib.import_module(f"rlcw.recipes.{module}"), cls_name)
    with pytest.raises(RlcwError, match=message):
        load_config(cls, None, [override])


def test_plan_refuses_zero_gpus_per_node_before_loading_the_recipe():
    with pytest.raises(RlcwError, match="gpus_per_node must be at least 1, got 0"):
        cli.run(["plan", "--config", str(ROOT / "configs/grpo/cpu.yaml"), "plan.gpus_per_node=0"])


def test_check_validates_and_writes_nothing(tmp_path, capsys):
    from rlcw.rm.render import RMSpec, save_spec

    save_spec(RMSpec(), tmp_path / "rm")
    out_dir = tmp_path / "runs"
    args = [
        "--config",
        str(ROOT / "configs/grpo/cpu.yaml"),
        f"output_dir={out_dir}",
        f"reward.rm_path={tmp_path / 'rm'}",
    ]
    assert cli.run(["grpo", "--check", *args]) == 0
    out = capsys.readouterr().out
    assert "[rlcw] grpo: config OK" in out and str(out_dir / "grpo") in out
    assert "[rlcw] grpo: plan: " in out and "completions" in out
    assert not out_dir.exists()
    with pytest.raises(RlcwError, match="multiple of train.num_generations"):  # the recipe's validate()
        cli.run(["grpo", "--dry-run", *args, "train.batch_size=6"])
    with pytest.raises(RlcwError, match="no reward model"):  # a check main() makes before its folder
        cli.run(["grpo", "--check", *args[:-1], f"reward.rm_path={tmp_path / 'none'}"])
    assert not out_dir.exists()


def test_check_of_train_rm_names_a_missing_pairs_file(tmp_path):
    out_dir = tmp_path / "runs"
    args = [f"output_dir={out_dir}", f"data.train_file={tmp_path / 'train.jsonl'}", "data.eval_file=null"]
    with pytest.raises(RlcwError, match=r"data.train_file: preference pairs file not found: .*train.jsonl") as err:
        cli.run(["train-rm", "--check", *args])
    assert "rlcw build-pairs" in str(err.value)
    (tmp_path / "train.jsonl").write_text("{}\n")
    with pytest.raises(RlcwError, match="data.eval_file: preference pairs file not found: missing.csv"):
        cli.run(["train-rm", "--check", *args[:-1], "data.eval_file=missing.csv"])
    assert not out_dir.exists()


def test_a_pairs_folder_or_a_tab_separated_file_is_named_before_the_run(tmp_path):
    from rlcw.data.preferences import check_pairs_file

    (tmp_path / "pairs").mkdir()
    for name in ("eval", "train"):
        (tmp_path / "pairs" / f"{name}.jsonl").write_text("{}\n")
    with pytest.raises(RlcwError, match="data.train_file: a folder, not a preference pairs file") as err:
        check_pairs_file(str(tmp_path), "data.train_file")
    assert f"did you mean {tmp_path / 'pairs' / 'train.jsonl'}?" in str(err.value)
    (tmp_path / "pairs.tsv").write_text("prompt\tchosen\trejected\n")
    with pytest.raises(RlcwError, match="data.eval_file: unsupported file type '.tsv'") as err:
        check_pairs_file(str(tmp_path / "pairs.tsv"), "data.eval_file", optional=True)
    assert "save it as CSV (comma-separated)" in str(err.value)


def test_check_is_refused_by_commands_without_a_config():
    with pytest.raises(RlcwError, match="has no --check"):
        cli.run(["summarize", "--check", "runs"])


def test_the_resume_command_drops_resume_and_overwrite_in_every_spelling():
    args = ["--config", "c.yaml", "train.resume=false", "--overwrite", "true", "a=1", "--train.resume=true", "b=2"]
    from rlcw.interrupts import _without

    assert _without(args, ("train.resume", "overwrite")) == ["--config", "c.yaml", "a=1", "b=2"]
