"""Agents' Room inside RL: the rewarded story is written by a variant running on the policy itself.

- `policy_stories(model, tokenizer, prompts, variant=...)`: story records from the current policy
  weights (every agent is the policy; an adapter-per-agent model works too, via `LocalBackend`).
- `make_rollout_func(tokenizer, ...)`: a TRL `GRPOTrainer(rollout_func=...)` hook. Per prompt it
  runs the variant `num_generations` times on `trainer.model`; the trained sequence is one agent's
  call (`train_agent`, default the climax writer): `prompt_ids` = that agent's chat-rendered prompt
  (scratchpad included), `completion_ids` = its output. The whole story and its scratchpad reach the
  reward functions as the extra fields `story` and `agents_room`; wrap a reward with `story_reward`
  so the RM scores the whole story, not only the trained agent's part. Training the shared base
  (every agent) is the same with `train_agent` cycling over the writers from step to step.

Cost per GRPO step (what to expect): a plan_write story is 9 sequential agent calls (4 planners,
5 writers), each re-reading a scratchpad that grows to ~1-2k tokens, so a step costs about
9 x (prefill of the scratchpad + cap new tokens) per completion, against 1 x (prompt + cap) for a
plain GRPO step: with caps 64/128 tokens that is ~900 new tokens per story instead of ~128-512, and
the backward pass stays one agent's ~128 tokens. The measured CPU time per story is in the
issue-6 report (`rlcw generate generator=agents_room`, `meta.seconds_per_story`).

    rollout = make_rollout_func(tokenizer, variant="plan_write", train_agent="climax", num_generations=4)
    GRPOTrainer(..., reward_funcs=[story_reward(bt_scorer)], rollout_func=rollout)
"""

from __future__ import annotations

import functools

from rlcw.agents.backends import LocalBackend
from rlcw.agents.variants import AgentCaps, check_variant, run_variant
from rlcw.errors import RlcwError
from rlcw.generation import chat_messages


class _Recorder:
    """A backend wrapper that keeps the prompts and outputs of one agent's calls (in row order)."""

    def __init__(self, backend, agent: str):
        self.backend, self.agent, self.prompts, self.outputs = backend, agent, [], []
        self.context_limit = backend.context_limit

    def count_tokens(self, text):
        return self.backend.count_tokens(text)

    def overhead_tokens(self):
        return self.backend.overhead_tokens()

    def generate(self, agent, prompts, max_new_tokens, seed=0):
        outs = self.backend.generate(agent, prompts, max_new_tokens, seed)
        if agent == self.agent:
            self.prompts += prompts
            self.outputs += outs
        return outs


def policy_stories(model, tokenizer, prompts: list[str], *, variant: str = "plan_write", caps: AgentCaps | None = None,
                   context_tokens: int = 2048, system_prompt: str | None = None, temperature: float = 0.9,
                   batch_size: int = 8, seed: int = 0) -> list[dict]:
    """Story records written by `variant` with every agent played by `model` (scratchpad in `meta`)."""
    backend = LocalBackend(model, tokenizer, system_prompt, temperature=temperature, batch_size=batch_size)
    rows = [{"id": str(i), "prompt": p} for i, p in enumerate(prompts)]
    return run_variant(rows, backend, variant, caps or AgentCaps(), context_tokens=context_tokens, seed=seed)


def _user_text(prompt) -> str:
    return prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)


def make_rollout_func(tokenizer, *, variant: str = "plan_write", train_agent: str = "climax", caps: AgentCaps | None = None,
                      context_tokens: int = 2048, system_prompt: str | None = None, temperature: float = 0.9,
                      num_generations: int = 4, batch_size: int = 8):
    """A TRL GRPO `rollout_func(prompts, trainer) -> dict` (see the module docstring)."""
    if train_agent not in check_variant(variant):
        raise RlcwError(f"agent '{train_agent}' is not part of variant '{variant}'", hint=f"pick one of {', '.join(check_variant(variant))}")
    caps = caps or AgentCaps()
    cap = caps.for_agent(train_agent)

    def rollout(prompts, trainer) -> dict:
        backend = _Recorder(LocalBackend(trainer.model, tokenizer, system_prompt, temperature=temperature, batch_size=batch_size), train_agent)
        rows = [{"id": f"{i}.{g}", "prompt": _user_text(p)} for i, p in enumerate(prompts) for g in range(num_generations)]
        step = getattr(getattr(trainer, "state", None), "global_step", 0) or 0
        recs = run_variant(rows, backend, variant, caps, context_tokens=context_tokens, seed=step)
        prompt_ids, completion_ids = [], []
        for text, out in zip(backend.prompts, backend.outputs):
            rendered = tokenizer.apply_chat_template(chat_messages(system_prompt, text), tokenize=False, add_generation_prompt=True)
            prompt_ids.append(tokenizer(rendered, add_special_tokens=False)["input_ids"])
            ids = tokenizer(out, add_special_tokens=False)["input_ids"][:cap]
            completion_ids.append(ids + [tokenizer.eos_token_id] if len(ids) < cap else ids)  # ended before the cap
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None,
                "story": [r["story"] for r in recs], "agents_room": [r["meta"] for r in recs]}

    return rollout


def story_reward(reward_fn):
    """Make a TRL-style reward score the whole Agents' Room story (`story` kwarg) instead of the completion."""

    @functools.wraps(reward_fn)
    def wrapped(prompts, completions, story=None, **kwargs):
        if story is None:
            raise RlcwError("story_reward needs the 'story' field from the Agents' Room rollout_func")
        texts = [[{"role": "assistant", "content": s}] if isinstance(c, list) else s for c, s in zip(completions, story)]
        return reward_fn(prompts, texts, **kwargs)

    return wrapped
