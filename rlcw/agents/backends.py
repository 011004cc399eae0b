"""Where agents' text comes from: a local transformers model or an OpenAI-compatible server.

A backend has `generate(agent, prompts, max_new_tokens, seed) -> list[str]` (one user message per
story, batched) and `count_tokens(text) -> int` (used to fit the scratchpad into the context).

- `LocalBackend(model, tokenizer, system_prompt)`: one base model; `attach_adapters` loads a LoRA
  adapter per agent (peft), switched on for that agent's calls; agents without one use the base.
- `ServerBackend(client, system_prompt)`: any object with `chat(messages, max_tokens=, temperature=,
  seed=) -> str`, e.g. `rlcw.judges.clients.factory.make_client(ClientConfig(...))` (`server_backend`).
  Tokens are estimated as 1.4 per word (servers do not expose their tokenizer).
"""

from __future__ import annotations

import math
from contextlib import nullcontext

from rlcw.generation import chat_messages, generate_stories

TOKENS_PER_WORD = 1.4


class LocalBackend:
    """A causal LM (optionally a peft model with one adapter per agent) sampled in batches."""

    def __init__(
        self,
        model,
        tokenizer,
        system_prompt: str | None,
        *,
        temperature: float = 0.8,
        top_p: float = 0.95,
        batch_size: int = 8,
        adapters: tuple[str, ...] = (),
    ):
        self.model, self.tokenizer, self.system_prompt = model, tokenizer, system_prompt
        self.temperature, self.top_p, self.batch_size = temperature, top_p, batch_size
        self.adapters = tuple(adapters)
        self.context_limit = getattr(model.config, "max_position_embeddings", None)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def overhead_tokens(self) -> int:
        """Tokens the chat layout adds around a user message (system prompt, role markers)."""
        text = self.tokenizer.apply_chat_template(
            chat_messages(self.system_prompt, ""), tokenize=False, add_generation_prompt=True
        )
        return self.count_tokens(text)

    def _adapter_context(self, agent: str):
        if agent in self.adapters:
            self.model.set_adapter(agent)
            return nullcontext()
        return self.model.disable_adapter() if self.adapters else nullcontext()

    def generate(self, agent: str, prompts: list[str], max_new_tokens: int, seed: int = 0) -> list[str]:
        rows = [{"id": str(i), "prompt": p} for i, p in enumerate(prompts)]
        with self._adapter_context(agent):
            recs = generate_stories(
                self.model,
                self.tokenizer,
                rows,
                system_prompt=self.system_prompt,
                system_name=agent,
                max_new_tokens=max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                batch_size=self.batch_size,
                seed=seed,
                show_progress=False,
            )
        return [r["story"] for r in recs]


def attach_adapters(model, adapters: dict[str, str]):
    """Wrap `model` in a peft model holding one named LoRA adapter per agent (agent -> adapter folder)."""
    from peft import PeftModel

    items = list(adapters.items())
    model = PeftModel.from_pretrained(model, items[0][1], adapter_name=items[0][0])
    for name, path in items[1:]:
        model.load_adapter(path, adapter_name=name)
    model.eval()
    return model


class ServerBackend:
    """Agents answered by a chat client (an OpenAI-compatible server through the judge client)."""

    context_limit = None

    def __init__(self, client, system_prompt: str | None, *, temperature: float = 0.8):
        self.client, self.system_prompt, self.temperature = client, system_prompt, temperature

    def count_tokens(self, text: str) -> int:
        return math.ceil(len(text.split()) * TOKENS_PER_WORD)

    def overhead_tokens(self) -> int:
        return self.count_tokens(self.system_prompt or "") + 16

    def generate(self, agent: str, prompts: list[str], max_new_tokens: int, seed: int = 0) -> list[str]:
        convs = [chat_messages(self.system_prompt, p) for p in prompts]
        if hasattr(self.client, "chat_many"):  # the judge client: concurrent requests, cache, budgets
            outs = self.client.chat_many(
                convs,
                max_tokens=max_new_tokens,
                temperature=self.temperature,
                seed=seed,
                cache_tag=f"agents_room:{agent}",
                desc=agent,
                progress=False,
            )
        else:
            outs = [
                self.client.chat(c, max_tokens=max_new_tokens, temperature=self.temperature, seed=seed) for c in convs
            ]
        return [o.strip() for o in outs]


def server_backend(
    client_cfg: dict, system_prompt: str | None, temperature: float = 0.8, script=None
) -> ServerBackend:
    """A ServerBackend from judge-client settings (`rlcw.judges.clients.base.ClientConfig` keys: base_url, model)."""
    from rlcw.judges.clients.factory import (
        make_client,  # imported lazily: only the server path needs the judges package
    )

    return ServerBackend(make_client(dict(client_cfg), script=script), system_prompt, temperature=temperature)
