"""dpo on the tiny policy with hand-written pairs: checkpoints, DPO metrics, the policy moving toward
`chosen` (log-probs computed here, not read from TRL's logs), resume, full fine-tuning, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.models import load_causal_lm, load_tokenizer

SYSTEM = "Write a story."
CHOSEN = "The fox sang to the moon."  # every pair prefers this one short story
REJECTED = [
    "Rain fell on the grey town all day.",
    "A ship left the harbour at dawn.",
    "Nobody answered the door.",
    "The clock stopped at noon.",
    "Snow covered the empty road.",
    "A dog barked twice and slept.",
    "The baker burnt the bread again.",
    "Wind shook the old barn.",
]


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("dpo-pairs")
    train = [{"prompt": f"A story about thing {i}.", "chosen": CHOSEN, "rejected": r} for i, r in enumerate(REJECTED)]
    held = [
        {"prompt": "A story about a lake.", "chosen": CHOSEN, "rejected": "The lake froze over."},
        {"prompt": "A story about a king.", "chosen": CHOSEN, "rejected": "The king lost his crown."},
    ]
    return {"train": _write(d / "train.jsonl", train), "eval": _write(d / "eval.jsonl", held), "pairs": train}


def _overrides(root, name: str, model, files: dict, *extra: str) -> list[str]:
    return [
        f"output_dir={root}",
        f"run_name={name}",
        f"model.name={model}",
        f"model.system_prompt={SYSTEM}",
        f"data.train_file={files['train']}",
        "train.batch_size=4",
        "train.max_length=64",
        "train.learning_rate=1e-2",
        "train.save_steps=2",
        "lora.r=4",
        "eval.every_steps=0",
        *extra,
    ]


@pytest.fixture(scope="module")
def dpo_run(runs_root, rm_run, tiny_model_dir, pair_files):
    from rlcw.recipes.dpo import DPORecipeConfig, main

    return main(
        load_config(
            DPORecipeConfig,
            None,
            _overrides(
                runs_root,
                "dpo",
                tiny_model_dir,
                pair_files,
                "train.max_steps=4",
                f"data.eval_file={pair_files['eval']}",
                "eval.every_steps=2",
                "eval.num_prompts=2",
                "eval.max_new_tokens=8",
                f"eval.evaluators.rm.rm_path={rm_run['artifacts']['model']}",
            ),
        )
    )


def _margins(model, tok, pairs: list[dict]) -> list[float]:
    """log p(chosen | prompt) - log p(rejected | prompt) per pair, over the assistant turn's tokens."""
    out = []
    for p in pairs:
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p["prompt"]}]
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        logps = []
        for text in (p["chosen"], p["rejected"]):
            full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": text}], tokenize=False)
            assert full.startswith(prompt)
            p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([p_ids + tok(full[len(prompt) :], add_special_tokens=False)["input_ids"]])
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            targets = ids[0, 1:]
            logps.append(lp[torch.arange(len(targets)), targets][len(p_ids) - 1 :].sum().item())
        out.append(logps[0] - logps[1])
    return out


def test_dpo_checkpoints_load_and_metrics_hold_dpo_keys(dpo_run):
    run = Path(dpo_run["artifacts"]["policy"]).parent.parent
    assert dpo_run["status"] == "completed" and dpo_run["metrics"]["train/steps"] == 4
    for name in ("checkpoint-2", "checkpoint-4", "final"):
        model = load_causal_lm(str(run / "checkpoints" / name))
        assert type(model).__name__.startswith("Peft"), name
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "rewards/margins" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert {
        "loss",
        "rewards/chosen",
        "rewards/rejected",
        "rewards/accuracies",
        "logps/chosen",
        "logps/rejected",
    } <= set(train[0])
    assert [r["step"] for r in rows if "eval_loss" in r] == [2, 4]  # held-out pairs every eval.every_steps
    assert [r["step"] for r in rows if "eval/rm/score" in r] == [0, 2, 4]  # sampled held-out prompts
    m = dpo_run["metrics"]
    assert {"train/loss", "train/reward_accuracy", "eval_pairs/reward_accuracy", "eval/length/mean_words"} <= set(m)
    assert (run / "plots" / "dpo.png").is_file() and "dpo.png" in (run / "report.md").read_text()


def test_dpo_moves_the_policy_toward_chosen(dpo_run, tiny_model_dir, pair_files):
    tok = load_tokenizer(str(tiny_model_dir))
    before = _margins(load_causal_lm(str(tiny_model_dir)).eval(), tok, pair_files["pairs"])
    after = _margins(load_causal_lm(dpo_run["artifacts"]["policy"], merge_lora=True).eval(), tok, pair_files["pairs"])
    gains = [a - b for a, b in zip(after, before, strict=False)]
    # 4 steps at lr 1e-2 on one repeated chosen story: every pair's margin must grow by nats, not noise
    print("GAINS", gains)
    assert min(gains) > 1.0, gains


def test_dpo_resumes_from_the_newest_checkpoint_and_trains_fully(runs_root, tiny_model_dir, pair_files):
    from rlcw.recipes.dpo import DPORecipeConfig, main

    args = _overrides(runs_root, "dpo_resume", tiny_model_dir, pair_files, "lora.enabled=false", "data.max_pairs=4")
    first = main(load_config(DPORecipeConfig, None, args + ["train.max_steps=2"]))
    assert first["metrics"]["train/steps"] == 2 and (Path(first["artifacts"]["policy"]) / "config.json").is_file()
    resumed = main(load_config(DPORecipeConfig, None, args + ["train.max_steps=3", "train.resume=true"]))
    assert resumed["status"] == "completed" and resumed["metrics"]["train/steps"] == 3
    rows = [json.loads(x) for x in (runs_root / "dpo_resume" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "rewards/margins" in r] == [1, 2, 3]  # steps 1-2 not re-run


def test_dpo_bad_input_names_file_and_row(runs_root, tiny_model_dir, tmp_path, pair_files):
    from rlcw.recipes.dpo import DPORecipeConfig, main

    empty = _write(tmp_path / "empty.jsonl", [])
    with pytest.raises(RlcwError, match="empty") as err:
        main(load_config(DPORecipeConfig, None, _overrides(runs_root, "dpo_bad", tiny_model_dir, {"train": empty})))
    assert "empty.jsonl" in str(err.value)
    bad = _write(
        tmp_path / "bad.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b"}, {"prompt": "p", "chosen": "a"}]
    )
    with pytest.raises(RlcwError, match="rejected") as err:
        main(load_config(DPORecipeConfig, None, _overrides(runs_root, "dpo_bad", tiny_model_dir, {"train": bad})))
    assert "bad.jsonl:2" in str(err.value)
    assert not (runs_root / "dpo_bad").exists()  # pair files are read before the run folder is written
    with pytest.raises(RlcwError, match="train.beta"):
        main(
            load_config(
                DPORecipeConfig, None, _overrides(runs_root, "dpo_bad", tiny_model_dir, pair_files, "train.beta=0")
            )
        )
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(RlcwError, match="not found"):
        main(load_config(DPORecipeConfig, None, _overrides(runs_root, "dpo_bad", tiny_model_dir, {"train": missing})))
