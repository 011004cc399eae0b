"""Reference injection into GRPO groups (human-reference injection, HRI: POLARIS, Rajendhran et al. 2026).

    refs = ReferenceInjection.load("bundled", tokenizer, eos_id=2, cap=88)   # prompt text -> reference token ids
    rows = refs.rows(prompt_texts, group=4)          # the batch rows that carry a reference instead of a sample
    logps = teacher_forced_logprobs(model, prompts, completions, generation_config, pad_id)  # one forward

In every GRPO group whose prompt has a reference story, one of the group's `num_generations` completions is that
story, teacher-forced, instead of a sample: the reward scores it like any completion, and the group's advantages
are computed with it, so a reference that beats the policy's samples is a high-reward anchor the policy is pulled
towards (and, with the length terms, an example of ending inside the asked range). The last row of each group is
the one replaced, so the samples keep their places; the other rows are sampled as usual, and the replaced one is
not sampled at all.

The loss needs the log-probability the rollout "drew" each token with, for the importance weights (rlcw.rl.grpo.
is_correction): for a reference token it is the rollout copy's probability of that token under the same processed
distribution as a sampled token's (temperature, top-k/p, repetition penalty), so pi/mu is the policy/copy gap as for
a sample. A token outside the top-k/p support has mu = 0 and its weight is the cap.

References are story records (`prompt`, `story`; rlcw.data.records), keyed by the prompt's text (the last user
message of a conversational prompt) as the PAR anchor keys them; the first story of a prompt is its reference.
`bundled` is rlcw/data/bundled/references.jsonl (one story written for each bundled `train` prompt that fits an
88-token cap). A reference that with its EOS would not fit the completion cap is an error naming the file and the
prompt: a cut reference would teach the policy to run to the cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlcw.data.bundled import resolve_data_path
from rlcw.data.records import message_text, read_stories
from rlcw.errors import RlcwError


@dataclass
class ReferenceInjection:
    """Each prompt text's reference as completion token ids (the story's tokens, then the EOS id)."""

    ids: dict[str, list[int]]
    path: str

    @classmethod
    def load(cls, value: str, tokenizer, eos_id: int, cap: int) -> ReferenceInjection:
        """The references of the story-record file `value` (`bundled`: the bundled ones), tokenised once."""
        check_references(value)
        path = resolve_data_path(value, "references.jsonl")
        ids: dict[str, list[int]] = {}
        for rec in read_stories(path):
            if rec["prompt"] in ids:
                continue
            tokens = tokenizer(rec["story"], add_special_tokens=False)["input_ids"] + [eos_id]
            if len(tokens) > cap:
                raise RlcwError(
                    f"the reference for {rec['prompt'][:60]!r} is {len(tokens)} tokens with its EOS, over the "
                    f"completion cap of {cap}",
                    where=f"{path} record {rec.get('id', '?')}",
                    hint="a shorter story, or a larger train.max_completion_length",
                )
            ids[rec["prompt"]] = tokens
        return cls(ids, str(path))

    def covered(self, prompts: list) -> int:
        """How many of `prompts` (dataset prompts: text or conversations) have a reference."""
        return sum(message_text(p) in self.ids for p in prompts)

    def check_coverage(self, rows: Sequence[dict]) -> int:
        """How many training prompt rows (rlcw.data.prompts rows: `prompt`, or their own `messages`) have a
        reference; none is an error: the file would inject nothing, and nothing but a missing metric would say so."""
        covered = self.covered([row.get("messages") or row["prompt"] for row in rows])
        if not covered:
            raise RlcwError(
                f"none of the {len(rows)} training prompts has a reference in this file: it would inject nothing",
                where=f"rollout.references ({self.path})",
                hint="references are matched by the prompt's text: a story record's `prompt` must be a training "
                "prompt's text (its last user message), or set rollout.references=null",
            )
        return covered

    def rows(self, texts: list[str], group: int) -> list[int]:
        """The rows to replace: the last of each group of `group` consecutive rows (TRL repeats each prompt
        `num_generations` times in a row), where the group's prompt has a reference."""
        if group < 2 or len(texts) % group:
            raise RlcwError(
                f"reference injection needs groups of >= 2 rows; got {len(texts)} rows in groups of {group}",
                where="train.num_generations",
            )
        out = []
        for start in range(0, len(texts), group):
            block = texts[start : start + group]
            if len(set(block)) != 1:
                raise RlcwError(
                    "a GRPO group holds different prompts", where="rollout.references", hint="a bug: report it"
                )
            if block[0] in self.ids:
                out.append(start + group - 1)
        return out


@torch.inference_mode()
def teacher_forced_logprobs(
    model, prompts: list[list[int]], completions: list[list[int]], cfg, pad_id: int
) -> list[list[float]]:
    """log mu of each completion token under `model` after `cfg`'s logits processors (a GenerationConfig: the
    distribution the sampler draws from), position by position as the sampler sees them, for every row in one
    forward: the rows left-padded (positions from the mask, as the sampler's prefill), logits only where a completion
    token is predicted. Without a repetition penalty the processors read only the scores, so each row's positions go
    through them at once; with it (it reads the prefix) one position at a time."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    from rlcw.sampling import left_pad, logits_processors

    device = next(model.parameters()).device
    ids, mask = left_pad([p + c for p, c in zip(prompts, completions, strict=True)], pad_id, device=device)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    # logits of the last positions only: each completion's tokens and the one before them (the last predicts nothing)
    keep = max(len(c) for c in completions) + 1
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep).logits
    procs = logits_processors(cfg)
    per_position = any(isinstance(p, RepetitionPenaltyLogitsProcessor) for p in procs)
    out = []
    for i, completion in enumerate(completions):
        n = len(completion)
        rows = logits[i, keep - n - 1 : keep - 1].float()  # (n, V): row t predicts completion token t
        if per_position:  # the penalty reads the row's own tokens (no padding), as a one-row prefill has them
            first, start = ids.size(1) - len(prompts[i]) - n, ids.size(1) - n
            scores = torch.cat([procs(ids[i : i + 1, first : start + t], rows[t : t + 1]) for t in range(n)])
        else:
            scores = procs(ids[i : i + 1].expand(n, -1), rows)
        target = torch.tensor(completion, device=device)[:, None]
        out.append(torch.log_softmax(scores, dim=-1).gather(1, target)[:, 0].tolist())
    return out


def check_references(value: str | None) -> None:
    """`rollout.references` names a file that exists (before any model loads)."""
    if value is not None and not resolve_data_path(value, "references.jsonl").is_file():
        raise RlcwError(
            f"reference file not found: {value}",
            where="rollout.references",
            hint="a story-record jsonl (prompt, story), `bundled`, or null for no injection",
        )
