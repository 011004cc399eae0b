"""grpo with Agents' Room rollouts on a tiny policy with the tiny RM: whole stories are rewarded,
one agent's call is trained and respects its cap; bad combinations fail before anything loads."""

import dataclasses
import json
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import read_stories
from rlcw.errors import RlcwError
from rlcw.recipes import grpo
from rlcw.recipes.common import trl_stage
from rlcw.recipes.grpo import GRPORecipeConfig

WRITERS = ["exposition", "rising_action", "climax", "falling_action", "resolution"]


def _cfg(runs_root, tiny_model_dir, rm_run, *extra):
    return load_config(
        GRPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={rm_run['artifacts']['model']}",
            "train.max_steps=2",
            "train.batch_size=4",
            "train.num_generations=2",
            "train.learning_rate=1e-2",
            "train.log_kl_every=0",
            "eval.every_steps=0",
            "lora.r=4",
            "data.max_train_prompts=8",
            "agents.variant=write",
            "agents.train_agent=climax",
            "agents.caps.writing=5",
            "agents.context_tokens=1024",
            "reward.specs.overlong={type: overlong, weight: 0.5, buffer: 2}",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def agents_run(runs_root, tiny_model_dir, rm_run, monkeypatch_module):
    seen: list[dict] = []
    real = trl_stage.build_reward_set

    def spying_rewards(specs, defaults, key):  # record what a reward receives (main wraps it like the others)
        built = real(specs, defaults, key=key)

        def spy(prompts, completions, **kw):
            seen.append(
                {
                    "completions": completions,
                    "agents_room": kw.get("agents_room"),
                    "completion_ids": kw.get("completion_ids"),
                }
            )
            return [0.0] * len(completions)

        spy.__name__ = "spy"
        return dataclasses.replace(built, funcs=[*built.funcs, spy], weights=[*built.weights, 1.0])

    monkeypatch_module.setattr(trl_stage, "build_reward_set", spying_rewards)
    return grpo.main(_cfg(runs_root, tiny_model_dir, rm_run, "run_name=grpo_agents")), seen


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_agents_room_grpo_completes_and_rewards_whole_stories(agents_run):
    summary, seen = agents_run
    assert summary["status"] == "completed" and summary["metrics"]["train/steps"] == 2
    assert len(seen) == 2  # one reward call per step
    for call in seen:
        assert len(call["completions"]) == len(call["agents_room"]) == 4  # batch 4 = 2 prompts x 2 generations
        # the reward saw the whole story (the 5 writers' parts, in order), not the trained agent's 5-token call
        for completion, meta in zip(call["completions"], call["agents_room"], strict=False):
            parts = [e["text"] for e in meta["scratchpad"] if e["agent"] in WRITERS and e["text"]]
            assert [e["agent"] for e in meta["scratchpad"]] == ["task", *WRITERS]
            assert completion[0]["content"] == ("\n".join(parts) or "(empty)")
        assert all(1 <= len(ids) <= 5 for ids in call["completion_ids"])  # the climax writer's cap


def test_agents_room_samples_keep_the_scratchpad(agents_run):
    summary, _ = agents_run
    samples = Path(summary["artifacts"]["samples"])
    recs = read_stories(samples / "train_step_000001.jsonl")
    assert recs
    for rec in recs:
        ar = rec["meta"]["agents_room"]
        assert [e["agent"] for e in ar["scratchpad"]] == ["task", *WRITERS]
        assert ar["trained_agent"] == "climax" and rec["meta"]["tokens"] <= 5
        story_parts = [e["text"] for e in ar["scratchpad"][1:] if e["text"]]
        assert rec["story"] == "\n".join(story_parts) or rec["story"] == "(empty)"
        climax = next(e["text"] for e in ar["scratchpad"] if e["agent"] == "climax")
        assert ar["trained_text"] == climax
    rows = [json.loads(x) for x in (samples.parent / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "reward" in r]
    assert len(train) == 2 and all(r["completions/max_length"] <= 5 for r in train)
    assert any(k.startswith("rewards/overlong") for k in train[0]) and any(
        k.startswith("rewards/rm") for k in train[0]
    )


@pytest.mark.parametrize(
    "extra, match",
    [
        (["rollout.kind=vllm"], "vLLM"),
        (["agents.train_agent=plot"], "not part of variant"),
        (["agents.variant=outline"], "variant"),
        (["agents.policy_plays=train_agent", "lora.enabled=false"], "lora.enabled"),
        (["agents.policy_plays=some"], "policy_plays"),
        (["agents.policy_plays=train_agent", "agents.train_agent=cycle"], "one agent"),
    ],
)
def test_bad_agents_settings_fail_early(runs_root, tiny_model_dir, rm_run, extra, match):
    with pytest.raises(RlcwError, match=match):
        grpo.main(_cfg(runs_root, tiny_model_dir, rm_run, "run_name=grpo_agents_bad", *extra))


def test_plain_grpo_unchanged_by_the_agents_section():
    cfg = GRPORecipeConfig()
    assert (
        cfg.agents.variant is None
        and grpo.rollout_seam(cfg).completion_cap
        == grpo.rollout_seam(cfg).story_cap
        == cfg.train.max_completion_length
    )
    cfg.agents.variant, cfg.agents.train_agent = "plan_write", "cycle"
    cfg.agents.caps.planning, cfg.agents.caps.writing = 32, 64
    rollout = grpo.rollout_seam(cfg)
    assert rollout.completion_cap == 64 and rollout.story_cap == 5 * 64  # five writers of 64 tokens


def test_one_agents_adapter_and_agents_room_evaluation(runs_root, tiny_model_dir, rm_run):
    """policy_plays=train_agent trains the climax writer's adapter; held-out stories are Agents' Room stories too."""
    summary = grpo.main(
        _cfg(
            runs_root,
            tiny_model_dir,
            rm_run,
            "run_name=grpo_agents_one",
            "agents.policy_plays=train_agent",
            "agents.caps.writing=3",
            "eval.every_steps=2",
            "eval.num_prompts=2",
        )
    )
    assert summary["status"] == "completed"
    held_out = read_stories(Path(summary["artifacts"]["samples"]) / "step_000002.jsonl")
    assert len(held_out) == 2 and all(r["step"] == 2 for r in held_out)
    assert all([e["agent"] for e in r["meta"]["scratchpad"]] == ["task", *WRITERS] for r in held_out)


def test_cycle_trains_the_writers_in_turn(tiny_model_dir, tokenizer):
    from types import SimpleNamespace

    from rlcw.agents.rl import AgentsRoomSettings, make_rollout_func
    from rlcw.agents.variants import AgentCaps
    from rlcw.models import load_causal_lm

    model = load_causal_lm(str(tiny_model_dir))
    agents = AgentsRoomSettings("plan_write", "cycle", caps=AgentCaps(planning=2, writing=2), context_tokens=1024)
    rollout = make_rollout_func(tokenizer, agents)
    prompts = [[{"role": "user", "content": "Write about a kite."}]] * 2
    trained = [
        rollout(prompts, SimpleNamespace(model=model, state=SimpleNamespace(global_step=s)))["agents_room"][0][
            "trained_agent"
        ]
        for s in (0, 1, 5)
    ]
    assert trained == [
        "exposition",
        "rising_action",
        "exposition",
    ]  # the 5 writers in turn; planners are never trained


def test_only_the_trained_agent_uses_the_adapter(tokenizer):
    from contextlib import nullcontext
    from types import SimpleNamespace

    from rlcw.agents.rl import PolicyBackend

    switched_off = []

    class Policy:  # stands in for a peft model: records when its adapter is switched off
        config = SimpleNamespace()

        def disable_adapter(self):
            switched_off.append(True)
            return nullcontext()

    one = PolicyBackend(Policy(), tokenizer, None, record="climax", policy_plays="train_agent")
    shared = PolicyBackend(Policy(), tokenizer, None, record="climax", policy_plays="all")
    for backend in (one, shared):
        for agent in ("plot", "climax", "resolution"):
            with backend._adapter_context(agent):
                pass
    assert len(switched_off) == 2  # plot and resolution of `one`; never the climax, never with the shared base
