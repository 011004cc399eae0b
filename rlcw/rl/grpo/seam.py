"""The GRPO rollout seam: how a GRPO run writes its training and held-out stories, decided once.

    rollout = build_rollout(RolloutSettings(max_completion_length=96, ...), agents=None)  # plain TRL generation
    rollout.completion_cap, rollout.story_cap                 # token caps (trained sequence, rewarded story)
    GRPOConfig(**rollout.grpo_args(), ...)                    # max_completion_length and TRL's vLLM keys
    funcs = rollout.rewards(funcs)                            # reward callables as this rollout needs them
    RlcwGRPOTrainer(..., **rollout.trainer_kwargs(tokenizer)) # rollout_func, rollout_is_cap
    sample = rollout.eval_sampler(tokenizer, rows, ...)       # `sample(model, step)` of the held-out evaluation

Three variants, one class each: `PlainRollout` (TRL's generation, or vLLM), `FastRollout`
(rlcw.rl.grpo.rollout: merged-LoRA sampler with its importance-sampling correction) and
`AgentsRoomRollout` (rlcw.agents.rl: the trained agent's call is the trained sequence, the whole
story is rewarded). `build_rollout` checks the settings (errors name the `rlcw grpo` keys) and picks
the variant; no other module branches on it or derives a cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rlcw.agents.rl import (
    agents_story_sampler,
    check_agents_rl,
    make_rollout_func,
    story_reward,
    story_tokens,
    trained_cap,
)
from rlcw.agents.variants import AgentCaps
from rlcw.errors import RlcwError
from rlcw.rl.grpo.rollout import check_fast_rollout, make_fast_rollout_func

VLLM_MODES = ("colocate", "server")


@dataclass(frozen=True)
class RolloutSettings:
    """The `train.*` and run keys a rollout reads (names as in `rlcw grpo`'s config)."""

    max_completion_length: int
    temperature: float = 0.9
    top_p: float = 1.0
    batch_size: int = 8
    seed: int = 0
    system_prompt: str | None = None
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = 0.3
    fast_rollout: bool = False
    rollout_precision: str = "fp32"
    rollout_draw: str = "multinomial"
    rollout_compact: bool = True
    rollout_prepack: bool = True
    rollout_is_cap: float = 3.0
    deepspeed: str | None = None
    lora_enabled: bool = True


@dataclass(frozen=True)
class AgentsRoomSettings:
    """The `agents.*` keys of an Agents' Room run (rlcw.agents.rl); `variant` None = no Agents' Room."""

    variant: str | None = None
    train_agent: str = "climax"
    policy_plays: str = "all"
    caps: AgentCaps = field(default_factory=AgentCaps)
    context_tokens: int = 2048


def build_rollout(s: RolloutSettings, agents: AgentsRoomSettings | None = None) -> PlainRollout:
    """The checked rollout of these settings: Agents' Room when `agents` names a variant, else fast or plain."""
    agents = agents if agents and agents.variant else None
    if s.vllm_mode not in VLLM_MODES:
        raise RlcwError(f"unknown vllm_mode '{s.vllm_mode}'", where="train.vllm_mode", hint="colocate or server")
    check_fast_rollout(
        s.fast_rollout,
        s.rollout_precision,
        s.rollout_is_cap,
        use_vllm=s.use_vllm,
        deepspeed=s.deepspeed,
        agents_variant=agents.variant if agents else None,
        draw=s.rollout_draw,
    )
    if agents:
        return AgentsRoomRollout(s, agents)
    return FastRollout(s) if s.fast_rollout else PlainRollout(s)


class PlainRollout:
    """TRL's own generation (transformers, or vLLM with `use_vllm`): one completion is one story."""

    def __init__(self, s: RolloutSettings):
        self.settings = s

    @property
    def completion_cap(self) -> int:
        """Token cap of the trained sequence (TRL's max_completion_length; the reward's `max_tokens`)."""
        return self.settings.max_completion_length

    @property
    def story_cap(self) -> int:
        """Most new tokens of a rewarded story (prompts asking for more words than it holds are fitted out)."""
        return self.settings.max_completion_length

    def eval_cap(self, max_new_tokens: int) -> int:
        """Most new tokens of a held-out story: the evaluation's own `max_new_tokens`."""
        return max_new_tokens

    def grpo_args(self) -> dict:
        """GRPOConfig keys this rollout decides: the completion cap and, with vLLM, TRL's vLLM keys."""
        s = self.settings
        vllm = {
            "use_vllm": True,
            "vllm_mode": s.vllm_mode,
            "vllm_gpu_memory_utilization": s.vllm_gpu_memory_utilization,
            "vllm_server_base_url": s.vllm_server_base_url,
        }
        return {"max_completion_length": self.completion_cap, **(vllm if s.use_vllm else {})}

    def rewards(self, funcs: list) -> list:
        """The reward callables as the trainer calls them with this rollout's completions."""
        return funcs

    def trainer_kwargs(self, tokenizer) -> dict:
        """RlcwGRPOTrainer keyword arguments: `rollout_func` (when not TRL's own) and `rollout_is_cap`."""
        return {"rollout_is_cap": 0.0}

    def eval_sampler(
        self, tokenizer, rows: list[dict], *, run_name: str, max_new_tokens: int, temperature: float, batch_size: int
    ) -> Callable:
        """`sample(model, step)` of the held-out evaluation: stories written the way the training ones are."""
        from rlcw.measure.periodic import story_sampler  # torch + transformers: not at import of every recipe

        s = self.settings
        return story_sampler(
            tokenizer,
            rows,
            system_prompt=s.system_prompt,
            run_name=run_name,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            batch_size=batch_size,
            seed=s.seed,
        )


class FastRollout(PlainRollout):
    """rlcw.rl.grpo.rollout's sampler (merged-LoRA copy, shared prompt cache), its tokens' loss weighted by the
    truncated importance ratio min(pi/mu, rollout_is_cap) (rlcw.rl.grpo.is_correction; 0 = off)."""

    def trainer_kwargs(self, tokenizer) -> dict:
        from rlcw.logs import say
        from rlcw.rl.grpo.rollout import resolve_precision

        s = self.settings
        precision, why = resolve_precision(s.rollout_precision)
        say("grpo", f"fast rollout: {precision} weight copy ({why}), {s.rollout_draw} draw")
        return {
            "rollout_func": make_fast_rollout_func(precision, s.rollout_draw, s.rollout_compact, s.rollout_prepack),
            "rollout_is_cap": s.rollout_is_cap,
        }


class AgentsRoomRollout(PlainRollout):
    """Agents' Room stories (rlcw.agents.rl): the trained agent's call is the trained sequence, the whole story is
    rewarded and evaluated."""

    def __init__(self, s: RolloutSettings, agents: AgentsRoomSettings):
        a = agents
        check_agents_rl(
            a.variant,
            a.train_agent,
            a.policy_plays,
            a.caps,
            a.context_tokens,
            lora_enabled=s.lora_enabled,
            use_vllm=s.use_vllm,
        )
        super().__init__(s)
        self.agents = agents

    @property
    def completion_cap(self) -> int:
        a = self.agents
        return trained_cap(a.variant, a.train_agent, a.caps)

    @property
    def story_cap(self) -> int:
        return story_tokens(self.agents.variant, self.agents.caps)

    def eval_cap(self, max_new_tokens: int) -> int:
        return self.story_cap

    def rewards(self, funcs: list) -> list:
        return [story_reward(f) for f in funcs]

    def trainer_kwargs(self, tokenizer) -> dict:
        s, a = self.settings, self.agents
        rollout = make_rollout_func(
            tokenizer,
            variant=a.variant,
            train_agent=a.train_agent,
            caps=a.caps,
            context_tokens=a.context_tokens,
            system_prompt=s.system_prompt,
            temperature=s.temperature,
            top_p=s.top_p,
            batch_size=s.batch_size,
            policy_plays=a.policy_plays,
            seed=s.seed,
        )
        return {"rollout_func": rollout, "rollout_is_cap": 0.0}

    def eval_sampler(
        self, tokenizer, rows: list[dict], *, run_name: str, max_new_tokens: int, temperature: float, batch_size: int
    ) -> Callable:
        s, a = self.settings, self.agents
        return agents_story_sampler(
            tokenizer,
            rows,
            variant=a.variant,
            train_agent=a.train_agent,
            policy_plays=a.policy_plays,
            caps=a.caps,
            context_tokens=a.context_tokens,
            system_prompt=s.system_prompt,
            run_name=run_name,
            temperature=temperature,
            batch_size=batch_size,
            seed=s.seed,
        )
