"""Help that teaches: `rlcw <command> --help` prints each key's comment and documents the dict sections;
`rlcw configs` lists and copies the shipped configs."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rlcw import cli
from rlcw.config_help import describe, field_comments
from rlcw.errors import RlcwError


@dataclass
class _Base:
    # the comment above a field
    # goes on over two lines
    steps: int = 3
    name: str = "x"  # the comment beside a field


@dataclass
class _Child(_Base):
    rules: dict[str, float] = field(default_factory=dict)  # stat -> threshold
    plain: bool = False


def test_field_comments_read_the_lines_above_and_beside():
    assert field_comments(_Base) == {
        "steps": "the comment above a field goes on over two lines",
        "name": "the comment beside a field",
    }


def test_describe_prints_comments_of_base_classes_and_dict_section_docs():
    text = describe(_Child, {"rules": "max_<stat> -> threshold"})
    assert "  steps: int = 3  # the comment above a field goes on over two lines" in text
    assert "  name: str = 'x'  # the comment beside a field" in text
    assert "  rules: dict = {}  # stat -> threshold\n      max_<stat> -> threshold" in text
    assert "  plain: bool = False\n" in text + "\n"


def test_grpo_help_shows_comments_reward_types_monitor_keys_and_source_keys(capsys):
    assert cli.run(["grpo", "--help"]) == 0
    out = capsys.readouterr().out
    assert "train.resume: str = 'false'  # false | true" in out
    for line in ("length_range: clip=2.0, miss=0.0", "scale: 0 inside the prompt's word range", "bt: rm_path"):
        assert line in out
    assert "stats: words_mean" in out and "style: tmas | wp" in out


def test_configs_lists_with_first_comment_and_copies(tmp_path, capsys):
    assert cli.run(["configs", "grpo"]) == 0
    out = capsys.readouterr().out
    assert "grpo/cpu.yaml" in out and "GRPO on the embedded model" in out and "ppo/" not in out
    assert cli.run(["configs", "--copy", "grpo/cpu", str(tmp_path)]) == 0
    assert (tmp_path / "cpu.yaml").read_text().startswith("# GRPO on the embedded model")
    with pytest.raises(RlcwError, match="the destination exists"):
        cli.run(["configs", "--copy", "grpo/cpu.yaml", str(tmp_path / "cpu.yaml")])
    with pytest.raises(RlcwError, match="did you mean grpo/cpu.yaml"):
        cli.run(["configs", "--copy", "grpo/cpuu", str(tmp_path / "x.yaml")])
    with pytest.raises(RlcwError, match="did you mean grpo"):
        cli.run(["configs", "gpro"])


def test_static_keys_match_the_dataclasses_of_every_command():
    import importlib

    from rlcw.config import flat_keys
    from rlcw.config_static import static_keys

    for name, (module, cls_name, _) in cli.COMMANDS.items():
        if cls_name is None or not cli.is_built(name):
            continue
        keys = static_keys(module, cls_name)
        assert keys is not None, f"rlcw {name}: its config source cannot be followed (see rlcw.config_static)"
        real = set(flat_keys(getattr(importlib.import_module(module), cls_name)))
        assert {k for k, section in keys.items() if not section} == real, name


def test_static_retired_keys_match_the_dataclasses_of_every_command():
    """The retired keys the CLI answers before the recipe's imports are the ones `load_config` answers after."""
    import importlib

    from rlcw.config import retired_keys
    from rlcw.config_static import static_retired_keys

    for name, (module, cls_name, _) in cli.COMMANDS.items():
        if cls_name is None or not cli.is_built(name):
            continue
        real = retired_keys(getattr(importlib.import_module(module), cls_name))
        assert static_retired_keys(module, cls_name) == real, name
    assert "grpo.train.fast_rollout" in static_retired_keys("rlcw.recipes.quickstart", "QuickstartConfig")


def test_a_key_typo_is_answered_before_torch_is_imported(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom rlcw import cli\nfrom rlcw.errors import RlcwError\n"
        "try:\n    cli.run(['grpo', '--config', 'configs/grpo/cpu.yaml', 'train.lr=1e-5'])\n"
        "except RlcwError as e:\n    print(e)\nprint('torch' in sys.modules, 'trl' in sys.modules)\n"
    )
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120).stdout
    assert "did you mean 'train.learning_rate'" in out and out.strip().endswith("False False")
