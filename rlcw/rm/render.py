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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json, read_json

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
        if self.type == "genrm" and self.input_template != "chat":
            raise RlcwError(
                f"a genrm needs input_template=chat, got '{self.input_template}'", hint="set rm.input_template=chat"
            )
        return self


def save_spec(spec: RMSpec, rm_dir: str | Path) -> Path:
    return atomic_write_json(Path(rm_dir) / SPEC_FILE, dataclasses.asdict(spec.check()))


def save_rm(model, tokenizer, spec: RMSpec, path):
    """Merge LoRA (if any) and save model + tokenizer + rlcw_rm.json: an RM folder."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    save_spec(spec, path)
    return path


def load_spec(rm_dir: str | Path) -> RMSpec:
    path = Path(rm_dir) / SPEC_FILE
    if not path.is_file():
        raise RlcwError(
            f"not an rlcw reward model: {SPEC_FILE} is missing",
            where=str(rm_dir),
            hint="train one with `rlcw train-rm`, or point at the folder it wrote (<run>/model)",
        )
    data = read_json(path, SPEC_FILE, hint="re-save the RM with `rlcw train-rm`")
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


TRUNCATION_WARN_SHARE = 0.05  # a scorer warns once when more of its inputs than this were cut


@dataclass
class TruncationCount:
    """How many inputs a scorer cut to its RM's `max_length` (so a cut story is never silent)."""

    inputs: int = 0
    truncated: int = 0
    warned: bool = False

    @property
    def share(self) -> float:
        return self.truncated / self.inputs if self.inputs else 0.0

    def add(self, inputs: int, truncated: int, max_length: int, kept: str) -> None:
        self.inputs, self.truncated = self.inputs + inputs, self.truncated + truncated
        if not self.warned and self.share > TRUNCATION_WARN_SHARE:
            self.warned = True
            print(
                f"[rlcw] warning: {self.truncated} of {self.inputs} reward-model inputs ({self.share:.0%}) were cut to "
                f"the RM's max_length {max_length} tokens (keeping {kept}): their score reads only part of the story",
                flush=True,
            )


def encode_for_rm(
    spec: RMSpec, tokenizer, prompts: list[str], stories: list[str], counts: TruncationCount | None = None
) -> list[list[int]]:
    """Token ids for each (prompt, story), truncated to `spec.max_length` on `spec.truncation_side` (cut inputs
    are added to `counts`)."""
    if len(prompts) != len(stories):
        raise ValueError(f"{len(prompts)} prompts but {len(stories)} stories")
    out, cut = [], 0
    for prompt, story in zip(prompts, stories, strict=False):
        ids = tokenizer(render_rm_text(spec, tokenizer, prompt, story), add_special_tokens=False)["input_ids"]
        if len(ids) > spec.max_length:
            cut += 1
            ids = ids[-spec.max_length :] if spec.truncation_side == "left" else ids[: spec.max_length]
        out.append(ids)
    if counts is not None:
        counts.add(len(out), cut, spec.max_length, "the end" if spec.truncation_side == "left" else "the start")
    return out


# --- generative RMs (rm.type=genrm): a pair of stories -> "Preferred: A|B" ---
#
# One layout serves training (`encode_genrm_example`) and scoring (`encode_genrm_prompt` +
# `encode_genrm_response_prefix`), so a GenRM always reads the layout it was trained on. Token
# ids are built piecewise: the chat-rendered frame, the prompt and each story are tokenized
# separately, so each story can be cut to its share of `max_length` without ever cutting the
# instruction or the answer. `spec.extra` holds the GenRM options: `cot` (rationale before the
# verdict), `max_rationale_tokens` (cap at training and scoring), `instruction` (optional
# override of the user instruction).

VERDICT_PREFIX = "Preferred:"
VERDICT_LABELS = ("A", "B")  # answered as one token each: " A" / " B"
RATIONALE_PREFIX = "Reasoning:"
GENRM_SYSTEM_PROMPT = "You are a careful, impartial judge of creative writing."
_INSTRUCTION = "Two stories (A and B) were written for the same prompt. Decide which one is better creative writing."
_FORMAT = {
    False: f"Answer with exactly '{VERDICT_PREFIX} A' or '{VERDICT_PREFIX} B'.",
    True: f"First write '{RATIONALE_PREFIX}' and a brief comparison, then '{VERDICT_PREFIX} A' or '{VERDICT_PREFIX} B'.",
}
_SLOTS = ("<<rlcw:prompt>>", "<<rlcw:first>>", "<<rlcw:second>>")


def genrm_cot(spec: RMSpec) -> bool:
    return bool(spec.extra.get("cot", False))


def genrm_max_rationale_tokens(spec: RMSpec) -> int:
    return int(spec.extra.get("max_rationale_tokens", 96))


def render_genrm_messages(spec: RMSpec, prompt: str, first: str, second: str) -> list[dict]:
    """The chat a GenRM answers: instruction, the prompt (if `include_prompt`), story A = `first`, story B = `second`."""
    instruction = spec.extra.get("instruction") or f"{_INSTRUCTION} {_FORMAT[genrm_cot(spec)]}"
    parts = [instruction]
    if spec.include_prompt:
        parts.append(f"[Prompt]\n{prompt.strip()}")
    parts += [f"[Story A]\n{first.strip()}", f"[Story B]\n{second.strip()}"]
    messages = [{"role": "user", "content": "\n\n".join(parts)}]
    if spec.system_prompt is not None:
        messages = [{"role": "system", "content": spec.system_prompt}] + messages
    return messages


_STORY_LABEL = re.compile(r"\b([Ss]tory) ([AB])\b")


def swap_story_labels(text: str) -> str:
    """Exchange "Story A" and "Story B" (either case of "story") in a rationale: the other order's text."""
    return _STORY_LABEL.sub(lambda m: f"{m.group(1)} {'B' if m.group(2) == 'A' else 'A'}", text)


def _genrm_frame(spec: RMSpec, tokenizer) -> list[list[int]]:
    """Token ids of the fixed text around the slots: [before prompt, before first, before second, after second]."""
    if spec.input_template != "chat":
        raise RlcwError(
            f"a genrm needs input_template=chat, got '{spec.input_template}'", hint="set rm.input_template=chat"
        )
    text = tokenizer.apply_chat_template(
        render_genrm_messages(spec, *_SLOTS), tokenize=False, add_generation_prompt=True
    )
    pieces = []
    for slot in _SLOTS:
        if slot not in text:  # include_prompt=False drops the prompt slot
            pieces.append("")
            continue
        head, text = text.split(slot, 1)
        pieces.append(head)
    pieces.append(text)
    return [tokenizer(p, add_special_tokens=False)["input_ids"] if p else [] for p in pieces]


def _cut(ids: list[int], n: int, side: str) -> list[int]:
    if len(ids) <= n:
        return ids
    return ids[-n:] if side == "left" else ids[:n]


def split_budget(n_first: int, n_second: int, budget: int) -> tuple[int, int]:
    """Token shares of two stories in `budget`: half each, and what one leaves unused goes to the other."""
    half = budget // 2
    a = min(n_first, max(half, budget - n_second))
    return a, min(n_second, budget - a)


def encode_genrm_prompt(spec: RMSpec, tokenizer, prompt: str, first: str, second: str) -> list[int]:
    """Prompt token ids (ending with the assistant header) of at most `spec.max_length` tokens.

    The writing prompt keeps its start and is cut to a quarter of `max_length`; the two stories
    share what is left (cut on `spec.truncation_side`, "left" keeps each story's ending)."""
    frame = _genrm_frame(spec, tokenizer)
    fixed = sum(len(p) for p in frame)
    p_ids = tokenizer(prompt.strip(), add_special_tokens=False)["input_ids"] if spec.include_prompt else []
    p_ids = p_ids[: spec.max_length // 4]
    budget = spec.max_length - fixed - len(p_ids)
    if budget < 2:
        raise RlcwError(
            f"rm.max_length={spec.max_length} leaves no room for the stories ({fixed} tokens of instructions)",
            hint=f"raise rm.max_length above {fixed + len(p_ids) + 64}",
        )
    a_ids = tokenizer(first.strip(), add_special_tokens=False)["input_ids"]
    b_ids = tokenizer(second.strip(), add_special_tokens=False)["input_ids"]
    na, nb = split_budget(len(a_ids), len(b_ids), budget)
    a_ids, b_ids = _cut(a_ids, na, spec.truncation_side), _cut(b_ids, nb, spec.truncation_side)
    return frame[0] + p_ids + frame[1] + a_ids + frame[2] + b_ids + frame[3]


def verdict_token_ids(tokenizer) -> tuple[int, int]:
    """Ids of the answer tokens " A" and " B" (each must be one token)."""
    out = []
    for label in VERDICT_LABELS:
        ids = tokenizer(f" {label}", add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise RlcwError(
                f"the tokenizer splits ' {label}' into {len(ids)} tokens", hint="a genrm needs single-token answers"
            )
        out.append(ids[0])
    return out[0], out[1]


def genrm_response_prefix(spec: RMSpec, rationale: str | None) -> str:
    """Assistant text before the verdict token: `Preferred:` or `Reasoning: ...\\n\\nPreferred:`."""
    if not genrm_cot(spec):
        return VERDICT_PREFIX
    if not rationale or not rationale.strip():
        raise RlcwError("a CoT genrm example has no rationale", hint="check the rationale source (rm.rationales.*)")
    return f"{RATIONALE_PREFIX} {rationale.strip()}\n\n{VERDICT_PREFIX}"


def cut_rationale(spec: RMSpec, tokenizer, rationale: str) -> str:
    """The rationale with its text after a verdict removed and capped at `max_rationale_tokens` (keeps the start)."""
    if not rationale or not rationale.strip():
        raise RlcwError("a CoT genrm example has no rationale", hint="check the rationale source (rm.rationales.*)")
    text = rationale.split(VERDICT_PREFIX, 1)[0].strip()
    if text.startswith(RATIONALE_PREFIX):
        text = text[len(RATIONALE_PREFIX) :].strip()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    cap = max(1, genrm_max_rationale_tokens(spec) - 16)  # room for the prefixes inside the generation cap
    return tokenizer.decode(ids[:cap]).strip() if len(ids) > cap else text


def encode_genrm_example(
    spec: RMSpec, tokenizer, prompt: str, first: str, second: str, verdict: str, rationale: str | None = None
) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one training example; labels are -100 except what is learnt.

    Without CoT only the verdict token is learnt (the `Preferred:` prefix is given, as when
    scoring); with CoT the whole answer is: rationale, prefix, verdict and end of turn."""
    if verdict not in VERDICT_LABELS:
        raise ValueError(f"verdict must be one of {VERDICT_LABELS}, got {verdict!r}")
    prompt_ids = encode_genrm_prompt(spec, tokenizer, prompt, first, second)
    cot = genrm_cot(spec)
    prefix = tokenizer(
        genrm_response_prefix(spec, cut_rationale(spec, tokenizer, rationale) if cot else None),
        add_special_tokens=False,
    )["input_ids"]
    answer = prefix + [verdict_token_ids(tokenizer)[VERDICT_LABELS.index(verdict)]]
    if not cot:
        return prompt_ids + answer, [-100] * (len(prompt_ids) + len(prefix)) + answer[-1:]
    answer.append(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    return prompt_ids + answer, [-100] * len(prompt_ids) + answer


def parse_verdict_prefix(generated: str) -> str | None:
    """The generated text up to and including the first `Preferred:`; None when there is none."""
    head, sep, _ = generated.partition(VERDICT_PREFIX)
    return head + sep if sep else None
