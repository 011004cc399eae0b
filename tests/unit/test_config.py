"""rlcw.config: defaults <- YAML <- key=value overrides, strict keys, typed values."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from rlcw.cli import COMMANDS
from rlcw.config import assign, flat_keys, load_config, parse_overrides, retired_keys, to_yaml, user_keys
from rlcw.config_help import describe
from rlcw.errors import RlcwError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@dataclass
class ModelSec:
    name: str = "tiny"
    dtype: str = "float32"


@dataclass
class TrainSec:
    lr: float = 0.001
    steps: int = 10
    opt: str | None = None


@dataclass
class ToyConfig:
    model: ModelSec = field(default_factory=ModelSec)
    train: TrainSec = field(default_factory=TrainSec)
    columns: dict[str, str] = field(default_factory=lambda: {"chosen": "chosen"})
    seed: int = 0


def _yaml(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_when_no_file_and_no_overrides():
    cfg = load_config(ToyConfig)
    assert isinstance(cfg, ToyConfig)
    assert cfg.model.name == "tiny"
    assert cfg.train.lr == 0.001
    assert cfg.train.steps == 10
    assert cfg.train.opt is None
    assert cfg.columns == {"chosen": "chosen"}
    assert cfg.seed == 0


def test_yaml_overrides_defaults_and_keeps_the_rest(tmp_path):
    path = _yaml(tmp_path, "model:\n  name: big\ntrain:\n  steps: 99\n  opt: adamw\ncolumns:\n  chosen: better\n")
    cfg = load_config(ToyConfig, path)
    assert cfg.model.name == "big"
    assert cfg.model.dtype == "float32"  # untouched default
    assert cfg.train.steps == 99
    assert cfg.train.opt == "adamw"
    assert cfg.train.lr == 0.001
    assert cfg.columns["chosen"] == "better"


def test_dotlist_overrides_take_precedence_over_yaml(tmp_path):
    path = _yaml(tmp_path, "train:\n  steps: 99\n  lr: 0.5\n")
    cfg = load_config(ToyConfig, path, ["train.steps=7", "model.name=cli"])
    assert cfg.train.steps == 7  # command line beats YAML
    assert cfg.train.lr == 0.5  # YAML beats default
    assert cfg.model.name == "cli"


def test_override_converts_string_values_to_field_types():
    cfg = load_config(ToyConfig, None, ["train.lr=2e-5", "train.steps=3", "train.opt=null"])
    assert cfg.train.lr == pytest.approx(2e-5)
    assert isinstance(cfg.train.steps, int) and cfg.train.steps == 3
    assert cfg.train.opt is None


def test_unknown_yaml_key_names_key_file_and_suggestion(tmp_path):
    path = _yaml(tmp_path, "train:\n  lrr: 0.1\n")
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, path)
    msg = str(info.value)
    assert "train.lrr" in msg
    assert str(path) in msg
    assert "'train.lr'" in msg  # the close suggestion


def test_unknown_top_level_yaml_key(tmp_path):
    path = _yaml(tmp_path, "sead: 3\n")
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, path)
    assert "sead" in str(info.value)
    assert "'seed'" in str(info.value)


def test_unknown_key_on_command_line_names_command_line():
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, None, ["model.nmae=x"])
    msg = str(info.value)
    assert "model.nmae" in msg
    assert "command line" in msg
    assert "'model.name'" in msg


def test_misspelt_section_names_full_key_and_suggests():
    from rlcw.recipes.train_rm import TrainRMConfig

    with pytest.raises(RlcwError) as info:
        load_config(TrainRMConfig, None, ["trian.max_steps=3"])
    msg = str(info.value)
    assert "'trian.max_steps'" in msg
    assert "did you mean 'train.max_steps'" in msg


def test_scalar_for_a_section_names_the_section():
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, None, ["train=5"])
    assert "'?'" not in str(info.value)
    assert "'train'" in str(info.value)


def test_wrong_type_names_key_and_expected_type():
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, None, ["train.steps=abc"])
    msg = str(info.value)
    assert "train.steps" in msg
    assert "int" in msg
    assert "command line" in msg


def test_wrong_type_in_yaml_names_file(tmp_path):
    path = _yaml(tmp_path, "train:\n  lr: fast\n")
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, path)
    msg = str(info.value)
    assert "train.lr" in msg and "float" in msg and str(path) in msg


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, missing)
    assert "not found" in str(info.value)
    assert str(missing) in str(info.value)


def test_yaml_top_level_must_be_a_mapping(tmp_path):
    path = _yaml(tmp_path, "- a\n- b\n")
    with pytest.raises(RlcwError, match="mapping"):
        load_config(ToyConfig, path)


def test_unparsable_yaml_is_an_rlcw_error(tmp_path):
    path = _yaml(tmp_path, "train: [unclosed\n")
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, path)
    assert str(path) in str(info.value)


def test_empty_yaml_gives_defaults(tmp_path):
    path = _yaml(tmp_path, "")
    assert load_config(ToyConfig, path) == ToyConfig()


@pytest.mark.parametrize("bad", ["train.steps", "=5", "noequals"])
def test_malformed_override_without_equals(bad):
    with pytest.raises(RlcwError) as info:
        load_config(ToyConfig, None, [bad])
    assert "key=value" in str(info.value)
    assert bad in str(info.value)


def test_parse_overrides_nests_dotted_keys():
    assert parse_overrides(["a.b=1", "a.c=x", "d=2"]) == {"a": {"b": 1, "c": "x"}, "d": 2}


def test_flat_keys_and_describe_list_dotted_keys_with_defaults():
    keys = flat_keys(ToyConfig)
    assert set(keys) == {"model.name", "model.dtype", "train.lr", "train.steps", "train.opt", "columns", "seed"}
    assert keys["train.steps"] == (int, 10)
    text = describe(ToyConfig)
    lines = text.splitlines()
    assert len(lines) == 7
    assert "  train.lr: float = 0.001" in lines
    assert "  train.steps: int = 10" in lines
    assert "  model.name: str = 'tiny'" in lines
    assert any(line.startswith("  train.opt:") and line.endswith("= None") for line in lines)


def test_to_yaml_round_trips_through_load_config(tmp_path):
    cfg = load_config(ToyConfig, None, ["train.steps=42", "train.opt=sgd", "model.name=x", "columns.rejected=worse"])
    path = _yaml(tmp_path, to_yaml(cfg), "resolved.yaml")
    again = load_config(ToyConfig, path)
    assert again == cfg
    assert again.columns == {"chosen": "chosen", "rejected": "worse"}


# --- the shipped configs/<command>/*.yaml load against their command's config class ---

# Folders of configs that are not rlcw command configs: launcher configs (accelerate, DeepSpeed
# JSON) and sweep files (checked by test_sweep against the schemas of the commands they run).
OTHER_FOLDERS = {"accelerate", "deepspeed", "sweeps"}


def _config_problems(root: Path) -> tuple[int, list[str]]:
    """Load every root/<command folder>/**/*.yaml against its command's config class."""
    files = sorted(root.glob("**/*.yaml")) if root.is_dir() else []
    problems = []
    for path in files:
        folder = path.relative_to(root).parts[0]
        if folder in OTHER_FOLDERS:
            continue
        command = folder.replace("_", "-")
        if command not in COMMANDS:
            problems.append(f"{path}: folder '{folder}' maps to no command in rlcw.cli.COMMANDS")
            continue
        module_name, cls_name, _ = COMMANDS[command]
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
            load_config(cls, path)
        except Exception as exc:  # noqa: BLE001 - collect every broken file
            problems.append(f"{path}: {type(exc).__name__}: {exc}")
    return len(files), problems


def test_shipped_configs_load_against_their_command():
    count, problems = _config_problems(CONFIGS)
    if count == 0:
        pytest.skip(f"no YAML under {CONFIGS} yet")
    assert not problems, "\n".join(problems)


def test_config_checker_catches_bad_files(tmp_path):
    """The checker above must be able to fail: a bad key, an unknown folder, a good file."""
    (tmp_path / "train_rm").mkdir()
    (tmp_path / "train_rm" / "good.yaml").write_text("train:\n  max_steps: 3\n", encoding="utf-8")
    (tmp_path / "train_rm" / "bad.yaml").write_text("train:\n  max_stepz: 3\n", encoding="utf-8")
    (tmp_path / "no_such_command").mkdir()
    (tmp_path / "no_such_command" / "x.yaml").write_text("a: 1\n", encoding="utf-8")
    count, problems = _config_problems(tmp_path)
    assert count == 3
    assert len(problems) == 2
    assert any("bad.yaml" in p and "train.max_stepz" in p for p in problems)
    assert any("no_such_command" in p for p in problems)


def test_user_keys_are_what_the_yaml_and_the_command_line_set(tmp_path):
    path = _yaml(tmp_path, "model:\n  name: big\ncolumns:\n  chosen: better\n")
    cfg = load_config(ToyConfig, path, ["train.steps=5", "seed=1"])
    assert user_keys(cfg) == {"model.name", "columns.chosen", "train.steps", "seed"}
    assert user_keys(load_config(ToyConfig)) == frozenset() == user_keys(ToyConfig())


def test_assign_never_changes_a_key_the_user_set():
    cfg = load_config(ToyConfig, None, ["train.steps=5", "model.dtype=bfloat16"])
    assign(cfg, "train.lr", 0.5)  # not set by the user: derived freely
    assign(cfg, "train.steps", 5)  # the user's own value: fine
    assert cfg.train.lr == 0.5 and cfg.train.steps == 5
    with pytest.raises(RlcwError, match="'train.steps' is set to 5 by you, but this command sets it to 7"):
        assign(cfg, "train.steps", 7)
    assert cfg.train.steps == 5
    assign(cfg, "model", ModelSec(name="other", dtype="bfloat16"))  # a section: only the user's leaves are checked
    assert cfg.model.name == "other"
    with pytest.raises(RlcwError, match="'model.dtype'"):
        assign(cfg, "model", ModelSec(name="other"))
    unset = ToyConfig()
    assign(unset, "train.steps", 7)  # built in code: nothing was set by a user
    assert unset.train.steps == 7


# --- retired keys: a config that still sets one fails with the key's new place and the file ---


@dataclass
class RenamedConfig:
    model: ModelSec = field(default_factory=ModelSec)
    train: TrainSec = field(default_factory=TrainSec)
    MOVED_KEYS: ClassVar[dict[str, str]] = {"train.learning_rate": "train.lr", "model.path": "model.name"}
    REMOVED_KEYS: ClassVar[dict[str, str]] = {"train.fused": "always on"}


@dataclass
class OuterConfig:
    inner: RenamedConfig = field(default_factory=RenamedConfig)


def test_retired_keys_walk_nested_sections_with_their_prefix():
    assert retired_keys(OuterConfig) == {
        "inner.train.learning_rate": "moved: use inner.train.lr",
        "inner.model.path": "moved: use inner.model.name",
        "inner.train.fused": "was removed: always on",
    }


def test_translate_retired_moves_nested_keys_to_their_new_places_and_drops_removed_ones():
    from rlcw.config import translate_retired

    old = {"inner.train.learning_rate": 0.1, "inner.train.fused": True, "inner.model.path": "x", "other": 1}
    assert translate_retired(old, OuterConfig) == {"inner.train.lr": 0.1, "inner.model.name": "x", "other": 1}


def test_every_moved_key_of_every_command_names_a_key_its_config_has():
    """A MOVED_KEYS entry reads as a move (`rlcw.config._moved_value`) to a key of today's config, so a stage folder
    written before the move can be compared with today's config (`rlcw.pipelines.stages.config_drift`)."""
    import importlib

    from rlcw import cli
    from rlcw.config import _MOVE, _retired_tables

    for name, (module, cls_name, _) in cli.COMMANDS.items():
        if cls_name is None or not cli.is_built(name):
            continue
        cls = getattr(importlib.import_module(module), cls_name)
        for prefix, moved, _ in _retired_tables(cls):
            for old, spec in moved.items():
                found = _MOVE.fullmatch(spec)
                assert found is not None and f"{prefix}{found['key']}" in flat_keys(cls), (name, old, spec)


def test_a_moved_key_in_a_yaml_file_names_the_key_its_new_place_and_the_file(tmp_path):
    path = _yaml(tmp_path, "train:\n  learning_rate: 0.1\n")
    with pytest.raises(RlcwError, match=r"config key 'train.learning_rate' moved: use train.lr") as err:
        load_config(RenamedConfig, path)
    assert err.value.where == str(path)
    with pytest.raises(RlcwError, match=r"'inner.train.fused' was removed: always on") as err:
        load_config(OuterConfig, _yaml(tmp_path, "inner: {train: {fused: true}}\n", "outer.yaml"))
    assert err.value.where == str(tmp_path / "outer.yaml")


def test_a_moved_key_on_the_command_line_names_the_key_and_its_new_place():
    with pytest.raises(RlcwError, match=r"config key 'model.path' moved: use model.name") as err:
        load_config(RenamedConfig, None, ["model.path=x"])
    assert err.value.where == "command line"
    with pytest.raises(RlcwError, match="unknown config key 'train.lrr'"):  # other unknown keys: as before
        load_config(RenamedConfig, None, ["train.lrr=1"])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("train.fast_rollout: true", "rollout.kind=fast"),
        ("train.use_vllm: true", "rollout.kind=vllm"),
        ("train.vllm_mode: server", "rollout.vllm.mode"),
        ("train.rollout_precision: bf16", "rollout.precision"),
        ("train.log_kl_to_start: false", "train.log_kl_every"),
        ("train.shared_prefix: false", "was removed"),
    ],
)
def test_grpo_yaml_and_dotlist_with_an_old_rollout_key_say_where_it_went(tmp_path, old, new):
    """The GRPO keys that moved to `rollout.*` (and the KL key merged into `train.log_kl_every`), in a YAML file
    and on the command line, through `load_config` and through the CLI's check before the recipe's imports."""
    from rlcw import cli
    from rlcw.recipes.grpo import GRPORecipeConfig

    section, _, leaf = old.partition(".")
    path = _yaml(tmp_path, f"{section}:\n  {leaf}\n")
    dotted = old.split(":")[0]
    override = f"{dotted}={old.split(': ')[1]}"
    for config_file, overrides, where in ((path, [], str(path)), (None, [override], "command line")):
        with pytest.raises(RlcwError, match=f"config key '{dotted}' .*{new}") as err:
            load_config(GRPORecipeConfig, config_file, overrides)
        assert err.value.where == where
        args = ["grpo", *(["--config", str(config_file)] if config_file else []), *overrides, "--check"]
        with pytest.raises(RlcwError, match=f"config key '{dotted}' .*{new}") as err:
            cli.run(args)
        assert err.value.where == where
