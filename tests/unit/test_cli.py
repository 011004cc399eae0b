"""The `rlcw` command line: usage, command look-up, user errors exit 2."""

from __future__ import annotations

import importlib

import pytest

from rlcw.argv import split_args
from rlcw.cli import COMMANDS, is_built, main, planned, run
from rlcw.errors import RlcwError


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["help"]])
def test_help_lists_every_command(argv, capsys):
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rlcw")
    for name, (_, _, text) in COMMANDS.items():
        if is_built(name):
            assert f"  {name} " in out
            assert text in out
        else:
            assert name in out.split("planned (not built yet):")[1]


def test_unknown_command_suggests_the_closest():
    with pytest.raises(RlcwError) as info:
        run(["grop"])
    assert "unknown command 'grop'" in str(info.value)
    assert "grpo" in str(info.value).split("hint:")[1]


def test_unknown_command_without_close_match():
    with pytest.raises(RlcwError) as info:
        run(["zzzzzz"])
    assert "rlcw --help" in str(info.value)


@pytest.mark.parametrize("name", ["judge", "ppo", "summarize"])
def test_planned_command_is_not_built_yet(name, monkeypatch):
    module, cls_name, text = COMMANDS[name]
    monkeypatch.setitem(COMMANDS, name, ("rlcw.recipes._no_such_module", cls_name, text))
    assert name in planned()
    with pytest.raises(RlcwError) as info:
        run([name])
    assert "not built yet" in str(info.value)
    assert name in str(info.value)


def test_main_unknown_command_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["grop"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("rlcw: error:") and "grop" in err
    assert "Traceback" not in err


def test_main_help_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0


def test_main_bad_key_exits_2_and_names_the_key(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train-rm", "nosuch.key=1"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert "unknown config key 'nosuch.key'" in captured.err
    assert "command line" in captured.err
    assert captured.out == ""


def test_main_wrong_type_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train-rm", "train.max_steps=many"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "train.max_steps" in err and "int" in err


def test_main_missing_config_file_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["train-rm", "--config", str(tmp_path / "nope.yaml")])
    assert info.value.code == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_command_help_lists_keys(capsys):
    assert run(["train-rm", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rlcw train-rm:")
    for key in ("train.learning_rate", "train.max_steps", "rm.max_length", "data.train_file", "model.name"):
        assert f"  {key}:" in out


def test_split_args():
    split = split_args
    assert split(["--config", "c.yaml", "a=1", "b.c=2"]) == ("c.yaml", ["a=1", "b.c=2"])
    assert split(["--config=c.yaml", "a=1"]) == ("c.yaml", ["a=1"])
    assert split([]) == (None, [])
    with pytest.raises(RlcwError, match="needs a file"):
        split(["--config"])
    with pytest.raises(RlcwError, match="unknown option '--verbose'"):
        split(["--verbose"])


def test_commands_table_is_well_formed():
    for name, (module_name, cls_name, text) in COMMANDS.items():
        assert module_name == "rlcw.recipes." + name.replace("-", "_") and text
        if not is_built(name):
            continue
        module = importlib.import_module(module_name)
        if cls_name is None:
            assert callable(module.cli), name
        else:
            assert cls_name.endswith("Config") and hasattr(module, cls_name) and callable(module.main), name


def test_help_into_a_closed_pipe_ends_quietly():
    """`rlcw ppo --help | head -3`: the reader leaves before the help is written; no traceback (exit 141, as a
    command killed by SIGPIPE)."""
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "rlcw", "ppo", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141
    assert err == ""
