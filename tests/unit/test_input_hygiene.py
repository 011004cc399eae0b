"""Bad input never silently changes a run: byte-order marks, duplicate ids, non-finite or mistyped numbers,
YAML tabs, key aliases, TRL-style flags, dropped rows named by file:line (rows of tests/unit/test_bad_inputs.py)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from rlcw.argv import split_args
from rlcw.config import load_config
from rlcw.data.litbench import read_posts
from rlcw.data.prompts import load_prompt_column, load_prompts
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file
from rlcw.io import read_jsonl, read_table
from rlcw.rewards.factory import build_rewards, check_rewards

BOM = "\ufeff"


@dataclass
class _Train:
    learning_rate: float = 1e-5
    max_steps: int = 20
    batch_size: int = 8
    resume: str = "false"
    epsilon: float = 0.2
    bf16: bool = False
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])


@dataclass
class _Cfg:
    train: _Train = field(default_factory=_Train)
    specs: dict[str, dict] = field(default_factory=dict)
    run_name: str = "r"


def test_a_bom_in_csv_and_jsonl_is_read_transparently(tmp_path):
    csv = tmp_path / "prompts.csv"
    csv.write_text(BOM + "id,prompt\np1,Write a story of about 100 words.\n", encoding="utf-8")
    rows = load_prompts(str(csv))
    assert [r["id"] for r in rows] == ["p1"] and rows[0]["max_words"] == 110
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(BOM + json.dumps({"id": "a"}) + "\n", encoding="utf-8")
    assert read_jsonl(jsonl) == [{"id": "a"}]
    assert list(read_table(csv)[0][1]) == ["id", "prompt"]


def test_a_bom_in_a_yaml_config_and_a_text_template_is_not_data(tmp_path):
    yaml = tmp_path / "c.yaml"
    yaml.write_text(BOM + "train:\n  max_steps: 3\n", encoding="utf-8")
    assert load_config(_Cfg, yaml).train.max_steps == 3
    jinja = tmp_path / "t.jinja"
    jinja.write_text(BOM + "{{ messages }}", encoding="utf-8")
    tok = SimpleNamespace(chat_template=None)
    apply_chat_template_file(tok, str(jinja))
    assert tok.chat_template == "{{ messages }}"


def test_duplicate_ids_in_a_prompts_file_name_both_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [{"id": "a", "prompt": "One."}, {"id": "b", "prompt": "Two."}, {"id": "a", "prompt": "Three."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(RlcwError, match=r"p.jsonl:3 field 'id'.*duplicate id 'a': also on line 1"):
        load_prompts(str(path))
    with pytest.raises(RlcwError, match="also on line 1"):
        load_prompt_column(str(path), id_column="id")


def test_non_finite_config_numbers_are_named_errors(tmp_path):
    with pytest.raises(RlcwError, match="'train.learning_rate' must be a finite number"):
        load_config(_Cfg, None, ["train.learning_rate=nan"])
    with pytest.raises(RlcwError, match="'specs.rm.weight' must be a finite number"):
        load_config(_Cfg, None, ["specs.rm={type: bt, weight: .inf}"])


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), "heavy", True, None])
def test_a_reward_weight_must_be_a_finite_number(weight):
    specs = {"len": {"type": "length_range", "weight": weight}}
    for check in (build_rewards, check_rewards):
        with pytest.raises(RlcwError, match=r"reward.specs.len.weight: weight must be a finite number"):
            check(specs, key="reward.specs")


def test_a_negative_judge_timeout_is_a_named_error():
    from rlcw.recipes.judge import JudgeConfig, validate

    cfg = load_config(JudgeConfig, None, ["data.stories=[a.jsonl,b.jsonl]", "client.timeout_s=-5"])
    with pytest.raises(RlcwError, match=r"client.timeout_s must be >= 0.001, got -5"):
        validate(cfg)


def test_a_yaml_tab_is_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n\tmax_steps: 3\n", encoding="utf-8")
    with pytest.raises(RlcwError, match="line 2 is indented with a tab"):
        load_config(_Cfg, path)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("train.lr", "train.learning_rate"), ("trainr.lr", "train.learning_rate"), ("train.steps", "train.max_steps")],
)
def test_close_key_hints_know_common_aliases(typo, meant):
    with pytest.raises(RlcwError, match=rf"did you mean '{meant}'"):
        load_config(_Cfg, None, [f"{typo}=1"])


def test_bs_alias_names_batch_size():
    with pytest.raises(RlcwError, match="did you mean 'train.batch_size'"):
        load_config(_Cfg, None, ["train.bs=4"])


def test_a_single_value_for_a_list_key_is_a_one_element_list(tmp_path):
    assert load_config(_Cfg, None, ["train.report_to=wandb"]).train.report_to == ["wandb"]
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  report_to: none\n", encoding="utf-8")
    assert load_config(_Cfg, path).train.report_to == ["none"]


def test_trl_style_flags_map_to_the_key_they_mean(capsys):
    keys = ["train.learning_rate", "train.max_steps", "train.batch_size", "eval.batch_size"]
    assert split_args(["--learning_rate", "1e-5", "--steps=3"], keys) == (
        None,
        ["train.learning_rate=1e-5", "train.max_steps=3"],
    )
    assert "--learning_rate read as train.learning_rate=1e-5" in capsys.readouterr().err
    with pytest.raises(RlcwError, match="train.batch_size, eval.batch_size"):
        split_args(["--batch_size", "4"], keys)


def test_a_positional_yaml_path_is_told_to_use_config():
    with pytest.raises(RlcwError, match="use --config configs/grpo/cpu.yaml"):
        split_args(["configs/grpo/cpu.yaml"], [])


@pytest.mark.parametrize(
    "args", [["--config", "a.yaml", "--config", "b.yaml"], ["--config=a.yaml", "x=1", "--config", "b.yaml"]]
)
def test_a_second_config_is_an_error_naming_both(args):
    assert split_args(["--config=a.yaml", "x=1"], ["x"]) == ("a.yaml", ["x=1"])
    with pytest.raises(RlcwError, match=r"--config given twice \(a.yaml and b.yaml\).*\n.*merge the two files"):
        split_args(args, ["x"])


def test_a_missing_config_file_suggests_the_closest(tmp_path):
    (tmp_path / "cpu.yaml").write_text("a: 1\n")
    with pytest.raises(RlcwError, match=r"did you mean .*cpu.yaml"):
        load_config(_Cfg, tmp_path / "cpuu.yaml")


def test_curation_names_the_first_dropped_rows_per_reason():
    good = {
        "prompt": "P",
        "chosen_story": "A story.",
        "rejected_story": "B story.",
        "chosen_timestamp": "2023-01-01",
        "rejected_timestamp": "2023-01-02",
        "chosen_upvotes": 5,
        "rejected_upvotes": 1,
    }
    rows = [(1, good), (2, {**good, "prompt": " "}), (3, {**good, "prompt": ""}), (4, good)]
    drops, examples = Counter(), {}
    read_posts(rows, "pairs.csv", "pairs", drops, examples=examples)
    assert drops["empty_prompt"] == 2
    assert examples["empty_prompt"] == ["pairs.csv:2", "pairs.csv:3"]


def test_inputs_cut_to_the_rm_max_length_are_counted_and_warned_once(tokenizer, capsys):
    from rlcw.rm.render import RMSpec, TruncationCount, encode_for_rm

    spec, counts = RMSpec(max_length=160), TruncationCount()
    stories = ["A short one.", "word " * 400, "Also short.", "tale " * 400]
    encode_for_rm(spec, tokenizer, ["Write."] * 4, stories, counts)
    encode_for_rm(spec, tokenizer, ["Write."] * 4, stories, counts)
    assert (counts.inputs, counts.truncated, counts.share) == (8, 4, 0.5)
    out = capsys.readouterr().out
    assert out.count("[rlcw] warning: 2 of 4 reward-model inputs (50%) were cut") == 1 and "max_length 160" in out


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_utf16_file_is_named_with_the_re_encoding_fix(tmp_path, suffix):
    path = tmp_path / f"pairs{suffix}"
    text = '{"id": "a"}\n' if suffix == ".jsonl" else "id,prompt\np1,Write.\n"
    path.write_bytes(text.encode("utf-16"))  # Python writes the BOM first, as Excel's "Unicode text" does
    with pytest.raises(RlcwError) as err:
        read_table(path)
    assert f"{path}:1" in str(err.value) and "UTF-16" in str(err.value) and "iconv -f utf-16" in str(err.value)


def test_a_semicolon_separated_csv_is_named_with_the_separator_fix(tmp_path):
    path = tmp_path / "prompts.csv"
    path.write_text("id;prompt\np1;Write a story.\n", encoding="utf-8")
    with pytest.raises(RlcwError) as err:
        load_prompts(str(path))
    assert f"{path}:1" in str(err.value) and "';'" in str(err.value) and "separator" in str(err.value)
    path.write_text("prompt\nWrite a story; then stop.\n", encoding="utf-8")  # a semicolon in the data is fine
    assert read_table(path)[0][1] == {"prompt": "Write a story; then stop."}


def test_a_list_given_with_commas_but_no_brackets_names_the_key_and_the_brackets(tmp_path):
    with pytest.raises(RlcwError) as err:
        load_config(_Cfg, None, ["train.report_to=tensorboard,wandb"])
    assert "'train.report_to' is a list" in str(err.value) and "train.report_to=[tensorboard,wandb]" in str(err.value)
    yaml = tmp_path / "c.yaml"
    yaml.write_text("train:\n  report_to: tensorboard, wandb\n", encoding="utf-8")
    with pytest.raises(RlcwError, match=str(yaml)):
        load_config(_Cfg, yaml)
    assert load_config(_Cfg, None, ["train.report_to=[tensorboard,wandb]"]).train.report_to == ["tensorboard", "wandb"]


def test_a_prompt_past_the_context_window_is_named_or_filtered(tokenizer, capsys):
    from rlcw.recipes.common.prompts import fit_to_context

    rows = [{"id": "short", "prompt": "Write a story.", "source": "p"}, {"id": "long", "prompt": "word " * 300}]
    args = (tokenizer, None, 100, 256)
    with pytest.raises(RlcwError) as err:
        fit_to_context(rows, *args, "warn", "training", "train.max_completion_length")
    text = str(err.value)
    assert "training prompt 'long'" in text and "+ train.max_completion_length=100 = " in text and "> 256" in text
    assert "data.fit_to_cap=filter" in text and "1 of 2 training prompts" in text
    assert fit_to_context(rows, *args, "filter", "training", "k") == rows[:1]
    assert "1 of 2 training prompts do not fit" in capsys.readouterr().out
    assert fit_to_context(rows, tokenizer, None, 100, None, "error", "training", "k") == rows  # no window known


def test_word_ranges_of_a_prompts_csv_are_numbers_and_a_bad_cell_names_the_prompts_file(tmp_path):
    csv_file = tmp_path / "p.csv"
    csv_file.write_text(
        "id,prompt,min_words,max_words\na,Write a story.,30,50\nb,Write another.,,\n", encoding="utf-8"
    )
    rows = load_prompts(str(csv_file))
    assert [(r["min_words"], r["max_words"]) for r in rows] == [(30, 50), (None, None)]
    bad = tmp_path / "p.jsonl"
    bad.write_text(json.dumps({"id": "a", "prompt": "Write.", "max_words": "about 300"}) + "\n", encoding="utf-8")
    with pytest.raises(RlcwError, match=r"p.jsonl:1 field 'max_words'.*: expected a whole number of words"):
        load_prompts(str(bad))
    bad.write_text(json.dumps({"id": "a", "prompt": "Write.", "min_words": 90, "max_words": 30}) + "\n")
    with pytest.raises(RlcwError, match=r"p.jsonl:1 field 'min_words'.*min_words 90 is larger than max_words 30"):
        load_prompts(str(bad))


def test_a_split_the_prompts_file_lacks_lists_the_splits_it_has():
    with pytest.raises(RlcwError, match="no prompts for split 'validation'") as err:
        load_prompts("bundled", split="validation")
    assert "the file's splits: eval, heldout, study, train" in str(err.value)


def test_a_home_folder_tilde_in_a_data_path_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "a", "prompt": "Write a story."}) + "\n", encoding="utf-8")
    assert [r["id"] for r in load_prompts("~/p.jsonl")] == ["a"]
