"""The GRPO rollout seam: one variant per config, and what each answers (caps, TRL args, rewards, trainer kwargs)."""

import pytest

from rlcw.agents.variants import AgentCaps
from rlcw.errors import RlcwError
from rlcw.rl.grpo.seam import (
    AgentsRoomRollout,
    AgentsRoomSettings,
    FastRollout,
    GRPORolloutSection,
    PlainRollout,
    RolloutSettings,
    VllmSection,
    build_rollout,
)


def reward(prompts, completions, **kw):
    return [0.0] * len(completions)


RUN = {"temperature": 0.9, "top_p": 1.0, "batch_size": 8, "seed": 0, "system_prompt": None, "deepspeed": None}


def settings(max_completion_length: int) -> RolloutSettings:
    return RolloutSettings(max_completion_length, **RUN, lora_enabled=True)


def test_plain_rollout_is_trl_generation_with_the_configured_cap():
    r = build_rollout(GRPORolloutSection(), settings(96), AgentsRoomSettings(variant=None))
    assert type(r) is PlainRollout and r.completion_cap == r.story_cap == 96 and r.eval_cap(200) == 200
    assert r.grpo_args() == {"max_completion_length": 96}
    assert r.trainer_kwargs(None) == {"rollout_is_cap": 0.0}  # no rollout_func: TRL's own generation
    assert r.rewards([reward]) == [reward]


def test_vllm_keys_reach_trl_only_when_asked():
    server = VllmSection(mode="server", server_base_url="http://h:8000")
    r = build_rollout(GRPORolloutSection(kind="vllm", vllm=server), settings(64))
    assert r.grpo_args() == {
        "max_completion_length": 64,
        "use_vllm": True,
        "vllm_mode": "server",
        "vllm_gpu_memory_utilization": 0.3,
        "vllm_server_base_url": "http://h:8000",
    }
    assert build_rollout(GRPORolloutSection(vllm=server), settings(64)).grpo_args() == {"max_completion_length": 64}
    with pytest.raises(RlcwError, match="unknown rollout.vllm.mode") as err:
        build_rollout(GRPORolloutSection(kind="vllm", vllm=VllmSection(mode="remote")), settings(64))
    assert err.value.where == "rollout.vllm.mode"
    with pytest.raises(RlcwError, match="unknown rollout.kind") as err:
        build_rollout(GRPORolloutSection(kind="sglang"), settings(64))
    assert err.value.where == "rollout.kind"


def test_fast_rollout_brings_its_sampler_and_its_importance_cap():
    r = build_rollout(GRPORolloutSection(kind="fast", is_cap=2.0), settings(48))
    kwargs = r.trainer_kwargs(None)
    assert type(r) is FastRollout and r.completion_cap == r.story_cap == 48
    assert callable(kwargs["rollout_func"]) and kwargs["rollout_is_cap"] == 2.0
    # the cap applies to the fast rollout only: a plain run with the default cap trains without correction
    assert build_rollout(GRPORolloutSection(is_cap=3.0), settings(48)).trainer_kwargs(None) == {"rollout_is_cap": 0.0}
    with pytest.raises(RlcwError, match="fast rollout only"):
        build_rollout(GRPORolloutSection(precision="bf16"), settings(48))


def test_agents_room_caps_rewards_and_checks():
    caps = AgentCaps(planning=32, writing=64)
    r = build_rollout(GRPORolloutSection(), settings(96), AgentsRoomSettings("plan_write", "cycle", caps=caps))
    assert type(r) is AgentsRoomRollout
    assert r.completion_cap == 64 and r.story_cap == r.eval_cap(200) == 5 * 64
    assert r.grpo_args() == {"max_completion_length": 64}
    wrapped = r.rewards([reward])
    assert len(wrapped) == 1 and wrapped[0] is not reward  # rewarded on the whole story
    with pytest.raises(RlcwError, match="vLLM"):
        build_rollout(GRPORolloutSection(kind="vllm"), settings(96), AgentsRoomSettings("write"))
    with pytest.raises(RlcwError, match="agents.variant"):  # the fast rollout cannot write Agents' Room stories
        build_rollout(GRPORolloutSection(kind="fast"), settings(96), AgentsRoomSettings("write"))
