"""The reward-model contract: the metadata an RM folder carries and the ONE function that
renders and tokenizes text for it.

RM training, RL scoring, the reward server and evaluation all call `encode_for_rm`, so a
reward model always sees exactly the text layout it was trained on (we never rely on TRL
re-rendering a path string with some chat template).

`<rm_dir>/rlcw_rm.json` holds an `RMSpec`: type (bt | genrm), base model, input template,
whether the prompt is included, system prompt, max length, truncation side, pad token.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json

SPEC_FILE = "rlcw_rm.json"
TEMPLATES = ("chat", "plain", "story")


@dataclass
class RMSpec:
    """What an RM folder says about itself (`rlcw_rm.json`)."""

    type: str = "bt"
    base_model: str = ""
    input_template: str = "chat"  # chat: user=prompt, assistant=story | plain: labelled text | story: story only
    include_prompt: bool = True
    system_prompt: str | None = None
    max_length: int = 512
    truncation_side: str = "left"  # which end is cut when too long ("left" keeps the story's ending)
    pad_token: str = "<|endoftext|>"
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def check(self) -> RMSpec:
        if self.type not in ("bt", "genrm"):
            raise RlcwError(f"unknown RM type '{self.type}'", hint="use bt or genrm")
        if self.input_template not in TEMPLATES:
            raise RlcwError(f"unknown RM input template '{self.input_template}'", hint=f"use one of {TEMPLATES}")
        if self.max_length < 1:
            raise RlcwError(f"max_length must be at least 1, got {self.max_length}")
        if self.truncation_side not in ("left", "right"):
            raise RlcwError(f"truncation_side must be left or right, got '{self.truncation_side}'")
        return self


def save_spec(spec: RMSpec, rm_dir: str | Path) -> Path:
    return atomic_write_json(Path(rm_dir) / SPEC_FILE, dataclasses.asdict(spec.check()))


def load_spec(rm_dir: str | Path) -> RMSpec:
    path = Path(rm_dir) / SPEC_FILE
    if not path.is_file():
        raise RlcwError(
            f"not an rlcw reward model: {SPEC_FILE} is missing",
            where=str(rm_dir),
            hint="train one with `rlcw train-rm`, or point at the folder it wrote (<run>/model)",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RlcwError(f"corrupt {SPEC_FILE}: {exc}", where=str(path), hint="re-save the RM with `rlcw train-rm`") from None
    known = {f.name for f in dataclasses.fields(RMSpec)}
    return RMSpec(**{k: v for k, v in data.items() if k in known}).check()


def render_rm_text(spec: RMSpec, tokenizer, prompt: str, story: str) -> str:
    """The text a reward model scores for (prompt, story)."""
    if spec.input_template == "story" or not spec.include_prompt:
        if spec.input_template == "chat":
            messages = [{"role": "assistant", "content": story}]
        else:
            return story.strip() + (tokenizer.eos_token or "")
    elif spec.input_template == "plain":
        return f"Prompt: {prompt.strip()}\n\nStory: {story.strip()}{tokenizer.eos_token or ''}"
    else:
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": story}]
    if spec.system_prompt is not None:
        messages = [{"role": "system", "content": spec.system_prompt}] + messages
    return tokenizer.apply_chat_template(messages, tokenize=False)


def encode_for_rm(spec: RMSpec, tokenizer, prompts: list[str], stories: list[str]) -> list[list[int]]:
    """Token ids for each (prompt, story), truncated to `spec.max_length` on `spec.truncation_side`."""
    if len(prompts) != len(stories):
        raise ValueError(f"{len(prompts)} prompts but {len(stories)} stories")
    out = []
    for prompt, story in zip(prompts, stories):
        ids = tokenizer(render_rm_text(spec, tokenizer, prompt, story), add_special_tokens=False)["input_ids"]
        if len(ids) > spec.max_length:
            ids = ids[-spec.max_length :] if spec.truncation_side == "left" else ids[: spec.max_length]
        out.append(ids)
    return out
