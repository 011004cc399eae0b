"""Rubric rewards: a judge answers yes/no criteria about each story; the reward is their weighted mean.

    r = RubricReward(client={"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "judge"})
    r(prompts, completions)          # -> [weighted mean of P(yes) per story]; NaN when no criterion was read
    reward.specs.rubric = {type: rubric, weight: 1.0, criteria: my_rubric.yaml, client: {...}}

Criteria (`criteria`): `ttcw` (default: the 14 Torrance Test of Creative Writing questions rlcw's
judge ships, rlcw.judges.templates.TTCW_TESTS, weight 1 each), `ttcw:1,9,13` (those tests), a list, or a YAML/JSON file holding
the list (or a mapping with a `criteria` list). An item is a question string or a mapping
{question, name (default c<k>), weight (default 1), dimension (default the name)}.

Each (story, criterion) is one judge conversation rendered from a `ttcw_baseline`-protocol template
(default `ttcw_baseline`: the story, the dimension, the question, "end with Answer: Yes|No").
- `verdict: logprobs` (default): the judge's answer is started with "Answer:" and P(yes) is read from
  the probabilities of " Yes" / " No" at the next token, renormalised over the two (a local model, or
  an OpenAI-compatible server that returns `top_logprobs` and continues a final assistant message,
  e.g. vLLM). The judge writes no reasoning first: one forward per conversation.
- `verdict: text`: the judge writes its reply (`max_tokens`), `rlcw.judges.parsing.parse_yes_no`
  reads it (real replies start "Yes," / "No." or end "Answer: No"); Yes = 1, No = 0. A reply with no
  verdict, two verdicts or a hedge is invalid: it is counted (`rubric/invalid`) and left out of the
  weighted mean, never read as a No.
A story whose criteria were all invalid gets NaN, and `rubric/r/no_verdict` counts those stories per batch.
What a trainer makes of the NaN: TRL's GRPO/RLOO sum the weighted rewards with nansum, so the term counts 0 for
that story (a story with no valid reward at all is left out of its group's baseline and gets no advantage);
`rlcw ppo` gives the story the batch mean of the rubric's valid scores (0 when no story of the batch has one),
so the term moves no advantage, and warns (`rlcw.rl.ppo.rollout.score_completions`).

All stories x criteria of a batch go to the judge in one call (`rlcw.judges.client`): a local model
scores `client.concurrency` conversations per forward, a server gets `client.concurrency` requests in
flight; `client.cache_dir` reuses the judge cache (a repeated story costs nothing). Logged through
TRL's `log_metric` (reward name `r`): `rubric/r/<criterion>` (mean P(yes) or yes-share of the batch),
`rubric/r/invalid` (share of invalid verdicts), `rubric/r/no_verdict` (stories with no valid verdict),
`rubric/r/no_signal` (criteria whose verdict was the same for every story of the batch: they move no
advantage); the RL report plots them (`plots/rubric.png`). A 135M judge (the embedded model) is weak: its
P(yes) is close to a constant per criterion; use a large served judge for training (configs/grpo/rubric_cpu.yaml
shows a vLLM-served one). `transformers serve` returns no logprobs: with it use `verdict: text`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlcw.data.records import message_text
from rlcw.errors import RlcwError

VERDICTS = ("logprobs", "text")
ANSWER_PREFIX = "Answer:"
LABELS = ("Yes", "No")
RESERVED = ("invalid", "no_signal", "no_verdict")  # batch statistics logged beside the criteria


@dataclass(frozen=True)
class Criterion:
    name: str
    question: str
    weight: float = 1.0
    dimension: str = ""


def ttcw_criteria(ids: list[int] | None = None) -> list[Criterion]:
    """The TTCW tests as criteria `ttcw<id>` (all 14, or those numbered `ids`)."""
    from rlcw.judges.templates import TTCW_TESTS

    known = {t.idx for t in TTCW_TESTS}
    bad = sorted(set(ids or []) - known)
    if bad:
        raise RlcwError(f"unknown TTCW test id(s) {bad}", where="criteria", hint="tests are numbered 1 to 14")
    return [Criterion(f"ttcw{t.idx}", t.question, 1.0, t.dimension) for t in TTCW_TESTS if not ids or t.idx in ids]


def _criterion(item: Any, k: int, where: str) -> Criterion:
    hint = "an item is a question or {question: ..., name: ..., weight: 1.0}"
    if isinstance(item, str):
        item = {"question": item}
    if not isinstance(item, dict):
        raise RlcwError("a criterion must be a question or a mapping", where=f"{where} item {k}", hint=hint)
    unknown = set(item) - {"question", "name", "weight", "dimension"}
    if unknown:
        raise RlcwError(f"unknown key '{sorted(unknown)[0]}'", where=f"{where} item {k}", hint=hint)
    question = item.get("question")
    if not isinstance(question, str) or not question.strip():
        raise RlcwError("missing or empty 'question'", where=f"{where} item {k}", hint=hint)
    weight = item.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        raise RlcwError(f"weight must be a number >= 0, not {weight!r}", where=f"{where} item {k} key 'weight'")
    name = str(item.get("name") or f"c{k + 1}")
    if name in RESERVED:
        raise RlcwError(f"'{name}' is a reserved name", where=f"{where} item {k} key 'name'", hint="rename it")
    return Criterion(name, question.strip(), float(weight), str(item.get("dimension") or name))


def load_criteria(spec: str | list | None) -> list[Criterion]:
    """Criteria from `ttcw`/None, a list of items, or a YAML/JSON file of them (see the module docstring)."""
    if spec is None or spec == "ttcw":
        return ttcw_criteria()
    if isinstance(spec, str) and spec.startswith("ttcw:"):
        try:
            return ttcw_criteria([int(x) for x in spec[5:].split(",")])
        except ValueError:
            raise RlcwError(f"'{spec}' is not ttcw:<ids>", where="criteria", hint="e.g. ttcw:1,9,13") from None
    where = "criteria"
    if isinstance(spec, (str, Path)):
        path, where = Path(spec).expanduser(), str(spec)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RlcwError(
                f"cannot read the criteria file: {exc.strerror}",
                where=where,
                hint="criteria: ttcw, a list, or a YAML/JSON file",
            ) from None
        try:
            spec = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise RlcwError(f"cannot parse the criteria file: {exc}", where=where) from None
        if isinstance(spec, dict) and "criteria" in spec:
            spec = spec["criteria"]
    if not isinstance(spec, (list, tuple)) or not spec:
        raise RlcwError("criteria must be a non-empty list", where=where, hint="e.g. ['Does the story end?']")
    out = [_criterion(item, k, where) for k, item in enumerate(spec)]
    names = [c.name for c in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise RlcwError(f"two criteria share the name '{dup}'", where=where, hint="give each criterion its own name")
    if not sum(c.weight for c in out) > 0:
        raise RlcwError("every criterion has weight 0", where=where)
    return out


def weighted_rubric(values: list[list[float | None]], weights: list[float]) -> list[float]:
    """Per story: sum_c w_c v_c / sum_c w_c over the criteria with a value (None = invalid); NaN when none."""
    out = []
    for row in values:
        pairs = [(w, v) for w, v in zip(weights, row, strict=True) if v is not None and w > 0]
        total = sum(w for w, _ in pairs)
        out.append(sum(w * v for w, v in pairs) / total if total > 0 else math.nan)
    return out


def criterion_stats(values: list[list[float | None]], names: list[str]) -> dict[str, float]:
    """Batch means per criterion (by name), the share of invalid verdicts (`invalid`) and the number of
    criteria with no signal (`no_signal`: every valid verdict on the same side of 1/2)."""
    stats: dict[str, float] = {}
    no_signal = 0
    for j, name in enumerate(names):
        col = [row[j] for row in values if row[j] is not None]
        stats[name] = sum(col) / len(col) if col else math.nan
        if col and len({v > 0.5 for v in col}) == 1:
            no_signal += 1
    cells = [v for row in values for v in row]
    stats["invalid"] = sum(v is None for v in cells) / len(cells) if cells else 0.0
    stats["no_signal"] = float(no_signal)
    return stats


class RubricReward:
    """TRL reward callable and pointwise scorer: the weighted mean of a judge's yes/no answers.

    `score` keeps the (stories, criteria) verdicts of its last call in `last_values` (None = invalid) and the
    batch statistics in `last_stats`. `nan_is_no_verdict` tells a trainer that a NaN score means "the judge gave
    no valid verdict", not a bug (rlcw ppo fills it instead of stopping)."""

    nan_is_no_verdict = True

    def __init__(
        self,
        client: dict | None = None,
        criteria: str | list | None = "ttcw",
        verdict: str = "logprobs",
        template: str = "ttcw_baseline",
        max_tokens: int = 64,
        judge=None,
    ):
        from rlcw.judges.clients.factory import make_client
        from rlcw.judges.templates import load_template

        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")
        self.criteria = load_criteria(criteria)
        self.template = load_template(template, "ttcw_baseline")
        self.verdict, self.max_tokens = verdict, int(max_tokens)
        self.client = (
            judge
            if judge is not None
            else make_client(dict(client or {"kind": "local", "model": "smollm2-135m-instruct"}))
        )
        if verdict == "logprobs" and self.client.cfg.kind not in ("local", "openai"):
            raise ValueError(f"verdict=logprobs needs client.kind local or openai, not {self.client.cfg.kind}")
        self.last_stats: dict[str, float] = {}
        self.last_values: list[list[float | None]] = []
        self.progress = False
        self.__name__ = "rubric"

    def conversations(self, prompts: list[str], stories: list[str]) -> list[list[dict]]:
        """One conversation per (story, criterion), story-major."""
        return [
            self.template.render(prompt=p, story=s, dimension=c.dimension, question=c.question)
            for p, s in zip(prompts, stories, strict=True)
            for c in self.criteria
        ]

    def verdicts(self, prompts: list[str], stories: list[str]) -> list[list[float | None]]:
        """(stories, criteria) P(yes) (logprobs) or 1/0 (text); None where the verdict is invalid."""
        from rlcw.judges.parsing import parse_yes_no

        convs = self.conversations(prompts, stories)
        tag, desc = self.template.version, f"rubric {len(convs)} verdicts"
        if self.verdict == "logprobs":
            probs = self.client.verdict_probs(
                convs, ANSWER_PREFIX, LABELS, cache_tag=tag, desc=desc, progress=self.progress
            )
            flat = [None if p is None else float(p["Yes"]) for p in probs]
        else:
            replies = self.client.chat_many(
                convs, max_tokens=self.max_tokens, cache_tag=tag, desc=desc, progress=self.progress
            )
            parsed = [parse_yes_no(r) for r in replies]
            flat = [float(p.value == "Yes") if p.valid else None for p in parsed]
        k = len(self.criteria)
        return [flat[i : i + k] for i in range(0, len(flat), k)]

    def score(self, prompts: list[str], stories: list[str]) -> list[float]:
        values = self.verdicts(prompts, stories)
        scores = weighted_rubric(values, [c.weight for c in self.criteria])
        self.last_values = values
        self.last_stats = criterion_stats(values, [c.name for c in self.criteria])
        self.last_stats["no_verdict"] = float(sum(math.isnan(s) for s in scores))
        return scores

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        scores = self.score([message_text(p) for p in prompts], [message_text(c) for c in completions])
        log = kwargs.get("log_metric")
        if log is not None:
            for key, value in self.last_stats.items():
                if value == value:  # a criterion with no valid verdict this batch logs nothing
                    log(f"rubric/{self.__name__}/{key}", value)
        return scores


def _at(key: str, exc: RlcwError) -> RlcwError:
    """`exc` relocated under the config key `key` (a criteria or template file keeps its path)."""
    where = exc.where or ""
    if where.startswith(("criteria", "client.")):
        where = f"{key}.{where}"
    else:
        where = f"{key} ({where})" if where else key
    return RlcwError(exc.message, where=where, hint=exc.hint or f"fix {key}.* (the options of a rubric reward spec)")


def check_rubric(options: dict, key: str) -> list[Criterion]:
    """Every check of a rubric scorer's options that needs no judge: criteria, verdict, client keys, the
    verdict's client kind. Errors name `key`.<option> (e.g. best_of.rubric.verdict); returns the criteria."""
    from rlcw.judges.clients.base import KINDS, ClientConfig

    try:
        criteria = load_criteria(options.get("criteria", "ttcw"))
    except RlcwError as exc:
        raise _at(key, exc) from None
    verdict = options.get("verdict", "logprobs")
    if verdict not in VERDICTS:
        raise RlcwError(
            f"unknown verdict '{verdict}'", where=f"{key}.verdict", hint=f"use one of {', '.join(VERDICTS)}"
        )
    client = dict(options.get("client") or {})
    unknown = sorted(set(client) - set(ClientConfig.__dataclass_fields__))
    if unknown:
        raise RlcwError(
            f"unknown client option '{unknown[0]}'",
            where=f"{key}.client",
            hint=f"valid: {', '.join(ClientConfig.__dataclass_fields__)}",
        )
    kind = client.get("kind", "local")
    if kind not in KINDS:
        raise RlcwError(
            f"unknown client kind '{kind}'", where=f"{key}.client.kind", hint=f"use one of {', '.join(KINDS)}"
        )
    if verdict == "logprobs" and kind not in ("local", "openai"):
        raise RlcwError(
            f"verdict=logprobs reads P(yes) from a local or openai judge, not client.kind={kind}",
            where=f"{key}.verdict",
            hint=f"set {key}.verdict=text (parsed Yes/No replies), or use a local/openai client",
        )
    return criteria


def rubric_scorer(options: dict, key: str) -> RubricReward:
    """A RubricReward from a config section's options (criteria, verdict, template, max_tokens, client; a client
    without `kind` is local, the embedded model unless `model` says otherwise); `check_rubric` first, and a
    constructor's error names `key`."""
    check_rubric(options, key)
    client = {"kind": "local", **dict(options.get("client") or {})}  # kind as check_rubric reads it
    kwargs = {k: options[k] for k in ("criteria", "verdict", "template", "max_tokens") if k in options}
    try:
        return RubricReward(client=client, **kwargs)
    except RlcwError as exc:
        raise _at(key, exc) from None
    except ValueError as exc:
        raise RlcwError(str(exc), where=key, hint=f"fix {key}.*") from None
