"""The GRPO rollout seam: how a GRPO run writes its training and held-out stories, decided once.

    rollout = build_rollout(GRPORolloutSection(kind="fast"), RolloutSettings(...), agents=None)  # the `rollout.*` keys
    rollout.completion_cap, rollout.story_cap                 # token caps (trained sequence, rewarded story)
    GRPOConfig(**rollout.grpo_args(), ...)                    # max_completion_length and TRL's vLLM keys
    funcs = rollout.rewards(funcs)                            # reward callables as this rollout needs them
    RlcwGRPOTrainer(..., **rollout.trainer_kwargs(tokenizer)) # rollout_func, rollout_is_cap
    sample = rollout.eval_sampler(tokenizer, rows, ...)       # `sample(model, step)` of the held-out evaluation

The `rollout.*` config section is defined here (`RolloutSection`: TRL's generation or vLLM, what RLOO reads;
`GRPORolloutSection`: also rlcw's fast sampler) and read by the seam as it is. Three variants, one class each:
`PlainRollout` (`rollout.kind` trl or vllm: TRL's generation), `FastRollout` (`rollout.kind=fast`,
rlcw.rl.grpo.rollout: merged-LoRA sampler with its importance-sampling correction) and `AgentsRoomRollout`
(rlcw.agents.rl: the trained agent's call is the trained sequence, the whole story is rewarded). `build_rollout`
checks the settings (errors name the config keys) and picks the variant; no other module branches on it or
derives a cap.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlcw.agents.rl import (
    AgentsRoomSettings,
    agents_story_sampler,
    check_agents_rl,
    make_rollout_func,
    story_reward,
    story_tokens,
    trained_cap,
)
from rlcw.config import check_choice
from rlcw.errors import RlcwError
from rlcw.rl.grpo.rollout import check_fast_rollout, make_fast_rollout_func

VLLM_MODES = ("colocate", "server")
TRL_KINDS = ("trl", "vllm")  # TRL's own generation: transformers or vLLM
GRPO_KINDS = ("trl", "fast", "vllm")


@dataclass
class VllmSection:
    """`rollout.vllm.*`: TRL's vLLM generation (`rollout.kind=vllm`, GPU hosts)."""

    mode: str = "colocate"  # colocate (vLLM shares the training GPUs) | server (`trl vllm-serve` at server_base_url)
    server_base_url: str | None = None  # URL of `trl vllm-serve` when mode=server
    gpu_memory_utilization: float = 0.3  # GPU memory share of colocated vLLM (mode=colocate)


@dataclass
class RolloutSection:
    """`rollout.*`: how the policy writes its training completions."""

    kind: str = "trl"  # trl: TRL's generation with transformers | vllm: TRL's vLLM generation (GPU)
    vllm: VllmSection = field(default_factory=VllmSection)


@dataclass
class GRPORolloutSection(RolloutSection):
    """`rollout.*` of GRPO: also rlcw's fast sampler (`kind: fast`) and its settings."""

    # trl: TRL's generation with transformers | fast: rlcw's sampler (merged-LoRA copy, shared prompt cache; CPU or
    # one GPU) | vllm: TRL's vLLM generation (GPU)
    kind: str = "trl"
    precision: str = "fp32"  # fast: fp32 | bf16 | auto (bf16 where native): the sampler's weights; the loss: fp32
    draw: str = "multinomial"  # fast: multinomial | inverse_cdf (the same distribution, one uniform a row a step)
    # fast: per-token loss weight min(pi/mu, is_cap) for the sampler/policy gap (rlcw.rl.grpo.is_correction); 0 = off
    is_cap: float = 3.0
    # fast: no story may end before its prompt's min_words (the EOS ids masked out of the sampling distribution
    # until then; the IS correction covers the gap to the policy); prompts without a range are free to end
    block_short_endings: bool = False
    # fast: a story-record file (prompt, story) or `bundled`: in each group whose prompt has a reference story, the
    # last completion is that story, teacher-forced (human-reference injection, POLARIS); null = off
    references: str | None = None


def check_rollout(r: RolloutSection, kinds: tuple[str, ...]) -> None:
    """`rollout.kind` is one of `kinds` (what the recipe offers) and `rollout.vllm.mode` a vLLM mode."""
    check_choice("rollout.kind", r.kind, kinds)
    check_choice("rollout.vllm.mode", r.vllm.mode, VLLM_MODES)


def check_vllm_installed(r: RolloutSection) -> None:
    """vLLM's presence on this machine when `rollout.kind=vllm` (a check of the machine, not of the config)."""
    if r.kind == "vllm" and importlib.util.find_spec("vllm") is None:
        raise RlcwError(
            "rollout.kind=vllm but vLLM is not installed",
            where="rollout.kind",
            hint="pip install vllm (GPU hosts), or rollout.kind=trl to generate with transformers",
        )


def vllm_args(r: RolloutSection) -> dict:
    """TRL's vLLM keys of GRPOConfig / RLOOConfig: none unless `rollout.kind=vllm`."""
    if r.kind != "vllm":
        return {}
    v = r.vllm
    return {
        "use_vllm": True,
        "vllm_mode": v.mode,
        "vllm_gpu_memory_utilization": v.gpu_memory_utilization,
        "vllm_server_base_url": v.server_base_url,
    }


@dataclass(frozen=True)
class RolloutSettings:
    """The keys outside `rollout.*` that a rollout reads (`train.*`, `seed`, `model.system_prompt`, `lora.enabled`)."""

    max_completion_length: int
    temperature: float
    top_p: float
    batch_size: int
    seed: int
    system_prompt: str | None
    deepspeed: str | None
    lora_enabled: bool


def build_rollout(r: GRPORolloutSection, s: RolloutSettings, agents: AgentsRoomSettings | None = None) -> PlainRollout:
    """The checked rollout of the `rollout.*` section and the run's settings: Agents' Room when `agents` names a
    variant, else fast or plain."""
    agents = agents if agents and agents.variant else None
    check_rollout(r, GRPO_KINDS)
    check_fast_rollout(
        r.kind,
        r.precision,
        r.is_cap,
        deepspeed=s.deepspeed,
        agents_variant=agents.variant if agents else None,
        draw=r.draw,
        block_short_endings=r.block_short_endings,
        references=r.references,
    )
    if agents:
        return AgentsRoomRollout(r, s, agents)
    return FastRollout(r, s) if r.kind == "fast" else PlainRollout(r, s)


class PlainRollout:
    """TRL's own generation (`rollout.kind` trl: transformers, vllm: vLLM): one completion is one story."""

    def __init__(self, r: GRPORolloutSection, s: RolloutSettings):
        self.section, self.settings = r, s

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
        return {"max_completion_length": self.completion_cap, **vllm_args(self.section)}

    def rewards(self, funcs: list) -> list:
        """The reward callables as the trainer calls them with this rollout's completions."""
        return funcs

    def trainer_kwargs(self, tokenizer, rows: Sequence[dict] = ()) -> dict:
        """RlcwGRPOTrainer keyword arguments: `rollout_func` (when not TRL's own) and `rollout_is_cap`; `rows` are
        the training prompt rows (the fast rollout counts the ones its references cover)."""
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
    truncated importance ratio min(pi/mu, rollout.is_cap) (rlcw.rl.grpo.is_correction; 0 = off)."""

    def trainer_kwargs(self, tokenizer, rows: Sequence[dict] = ()) -> dict:
        from rlcw.logs import say
        from rlcw.rl.grpo.rollout import resolve_precision

        r = self.section
        precision, why = resolve_precision(r.precision)
        blocked = ", no ending before min_words" if r.block_short_endings else ""
        say("grpo", f"fast rollout: {precision} weight copy ({why}), {r.draw} draw{blocked}")
        refs = None
        if r.references is not None:
            from rlcw.rl.grpo.references import ReferenceInjection

            refs = ReferenceInjection.load(r.references, tokenizer, tokenizer.eos_token_id, self.completion_cap)
            covered = refs.check_coverage(rows)
            say(
                "grpo",
                f"reference injection: {len(refs.ids)} reference stories ({refs.path}) cover {covered} of "
                f"{len(rows)} training prompts; each of their groups holds its reference as its last row",
            )
        rollout = make_fast_rollout_func(precision, r.draw, block_short_endings=r.block_short_endings, references=refs)
        return {"rollout_func": rollout, "rollout_is_cap": r.is_cap}


class AgentsRoomRollout(PlainRollout):
    """Agents' Room stories (rlcw.agents.rl): the trained agent's call is the trained sequence, the whole story is
    rewarded and evaluated."""

    def __init__(self, r: GRPORolloutSection, s: RolloutSettings, agents: AgentsRoomSettings):
        check_agents_rl(agents, lora_enabled=s.lora_enabled, use_vllm=r.kind == "vllm")
        super().__init__(r, s)
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

    def trainer_kwargs(self, tokenizer, rows: Sequence[dict] = ()) -> dict:
        s = self.settings
        rollout = make_rollout_func(
            tokenizer,
            self.agents,
            system_prompt=s.system_prompt,
            temperature=s.temperature,
            top_p=s.top_p,
            batch_size=s.batch_size,
            seed=s.seed,
        )
        return {"rollout_func": rollout, "rollout_is_cap": 0.0}

    def eval_sampler(
        self, tokenizer, rows: list[dict], *, run_name: str, max_new_tokens: int, temperature: float, batch_size: int
    ) -> Callable:
        s = self.settings
        return agents_story_sampler(
            tokenizer,
            rows,
            self.agents,
            system_prompt=s.system_prompt,
            run_name=run_name,
            temperature=temperature,
            batch_size=batch_size,
            seed=s.seed,
        )
