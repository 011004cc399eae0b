"""Agents' Room inside RL: the rewarded story is written by a variant running on the policy itself.

- `policy_stories(model, tokenizer, prompts, variant=...)`: story records from the current policy
  weights (every agent is the policy; an adapter-per-agent model works too, via `LocalBackend`).
- `make_rollout_func(tokenizer, agents)`: a TRL 1.16 `GRPOTrainer(rollout_func=...)` hook. TRL hands
  it the per-process prompts already repeated `num_generations` times (its sampler repeats each
  prompt; only the vLLM path de-duplicates) and wants one completion per prompt entry back, with
  `prompt_ids`, `completion_ids` and `logprobs` (None: TRL recomputes them). Per entry it runs the
  variant once on the trainer's model; the trained sequence is one agent's call (`train_agent`, or
  `"cycle"`: the variant's writers in turn, one per step): `prompt_ids` = that agent's chat-rendered
  prompt (scratchpad included), `completion_ids` = the exact sampled tokens (cut after the first
  EOS, at most the agent's cap). The whole story and the run's `meta` (scratchpad included) reach
  the reward functions as the extra fields `story` and `agents_room`; wrap a reward with
  `story_reward` so it scores the whole story, not only the trained agent's part.
- Who plays the other agents (`policy_plays`): `"all"` (the shared base: the policy, its LoRA
  adapter included, writes every agent's part, so what the trained call learns is shared by all
  agents) or `"train_agent"` (one agent's adapter: only the trained agent's calls go through the
  policy's LoRA adapter, every other agent is the frozen base with the adapter switched off).

Cost: a plan_write story is 9 sequential agent calls, each re-reading a growing scratchpad, against
one call for plain GRPO; the backward pass stays one agent's call. Measured per step on CPU: see
`rlcw.recipes.grpo`'s docstring.

    rollout = make_rollout_func(tokenizer, AgentsRoomSettings("plan_write", train_agent="climax"))
    GRPOTrainer(..., reward_funcs=[story_reward(bt_scorer)], rollout_func=rollout)
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch

from rlcw.agents.agents import KINDS
from rlcw.agents.backends import LocalBackend
from rlcw.agents.variants import AgentCaps, check_variant, run_variant
from rlcw.errors import RlcwError
from rlcw.generation import chat_messages

POLICY_PLAYS = ("all", "train_agent")


@dataclass(frozen=True)
class AgentsRoomSettings:
    """Who writes a story in Agents' Room RL (the `agents.*` keys of `rlcw grpo`; `variant` None = no Agents' Room):
    the variant, the agent whose call is trained (or "cycle"), who else the policy plays, caps and context."""

    variant: str | None = None
    train_agent: str = "climax"
    policy_plays: str = "all"
    caps: AgentCaps = field(default_factory=AgentCaps)
    context_tokens: int = 2048


def policy_stories(
    model,
    tokenizer,
    prompts: list[str],
    *,
    variant: str = "plan_write",
    caps: AgentCaps | None = None,
    context_tokens: int = 2048,
    system_prompt: str | None = None,
    temperature: float = 0.9,
    batch_size: int = 8,
    seed: int = 0,
) -> list[dict]:
    """Story records written by `variant` with every agent played by `model` (scratchpad in `meta`)."""
    backend = LocalBackend(model, tokenizer, system_prompt, temperature=temperature, batch_size=batch_size)
    rows = [{"id": str(i), "prompt": p} for i, p in enumerate(prompts)]
    return run_variant(rows, backend, variant, caps or AgentCaps(), context_tokens=context_tokens, seed=seed)


class PolicyBackend(LocalBackend):
    """The policy as every agent, keeping the exact prompt and completion token ids of one agent's calls."""

    def __init__(self, model, tokenizer, system_prompt, *, record: str, policy_plays: str = "all", **kw):
        super().__init__(model, tokenizer, system_prompt, **kw)
        self.record, self.policy_plays = record, policy_plays
        self.prompt_ids: list[list[int]] = []
        self.completion_ids: list[list[int]] = []

    def _adapter_context(self, agent: str):
        if self.policy_plays == "train_agent" and agent != self.record:
            return self.model.disable_adapter()
        return nullcontext()

    @torch.no_grad()
    def generate(self, agent: str, prompts: list[str], max_new_tokens: int, seed: int = 0) -> list[str]:
        tok, model = self.tokenizer, self.model
        tok.padding_side = "left"
        eos = tok.eos_token_id
        device = next(model.parameters()).device
        texts = []
        with self._adapter_context(agent):
            for start in range(0, len(prompts), self.batch_size):
                chats = [
                    tok.apply_chat_template(
                        chat_messages(self.system_prompt, p), tokenize=False, add_generation_prompt=True
                    )
                    for p in prompts[start : start + self.batch_size]
                ]
                enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
                torch.manual_seed(seed + start)
                gen = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=self.temperature > 0,
                    temperature=self.temperature or None,
                    top_p=self.top_p,
                    pad_token_id=tok.pad_token_id,
                )
                width = enc["input_ids"].shape[1]
                for row, mask, out in zip(
                    enc["input_ids"], enc["attention_mask"], gen[:, width:].tolist(), strict=False
                ):
                    ids = out[: out.index(eos) + 1] if eos in out else out  # up to and with the first EOS
                    texts.append(tok.decode(ids, skip_special_tokens=True).strip())
                    if agent == self.record:
                        self.prompt_ids.append(row[mask.bool()].tolist())
                        self.completion_ids.append(ids)
        return texts


def _user_text(prompt) -> str:
    return prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)


def trained_agents(variant: str, train_agent: str) -> tuple[str, ...]:
    """The agents whose call is the trained sequence: (train_agent,), or the variant's writers for "cycle"."""
    order = check_variant(variant)
    if train_agent == "cycle":
        return tuple(a for a in order if KINDS[a] == "writing")
    if train_agent not in order:
        raise RlcwError(
            f"agent '{train_agent}' is not part of variant '{variant}'",
            where="agents.train_agent",
            hint=f"pick one of {', '.join(order)}, or cycle (the writers in turn)",
        )
    return (train_agent,)


def story_tokens(variant: str, caps: AgentCaps) -> int:
    """The most new tokens a story of `variant` can have: the sum of its writing agents' caps."""
    return sum(caps.for_agent(a) for a in check_variant(variant) if KINDS[a] == "writing")


def trained_cap(variant: str, train_agent: str, caps: AgentCaps) -> int:
    """Token cap of the trained sequence: the largest cap of the agents whose call is trained."""
    return max(caps.for_agent(a) for a in trained_agents(variant, train_agent))


def check_agents_rl(agents: AgentsRoomSettings, *, lora_enabled: bool, use_vllm: bool) -> None:
    """Reject Agents' Room RL settings that cannot work together (errors name the `rlcw grpo` keys)."""
    variant, train_agent, policy_plays = agents.variant, agents.train_agent, agents.policy_plays
    caps, context_tokens = agents.caps, agents.context_tokens
    trained_agents(variant, train_agent)  # unknown variant or agent -> RlcwError
    if policy_plays not in POLICY_PLAYS:
        raise RlcwError(
            f"unknown agents.policy_plays '{policy_plays}'",
            where="agents.policy_plays",
            hint=f"one of {', '.join(POLICY_PLAYS)}",
        )
    if policy_plays == "train_agent" and not lora_enabled:
        raise RlcwError(
            "agents.policy_plays=train_agent trains one agent's LoRA adapter, but lora.enabled=false",
            where="agents.policy_plays",
            hint="lora.enabled=true, or agents.policy_plays=all (the shared base)",
        )
    if policy_plays == "train_agent" and train_agent == "cycle":
        raise RlcwError(
            "agents.policy_plays=train_agent trains one agent's adapter; train_agent=cycle trains several",
            where="agents.train_agent",
            hint="name one agent, or agents.policy_plays=all to cycle over the shared base",
        )
    if use_vllm:
        raise RlcwError(
            "Agents' Room rollouts run on the trainer's own model, not vLLM",
            where="agents.variant",
            hint="rollout.kind=trl, or agents.variant=null for plain vLLM rollouts",
        )
    bad = [k for k in ("planning", "writing", "finalizer", "e2e") if getattr(caps, k) < 1]
    if bad or context_tokens < 1:
        raise RlcwError(
            f"agents.caps.{bad[0]} must be at least 1" if bad else "agents.context_tokens must be at least 1",
            where="agents",
        )


def agents_story_sampler(
    tokenizer,
    rows: list[dict],
    agents: AgentsRoomSettings,
    *,
    system_prompt: str | None,
    run_name: str,
    temperature: float,
    batch_size: int,
    seed: int,
):
    """`sample(model, step)` of the held-out evaluation: stories written by `agents.variant` on the current policy,
    named `<run>@<step>` (the Agents' Room counterpart of `rlcw.measure.periodic.story_sampler`)."""

    def sample(model, step: int) -> list[dict]:
        record = trained_agents(agents.variant, agents.train_agent)[0]
        backend = PolicyBackend(
            model,
            tokenizer,
            system_prompt,
            record=record,
            policy_plays=agents.policy_plays,
            temperature=temperature,
            batch_size=batch_size,
        )
        recs = run_variant(
            rows,
            backend,
            agents.variant,
            agents.caps,
            context_tokens=agents.context_tokens,
            seed=seed,
            system_name=f"{run_name}@{step}",
        )
        return [dict(r, step=step) for r in recs]

    return sample


@contextmanager
def _generation_model(trainer):
    """The trainer's model unwrapped for generation (DDP/DeepSpeed aware), or `trainer.model` as is."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None:
        yield trainer.model
        return
    from trl.models import unwrap_model_for_generation

    with unwrap_model_for_generation(trainer.model_wrapped, accelerator) as model:
        yield model


def make_rollout_func(
    tokenizer,
    agents: AgentsRoomSettings,
    *,
    system_prompt: str | None = None,
    temperature: float = 0.9,
    top_p: float = 0.95,
    batch_size: int = 8,
    seed: int = 0,
):
    """A TRL GRPO `rollout_func(prompts, trainer) -> dict` (see the module docstring)."""
    variant, policy_plays = agents.variant, agents.policy_plays
    trained = trained_agents(variant, agents.train_agent)
    if policy_plays not in POLICY_PLAYS:
        raise RlcwError(
            f"unknown policy_plays '{policy_plays}'",
            where="agents.policy_plays",
            hint=f"one of {', '.join(POLICY_PLAYS)}",
        )

    def rollout(prompts, trainer) -> dict:
        step = getattr(getattr(trainer, "state", None), "global_step", 0) or 0
        agent = trained[step % len(trained)]
        rows = [{"id": str(i), "prompt": _user_text(p)} for i, p in enumerate(prompts)]
        with _generation_model(trainer) as model:
            if policy_plays == "train_agent" and not hasattr(model, "disable_adapter"):
                raise RlcwError(
                    "agents.policy_plays=train_agent needs a LoRA policy",
                    where="agents.policy_plays",
                    hint="lora.enabled=true, or policy_plays=all to train the shared base",
                )
            backend = PolicyBackend(
                model,
                tokenizer,
                system_prompt,
                record=agent,
                policy_plays=policy_plays,
                temperature=temperature,
                top_p=top_p,
                batch_size=batch_size,
            )
            was_training = model.training
            model.eval()
            try:
                recs = run_variant(
                    rows,
                    backend,
                    variant,
                    agents.caps,
                    context_tokens=agents.context_tokens,
                    seed=seed + 100_000 * step,
                )
            finally:
                model.train(was_training)
        if len(backend.completion_ids) != len(prompts):
            raise RlcwError(
                f"agent '{agent}' was called {len(backend.completion_ids)} times for {len(prompts)} stories",
                hint="a custom orchestrator must call the trained agent exactly once per story",
            )
        for rec in recs:
            rec["meta"]["trained_agent"] = agent
        return {
            "prompt_ids": backend.prompt_ids,
            "completion_ids": backend.completion_ids,
            "logprobs": None,
            "story": [r["story"] for r in recs],
            "agents_room": [r["meta"] for r in recs],
        }

    return rollout


def story_reward(reward_fn):
    """Make a TRL-style reward score the whole Agents' Room story (`story` kwarg) instead of the completion.

    `completion_ids` still reach it: a token-count reward (overlong) measures the trained agent's call."""

    def wrapped(prompts, completions, story=None, **kwargs):
        if story is None:
            raise RlcwError("story_reward needs the 'story' field from the Agents' Room rollout_func")
        texts = [
            [{"role": "assistant", "content": s}] if isinstance(c, list) else s
            for c, s in zip(completions, story, strict=False)
        ]
        return reward_fn(prompts, texts, **kwargs)

    wrapped.__name__ = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    wrapped.__wrapped__ = reward_fn
    return wrapped
