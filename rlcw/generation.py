"""Sampling stories from a causal LM into story records.

The chat layout is explicit config: a system prompt (sent as the system message) and an
optional Jinja chat template file that replaces the tokenizer's own.

    stories = generate_stories(model, tok, prompts, system_prompt="...", system_name="base")
"""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm.auto import tqdm

from rlcw.errors import RlcwError


def chat_messages(system_prompt: str | None, prompt: str) -> list[dict]:
    """The conversation a story is generated from (what GRPO datasets hold as `prompt`)."""
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return msgs + [{"role": "user", "content": prompt}]


def prompt_token_ids(tokenizer, rows: list[dict], system_prompt: str | None) -> list[list[int]]:
    """The chat-formatted prompt of each row (`row["prompt"]`) as token ids, generation prompt added."""
    out = []
    for r in rows:
        ids = tokenizer.apply_chat_template(
            chat_messages(system_prompt, r["prompt"]), add_generation_prompt=True, tokenize=True
        )
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


def apply_chat_template_file(tokenizer, path: str | None) -> None:
    """Replace the tokenizer's chat template by the one in `path` (None keeps it)."""
    if path:
        file = Path(path)
        if not file.is_file():
            raise RlcwError(
                "chat template file not found", where=path, hint="model.chat_template takes a path to a .jinja file"
            )
        tokenizer.chat_template = file.read_text(encoding="utf-8-sig")  # a BOM is not template text


@torch.no_grad()
def generate_stories(
    model,
    tokenizer,
    prompts: list[dict],
    *,
    system_prompt: str | None,
    system_name: str,
    max_new_tokens: int = 128,
    temperature: float = 0.8,
    top_p: float = 0.95,
    batch_size: int = 8,
    seed: int = 0,
    step: int | None = None,
    show_progress: bool = True,
) -> list[dict]:
    """One sampled story per prompt row, as story records (seeded: same seed -> same stories)."""
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    out: list[dict] = []
    device = next(model.parameters()).device
    batches = range(0, len(prompts), batch_size)
    for start in tqdm(batches, desc=f"generate ({system_name})", disable=not show_progress):
        rows = prompts[start : start + batch_size]
        texts = [
            tokenizer.apply_chat_template(
                chat_messages(system_prompt, r["prompt"]), tokenize=False, add_generation_prompt=True
            )
            for r in rows
        ]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        torch.manual_seed(seed + start)
        gen = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=temperature > 0,
            temperature=temperature or None,
            top_p=top_p,
            pad_token_id=tokenizer.pad_token_id,
        )
        completions = tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)  # (B,)
        for r, story in zip(rows, completions, strict=False):
            rec = {
                "id": r["id"],
                "prompt": r["prompt"],
                "story": story.strip() or "(empty)",
                "system": system_name,
                "seed": seed,
            }
            rec.update({k: r[k] for k in ("min_words", "max_words", "source") if r.get(k) is not None})
            if step is not None:
                rec["step"] = step
            out.append(rec)
    if was_training:
        model.train()
    return out
