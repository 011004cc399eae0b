"""train-agents on a tiny student with a scripted teacher: normal path, bad teacher, adapters usable by generate."""

from __future__ import annotations

import json
import re

import pytest
import torch

from rlcw.config import load_config
from rlcw.data.records import read_stories
from rlcw.metrics.text import split_sentences
from rlcw.recipes import generate, train_agents

STORIES = [
    "\t".join(f"\tLine {k} of tale {i} begins here. It goes on a little.\n" for k in range(5)).replace("\t\t", "\t")
    for i in range(3)
]


def _write_tmas(path):
    rows = [
        {"example_id": f"example_{i:03d}", "inputs": f"Write a tale number {i} of about 40 words.", "targets": s}
        for i, s in enumerate(STORIES)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class Teacher:
    """Plans are fixed strings; the split quotes each line's first sentence (or, if bad, sentences not in the story)."""

    context_limit = None

    def __init__(self, bad: bool = False):
        self.bad, self.calls = bad, []

    def count_tokens(self, text):
        return len(text.split())

    def overhead_tokens(self):
        return 0

    def generate(self, agent, prompts, max_new_tokens, seed=0):
        self.calls.append(agent)
        if agent != "splitter":
            return [f"{agent} notes {i}" for i in range(len(prompts))]
        out = []
        for p in prompts:
            story = p.split("[User-Written Response] ", 1)[1]
            firsts = [split_sentences(line)[0] for line in story.split("\n") if line.strip()]
            if self.bad:
                firsts = [f"Something that never happened {k}." for k in range(5)]
            names = ["Exposition", "Rising Action", "Climax", "Falling Action", "Resolution"]
            out.append("\n".join(f"[{n}] {f}" for n, f in zip(names, firsts, strict=False)))
        return out


def _cfg(tmp_path, tiny_model_dir, name, agents, *extra):
    return load_config(
        train_agents.TrainAgentsConfig,
        None,
        [
            f"output_dir={tmp_path}",
            f"run_name={name}",
            f"model.name={tiny_model_dir}",
            "data.format=tmas",
            f"data.source={_write_tmas(tmp_path / 'tmas-train.jsonl')}",
            f"train.agents={agents}",
            "train.max_steps=2",
            "train.max_length=512",
            "train.learning_rate=1e-2",
            "lora.r=2",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("agents")
    return tmp, train_agents.main(_cfg(tmp, tiny_model_dir, "good", "conflict,climax"), teacher=Teacher())


def test_normal_path_match_rate_and_sft_data(good_run):
    tmp, summary = good_run
    m = summary["metrics"]
    assert m["split/verbatim_match_rate"] == 1.0 and m["split/exact"] == 3.0 and m["examples"] == 3.0
    sft = tmp / "good" / "sft"
    climax = [json.loads(x) for x in (sft / "climax.jsonl").read_text().splitlines()]
    assert (
        len(climax) == 3
        and climax[0]["completion"][0]["content"] == "Line 2 of tale 0 begins here. It goes on a little."
    )
    user = climax[0]["prompt"][-1]["content"]
    assert (
        "[Key Plot Points] plot notes 0" in user
        and "[Rising Action] Line 1 of tale 0" in user
        and "Line 2 of" not in user
    )
    assert all(
        (sft / f"{a}.jsonl").is_file()
        for a in ("conflict", "character", "setting", "plot", "exposition", "resolution")
    )


def test_adapters_changed_weights_and_generate_uses_them(good_run, tiny_model_dir, tokenizer):
    from rlcw.models import load_causal_lm

    tmp, summary = good_run
    adapters = tmp / "good" / "checkpoints" / "adapters"
    assert sorted(p.name for p in adapters.iterdir()) == ["climax", "conflict"]
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        tuned = load_causal_lm(str(adapters / "climax"), merge_lora=True)(input_ids=ids).logits
        base = load_causal_lm(str(tiny_model_dir))(input_ids=ids).logits
    assert not torch.allclose(tuned, base)
    cfg = load_config(
        generate.GenerateConfig,
        tmp / "good" / "adapters.yaml",
        [
            f"output_dir={tmp}",
            "run_name=gen_ft",
            f"model.name={tiny_model_dir}",
            "generator=agents_room",
            "variant=write",
            "data.format=tmas",
            f"data.source={tmp / 'tmas-train.jsonl'}",
            "data.split=train",
            "data.max_prompts=2",
            "agents.writing_tokens=4",
            "agents.context_tokens=1024",
        ],
    )
    assert set(cfg.agents.adapters) == {"conflict", "climax"}
    res = generate.main(cfg)
    recs = read_stories(res["artifacts"]["stories"])
    assert len(recs) == 2 and recs[0]["system"] == "ar_write" and recs[0]["meta"]["agent_calls"] == 5
    assert recs[0]["reference"] == STORIES[0].rstrip()


def test_bad_teacher_falls_back_and_says_so(tmp_path, tiny_model_dir):
    summary = train_agents.main(_cfg(tmp_path, tiny_model_dir, "bad", "resolution"), teacher=Teacher(bad=True))
    m = summary["metrics"]
    assert m["split/verbatim_match_rate"] == 0.0 and m["split/proportional"] == 3.0 and m["split/exact"] == 0.0
    rows = [json.loads(x) for x in (tmp_path / "bad" / "sft" / "splits.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {"proportional"} and all(r["verbatim"] == 0 for r in rows)
    res = [json.loads(x) for x in (tmp_path / "bad" / "sft" / "resolution.jsonl").read_text().splitlines()]
    assert res[0]["split_method"] == "proportional" and re.match(
        r"Line 4 of tale 0", res[0]["completion"][0]["content"]
    )


def test_resume_true_continues_each_agent_and_fails_without_a_checkpoint(tmp_path, tiny_model_dir):
    from rlcw.errors import RlcwError

    def cfg(*extra):
        return _cfg(tmp_path, tiny_model_dir, "resume", "climax", *extra)

    with pytest.raises(RlcwError, match="no complete checkpoint"):
        train_agents.main(cfg("train.resume=true"), teacher=Teacher())
    train_agents.main(cfg("train.save_steps=1"), teacher=Teacher())
    trainer = tmp_path / "resume" / "checkpoints" / "adapters" / "climax" / "trainer"
    assert {p.name for p in trainer.glob("checkpoint-*")} == {"checkpoint-1", "checkpoint-2"}
    first = (trainer / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns
    train_agents.main(cfg("train.save_steps=1", "train.max_steps=3", "train.resume=true"), teacher=Teacher())
    state = json.loads((trainer / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert (trainer / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns == first  # steps 1-2 not trained again
    assert train_agents.resume_points("auto", tmp_path / "none", ["climax"]) == {"climax": None}
