"""generate with TELL ME A STORY data and Agents' Room on the tiny model; the RL rollout hook."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from rlcw.agents.rl import AgentsRoomSettings, make_rollout_func, policy_stories, story_reward
from rlcw.agents.variants import AgentCaps
from rlcw.config import load_config
from rlcw.data.records import read_stories
from rlcw.errors import RlcwError
from rlcw.models import load_causal_lm
from rlcw.recipes import generate


@pytest.fixture(scope="module")
def tmas_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tmas") / "tell-me-a-story-validation.jsonl"
    rows = [
        {
            "example_id": f"example_{i:03d}",
            "inputs": f"Write a story about a lamp, between 30 and 40 words. Number {i}.",
            "targets": f"\tThe lamp {i} glowed.\n\tThen it went out.",
        }
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _gen(tmp_path, tiny_model_dir, tmas_file, *extra):
    return load_config(
        generate.GenerateConfig,
        None,
        [
            f"output_dir={tmp_path}",
            f"model.name={tiny_model_dir}",
            "data.format=tmas",
            f"data.source={tmas_file}",
            "data.split=validation",
            "data.max_prompts=2",
            *extra,
        ],
    )


def test_default_generator_on_tmas_keeps_reference_and_range(tmp_path, tiny_model_dir, tmas_file):
    res = generate.main(_gen(tmp_path, tiny_model_dir, tmas_file, "run_name=plain", "sampling.max_new_tokens=4"))
    recs = read_stories(res["artifacts"]["stories"])
    assert [r["id"] for r in recs] == ["validation/example_000", "validation/example_001"]
    assert recs[1]["reference"] == "\tThe lamp 1 glowed.\n\tThen it went out." and (
        recs[0]["min_words"],
        recs[0]["max_words"],
    ) == (30, 40)
    assert res["metrics"]["seconds_per_story"] > 0


def test_agents_room_plan_keeps_scratchpad(tmp_path, tiny_model_dir, tmas_file):
    res = generate.main(
        _gen(
            tmp_path,
            tiny_model_dir,
            tmas_file,
            "run_name=plan",
            "generator=agents_room",
            "variant=plan",
            "agents.planning_tokens=3",
            "agents.finalizer_tokens=5",
            "system=ar_plan_zs",
            "agents.context_tokens=1024",
        )
    )
    rec = read_stories(res["artifacts"]["stories"])[0]
    assert rec["system"] == "ar_plan_zs" and rec["meta"]["variant"] == "plan"
    assert [e["agent"] for e in rec["meta"]["scratchpad"]] == [
        "task",
        "conflict",
        "character",
        "setting",
        "plot",
        "finalizer",
    ]


def test_bad_generator_and_variant(tmp_path, tiny_model_dir, tmas_file):
    with pytest.raises(RlcwError, match="generator"):
        generate.main(_gen(tmp_path, tiny_model_dir, tmas_file, "run_name=x", "generator=magic"))
    with pytest.raises(RlcwError, match="variant"):
        generate.main(
            _gen(tmp_path, tiny_model_dir, tmas_file, "run_name=y", "generator=agents_room", "variant=outline")
        )


def test_rollout_func_trains_one_agent_and_rewards_the_whole_story(tiny_model_dir, tokenizer):
    model = load_causal_lm(str(tiny_model_dir))
    caps = AgentCaps(planning=2, writing=3)
    rollout = make_rollout_func(tokenizer, AgentsRoomSettings("write", "climax", caps=caps, context_tokens=1024))
    lamp, door = (
        [{"role": "user", "content": "Write about a lamp."}],
        [{"role": "user", "content": "Write about a door."}],
    )
    prompts = [lamp, lamp, door, door]  # TRL passes each prompt repeated num_generations (2) times
    out = rollout(prompts, SimpleNamespace(model=model, state=SimpleNamespace(global_step=0)))
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["story"]) == 4  # one per prompt entry
    assert all(1 <= len(c) <= 3 for c in out["completion_ids"])
    rendered = tokenizer.decode(out["prompt_ids"][2])
    assert "Climax" in rendered and "Write about a door." in rendered and "[Rising Action]" in rendered
    assert [e["agent"] for e in out["agents_room"][0]["scratchpad"]][1:] == [
        "exposition",
        "rising_action",
        "climax",
        "falling_action",
        "resolution",
    ]
    seen = []
    reward = story_reward(lambda prompts, completions, **kw: seen.extend(completions) or [0.0] * len(completions))
    reward(prompts, ["c"] * 4, story=out["story"])
    assert seen == out["story"]
    with pytest.raises(RlcwError, match="not part of variant"):
        make_rollout_func(tokenizer, AgentsRoomSettings("write", train_agent="plot"))
    assert (
        len(
            policy_stories(
                model, tokenizer, ["Write about a cup."], variant="e2e", caps=AgentCaps(e2e=3), context_tokens=1024
            )
        )
        == 1
    )
