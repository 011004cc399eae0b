"""Every late failure a newcomer meets, in one table: each case runs `rlcw <command>` as the CLI does and
must exit 2 with the named error, leaving NO run folder behind (nothing under the output_dir).

Checks run before the run folder is written (rewards, RM folders, prompt/pair/story files, resume targets,
judge servers); a user error that can only show after loading (a chat template file, a model folder) is
raised inside the run and the folder it created is removed (rlcw.recipes.common.stage_run).

| case | command | bad input | named error |
|---|---|---|---|
| no_rm_yet | grpo | configs/grpo/cpu.yaml before any RM is trained | reward.specs.rm.rm_path: no reward model |
| bad_python_target | grpo | `python` reward whose module does not import | reward.specs.vocab: cannot import module |
| python_target_not_callable | grpo | `python` reward naming a constant | is not callable |
| reward_option_typo | grpo | reward.specs.length_range.mis=1.0 | unknown option 'mis' |
| nan_weight | grpo | reward.specs.length_range.weight=nan | must be a finite number |
| text_weight | grpo | reward.specs.length_range.weight=heavy | weight must be a finite number |
| resume_missing_folder | grpo | train.resume=true, no such run | no complete checkpoint |
| missing_chat_template | grpo | model.chat_template that does not exist (found after the tokenizer loads) | chat template file not found |
| remote_reward_down | grpo | a `remote` reward whose server is not running | cannot reach the reward server |
| grpo_past_context | grpo | train.max_completion_length=8190 (prompt + cap past the 8192-token window) | context window |
| generate_past_context | generate | sampling.max_new_tokens=8190 | context window |
| ppo_no_rm | ppo | configs/ppo/cpu.yaml before any RM is trained | no reward model |
| dpo_missing_pairs | dpo | data.train_file that does not exist | not found |
| dpo_resume_missing | dpo | train.resume=true, no such run | no complete checkpoint |
| train_rm_resume_missing | train-rm | train.resume=true, no such run | no complete checkpoint |
| eval_rm_missing_rm | eval-rm | scorer.path that does not exist | rlcw_rm.json |
| judge_unreachable | judge | client.base_url with nothing listening | cannot reach the judge server |
| judge_timeout | judge | a server that accepts and never answers | did not answer within |
| judge_negative_timeout | judge | client.timeout_s=-5 | client.timeout_s must be >= |
| judge_missing_stories | judge | data.stories naming a missing file | not found |
| judge_one_system | judge | a pairwise protocol over the stories of one system (found before the server is asked) | need at least two systems |
| judge_script_missing | judge | configs/judge/scripted.yaml run from another folder (its relative client.script) | client.script: file not found |
| judge_template_typo | judge | template=litbnech (found after the reply cache opens: the empty cache goes too) | unknown judge template |
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from rlcw import cli

ROOT = Path(__file__).resolve().parents[2]
GRPO = ["--config", str(ROOT / "configs/grpo/cpu.yaml")]
NO_RM = ["reward.specs.rm.weight=0"]  # cases about another reward: the bt term is not what fails


def _stories(tmp: Path) -> list[str]:
    paths = []
    for name in ("a", "b"):
        row = {"id": "p1", "prompt": "Write a story.", "story": f"Story {name}.", "system": name}
        path = tmp / f"{name}.jsonl"
        path.write_text(json.dumps(row) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def _pairs(tmp: Path) -> str:
    row = {"prompt": "Write a story.", "chosen": "A story that ends.", "rejected": "A story that"}
    path = tmp / "pairs.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = {
    "no_rm_yet": (lambda t, out: ["grpo", *GRPO, f"reward.rm_path={t}/no_rm"], "no reward model"),
    "bad_python_target": (
        lambda t, out: ["grpo", *GRPO, *NO_RM, "reward.specs.vocab={type: python, target: 'no_such_mod:score'}"],
        "reward.specs.vocab: cannot import module 'no_such_mod'",
    ),
    "python_target_not_callable": (
        lambda t, out: ["grpo", *GRPO, *NO_RM, "reward.specs.vocab={type: python, target: 'math:pi'}"],
        "is not callable",
    ),
    "reward_option_typo": (
        lambda t, out: ["grpo", *GRPO, *NO_RM, "reward.specs.length_range.mis=1.0"],
        "unknown option 'mis'",
    ),
    "nan_weight": (lambda t, out: ["grpo", *GRPO, *NO_RM, "reward.specs.length_range.weight=nan"], "finite number"),
    "text_weight": (
        lambda t, out: ["grpo", *GRPO, *NO_RM, "reward.specs.length_range.weight=heavy"],
        "weight must be a finite number",
    ),
    "resume_missing_folder": (
        lambda t, out: ["grpo", *GRPO, *NO_RM, "train.resume=true"],
        "no complete checkpoint",
    ),
    "missing_chat_template": (
        lambda t, out: ["grpo", *GRPO, *NO_RM, f"model.chat_template={t}/none.jinja", "train.report_to=none"],
        "chat template file not found",
    ),
    "remote_reward_down": (
        lambda t, out: [
            "grpo",
            *GRPO,
            *NO_RM,
            f"reward.specs.far={{type: remote, urls: ['http://127.0.0.1:{_free_port()}']}}",
        ],
        "cannot reach the reward server",
    ),
    "grpo_past_context": (
        lambda t, out: ["grpo", *GRPO, *NO_RM, "train.max_completion_length=8190", "data.fit_to_cap=ignore"],
        "+ train.max_completion_length=8190 = ",
    ),
    "generate_past_context": (
        lambda t, out: ["generate", "sampling.max_new_tokens=8190"],
        "> 8192 (8 of 8 generation prompts do not fit the model's context window",
    ),
    "ppo_no_rm": (
        lambda t, out: ["ppo", "--config", str(ROOT / "configs/ppo/cpu.yaml"), f"reward.rm_path={t}/no_rm"],
        "no reward model",
    ),
    "dpo_missing_pairs": (
        lambda t, out: ["dpo", "--config", str(ROOT / "configs/dpo/cpu.yaml"), f"data.train_file={t}/none.jsonl"],
        "not found",
    ),
    "dpo_resume_missing": (
        lambda t, out: [
            "dpo",
            "--config",
            str(ROOT / "configs/dpo/cpu.yaml"),
            f"data.train_file={_pairs(t)}",
            "data.eval_file=null",
            "train.resume=true",
        ],
        "no complete checkpoint",
    ),
    "train_rm_resume_missing": (
        lambda t, out: [
            "train-rm",
            "--config",
            str(ROOT / "configs/train_rm/cpu.yaml"),
            f"data.train_file={_pairs(t)}",
            "data.eval_file=null",
            "train.resume=true",
        ],
        "no complete checkpoint",
    ),
    "eval_rm_missing_rm": (
        lambda t, out: [
            "eval-rm",
            "--config",
            str(ROOT / "configs/eval_rm/bt.yaml"),
            f"scorer.path={t}/no_rm",
            f"data.file={_pairs(t)}",
        ],
        "rlcw_rm.json",
    ),
    "judge_unreachable": (
        lambda t, out: [
            "judge",
            "--config",
            str(ROOT / "configs/judge/local_server.yaml"),
            f"client.base_url=http://127.0.0.1:{_free_port()}/v1",
            f"data.stories=[{','.join(_stories(t))}]",
        ],
        "cannot reach the judge server",
    ),
    "judge_timeout": (
        lambda t, out: [
            "judge",
            "--config",
            str(ROOT / "configs/judge/local_server.yaml"),
            f"client.base_url=http://127.0.0.1:{out['port']}/v1",
            "client.timeout_s=0.5",
            f"data.stories=[{','.join(_stories(t))}]",
        ],
        "did not answer within",
    ),
    "judge_negative_timeout": (
        lambda t, out: [
            "judge",
            "--config",
            str(ROOT / "configs/judge/local_server.yaml"),
            "client.timeout_s=-5",
            f"data.stories=[{','.join(_stories(t))}]",
        ],
        "client.timeout_s must be >=",
    ),
    "judge_missing_stories": (
        lambda t, out: [
            "judge",
            "--config",
            str(ROOT / "configs/judge/local_server.yaml"),
            f"data.stories=[{t}/a.jsonl,{t}/b.jsonl]",
        ],
        "not found",
    ),
    "judge_one_system": (
        lambda t, out: [
            "judge",
            "--config",
            str(ROOT / "configs/judge/local_server.yaml"),
            f"client.base_url=http://127.0.0.1:{_free_port()}/v1",
            f"data.stories=[{_stories(t)[0]}]",
        ],
        "need at least two systems",
    ),
    "judge_script_missing": (
        lambda t, out: [
            "judge",
            "--config",
            str(ROOT / "configs/judge/scripted.yaml"),
            f"data.stories=[{_stories(t)[0]}]",
        ],
        "client.script: file not found",
    ),
    "judge_template_typo": (
        lambda t, out: [
            "judge",
            "--config",
            str(ROOT / "configs/judge/scripted.yaml"),
            f"client.script={ROOT / 'configs/judge/scripted_replies.jsonl'}",
            "template=litbnech",
            f"data.stories=[{','.join(_stories(t))}]",
        ],
        "unknown judge template 'litbnech'",
    ),
}


def test_the_table_lists_every_case():
    rows = [line.split("|")[1].strip() for line in __doc__.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == list(CASES)
    assert len(CASES) >= 12


@pytest.fixture
def silent_server():
    """A socket that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


@pytest.mark.parametrize("case", list(CASES))
def test_late_failure_exits_2_and_leaves_no_run_folder(case, tmp_path, silent_server, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative defaults (runs/train_rm/model, runs/build_pairs/...) point at nothing
    make_argv, expected = CASES[case]
    inputs, out = tmp_path / "inputs", tmp_path / "runs"
    inputs.mkdir()
    argv = make_argv(inputs, {"port": silent_server})
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, f"output_dir={out}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert expected in err, err
    assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.rglob("*"))
