"""A reference-anchored, bounded reward (PAR: Fu et al., 2025, "Reward Shaping to Mitigate Reward Hacking in RLHF").

    par = AnchoredReward(bt_scorer, load_references("runs/refs/samples/stories.jsonl"))
    par(prompts, completions)        # mean_j sigmoid(r(y) - r(y_ref_j)) over the prompt's reference stories

Any scalar reward becomes sigmoid(r(y) - r(y_ref)): centred on a story the start model wrote for the same
prompt and bounded in (0, 1), so once a policy beats its references by a few reward units the reward stops
paying for more of whatever buys reward (the paper's two properties: a bounded reward that grows fast near the
reference and converges slowly). With several references per prompt the reward is their mean (the paper's
multi-reference variant); `human=True` adds the record's human-written `reference` story as one more anchor.

References are story records (`prompt`, `story`, optional `reference`), keyed by the prompt's text (the last
user message of a conversational prompt, `rlcw.data.records.message_text`). Each prompt's references are scored
once by the wrapped reward, with the same per-row columns the completions came with, and cached. A prompt with
no reference is an error naming the file: a reward never returns a silent default.

In a reward spec: `anchor: {references: FILE, human: false, per_prompt: 4}` on any spec
(`rlcw.rewards.factory`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from rlcw.data.records import message_text, read_stories
from rlcw.errors import RlcwError

ANCHOR_OPTIONS = ("references", "human", "per_prompt")
PER_COMPLETION = ("completion_ids", "completion")  # TRL keyword arguments that describe the completions, not the row


def load_references(path: str | Path, human: bool = False, per_prompt: int | None = None) -> dict[str, list[str]]:
    """prompt text -> its reference stories (at most `per_prompt` model stories, in file order, then the human
    story when `human` and the record has one; each distinct text once)."""
    refs: dict[str, list[str]] = {}
    humans: dict[str, str] = {}
    for rec in read_stories(path):
        stories = refs.setdefault(rec["prompt"], [])
        if per_prompt is None or len(stories) < per_prompt:
            if rec["story"] not in stories:
                stories.append(rec["story"])
        if human and rec.get("reference"):
            humans.setdefault(rec["prompt"], rec["reference"])
    for prompt, text in humans.items():
        if text not in refs[prompt]:
            refs[prompt].append(text)
    return refs


def default_references(specs: dict, path: str) -> list[str]:
    """Every reward spec whose `anchor` names no `references` is anchored on `path` (a recipe's own start stories);
    returns the names of the specs anchored on `path` (so calling it again says the same)."""
    for spec in specs.values():
        if isinstance(spec, dict) and isinstance(spec.get("anchor"), dict) and not spec["anchor"].get("references"):
            spec["anchor"]["references"] = path
    return [
        name
        for name, spec in specs.items()
        if isinstance(spec, dict) and isinstance(spec.get("anchor"), dict) and spec["anchor"]["references"] == path
    ]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class AnchoredReward:
    """`inner` (TRL's reward signature) as mean_j sigmoid(inner(y) - inner(y_ref_j)); see the module docstring."""

    def __init__(self, inner: Callable, references: dict[str, list[str]], source: str = "references"):
        if not references:
            raise ValueError(f"{source} holds no reference story")
        self.inner, self.references, self.source = inner, references, source
        self.__name__ = getattr(inner, "__name__", "anchored")
        self._scores: dict[str, list[float]] = {}

    def reference_scores(self, prompts: list, columns: dict[str, list]) -> list[list[float]]:
        """Each prompt's reference scores under `inner`, scored once per prompt text (the first row's columns)."""
        todo: dict[str, int] = {}
        for i, p in enumerate(prompts):
            key = message_text(p)
            if key not in self._scores and key not in todo:
                if key not in self.references:
                    raise RlcwError(
                        f"no reference story for the prompt {key[:80]!r}",
                        where=self.source,
                        hint="write start-model stories for every training prompt (rlcw generate) into this file",
                    )
                todo[key] = i
        if todo:
            rows = [(key, i, story) for key, i in todo.items() for story in self.references[key]]
            conv = bool(prompts) and isinstance(prompts[0], list)
            comps = [[{"role": "assistant", "content": s}] if conv else s for _, _, s in rows]
            cols = {k: [v[i] for _, i, _ in rows] for k, v in columns.items()}
            values = self.inner([prompts[i] for _, i, _ in rows], comps, **cols)
            for (key, _, _), v in zip(rows, values, strict=True):
                self._scores.setdefault(key, []).append(float(v))
        return [self._scores[message_text(p)] for p in prompts]

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        own = self.inner(prompts, completions, **kwargs)
        columns = {  # the dataset's per-row columns (the prompt's), not the completions' own token ids
            k: v
            for k, v in kwargs.items()
            if k not in PER_COMPLETION and isinstance(v, list) and len(v) == len(prompts)
        }
        refs = self.reference_scores(list(prompts), columns)
        return [
            float("nan") if r is None or math.isnan(r) else sum(sigmoid(r - b) for b in rs) / len(rs)
            for r, rs in zip(own, refs, strict=True)
        ]
