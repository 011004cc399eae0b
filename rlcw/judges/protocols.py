"""The judging protocols of the three papers: build the calls, read the replies into verdict rows.

    rows = judge_side_by_side(client, load_template("agents_room"), pairs)      # both orders
    rows = judge_side_by_side(client, load_template("litbench_writerly"), pairs)
    rows = judge_ttcw(client, "ttcw_hybrid", stories, references)

A pair is `Pair(prompt_id, prompt, system_1, story_1, system_2, story_2)`; each is judged twice,
once with system_1 shown as A (order 0) and once with system_2 as A (order 1). A verdict row
keeps the raw reply, the parsed value per dimension, and why a value is invalid.

With `verdict="logprobs"` (a local model, or a server returning logprobs) the judge writes no
text: the verdict is read from the probabilities of the label tokens after the verdict prefix
(`Preferred:`, `Plot:` ...), renormalised over the labels; the row keeps them (`probs`) and the
margin between the top two, and the value is the most probable label (never invalid).

Every row keeps `request_id` (which item, system(s), test and order) and `request_key` (a hash of
the template version and the messages), so `client.kind=replay` can re-read the replies later.

TTCW (reference-based paper): baseline = each test answered Yes/No on the story alone (Yes =
pass); original = the same with the test's expert background and the original prompt (Chakrabarty
et al. 2024: start the answer with Yes or No; needs the user's tests file); reference = each test as a 5-level Likert comparison with the reference, in both orders,
candidate score s = label when the candidate is A, -label when it is B; the test passes when the
mean of the two scores is >= 0; hybrid = originality tests (9-11) by the baseline, the others by
the reference method. A story's score is the number of tests passed out of those run; a test
with an invalid reply is neither passed nor failed, and is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcw.judges.cache import request_key
from rlcw.judges.clients.base import ChatClient
from rlcw.judges.parsing import AR_DIMENSIONS, parse_likert, parse_preference, parse_side_by_side, parse_yes_no
from rlcw.judges.templates import ORIGINALITY_TESTS, TTCW_TESTS, Template, TtcwTest, load_template
from rlcw.metrics.text import count_words

PROTOCOLS = ("agents_room", "litbench", "ttcw_baseline", "ttcw_original", "ttcw_reference", "ttcw_hybrid")
YES_NO_METHODS = ("ttcw_baseline", "ttcw_original")
VERDICTS = ("text", "logprobs")
DEFAULT_TEMPLATE = {
    "agents_room": "agents_room",
    "litbench": "litbench_writerly",
    "ttcw_baseline": "ttcw_baseline",
    "ttcw_original": "ttcw_original",
    "ttcw_reference": "ttcw_reference",
}
# logprob verdicts: the assistant text written before the label, and the labels per dimension
_AR_CLOSING = "Based on my assessment, the better story for each dimension is:\n"
_AR_NAMES = {"plot": "Plot", "creativity": "Creativity", "development": "Development"}
_AR_NAMES |= {"language_use": "Language Use", "overall": "Overall"}
VERDICT_PREFIXES = {
    "litbench": {"preferred": ("Preferred:", ("A", "B"))},
    "agents_room": {d: (f"{_AR_CLOSING}{_AR_NAMES[d]}:", ("A", "B", "Same")) for d in AR_DIMENSIONS},
}
PAIRWISE_DIMENSIONS = {"agents_room": AR_DIMENSIONS, "litbench": ("preferred",)}
_AS_OUTCOME = {"A": 1.0, "B": 0.0, "Same": 0.5}


@dataclass(frozen=True)
class Pair:
    prompt_id: str
    prompt: str
    system_1: str
    story_1: str
    system_2: str
    story_2: str


def _parse_pairwise(protocol: str, reply: str) -> dict[str, dict]:
    if protocol == "agents_room":
        return {d: p.to_dict() for d, p in parse_side_by_side(reply).items()}
    return {"preferred": parse_preference(reply).to_dict()}


def _prob_verdict(probs: dict[str, float] | None) -> dict:
    """A verdict from label probabilities: the most probable label, with the margin to the runner-up."""
    if not probs:
        return {"value": None, "valid": False, "reason": "no label probabilities"}
    ranked = sorted(probs.items(), key=lambda kv: -kv[1])
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return {"value": None, "valid": False, "reason": "labels equally probable", "probs": probs, "margin": 0.0}
    margin = ranked[0][1] - (ranked[1][1] if len(ranked) > 1 else 0.0)
    return {"value": ranked[0][0], "valid": True, "reason": None, "probs": probs, "margin": margin}


def judge_side_by_side(
    client: ChatClient,
    template: Template,
    pairs: list[Pair],
    *,
    progress: bool = True,
    orders: tuple[int, ...] = (0, 1),
    verdict: str = "text",
) -> list[dict]:
    """Agents' Room or LitBench verdict rows, one per pair and order (order 0: system_1 is A; order 1: swapped)."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, not {verdict!r}")
    jobs = []
    for pair in pairs:
        for order in orders:
            a, b = ((pair.system_1, pair.story_1), (pair.system_2, pair.story_2))[:: 1 if order == 0 else -1]
            jobs.append((pair, order, a, b, template.render(prompt=pair.prompt, story_a=a[1], story_b=b[1])))
    ids = [f"{p.prompt_id}|{a[0]}|{b[0]}" for p, _, a, b, _ in jobs]
    convs = [j[4] for j in jobs]
    if verdict == "text":
        replies = client.chat_many(convs, cache_tag=template.version, desc=template.name, progress=progress, ids=ids)
        parsed = [_parse_pairwise(template.protocol, reply) for reply in replies]
    else:
        replies = [""] * len(jobs)
        parsed = [{} for _ in jobs]
        for dim, (prefix, labels) in VERDICT_PREFIXES[template.protocol].items():
            probs = client.verdict_probs(
                convs, prefix, labels, cache_tag=template.version, desc=f"{template.name} {dim}", progress=progress
            )
            for verdicts, p in zip(parsed, probs, strict=True):
                verdicts[dim] = _prob_verdict(p)
    rows = []
    for (pair, order, a, b, conv), rid, reply, verdicts in zip(jobs, ids, replies, parsed, strict=True):
        rows.append(
            {
                "protocol": template.protocol,
                "template": template.name,
                "version": template.version,
                "verdict_kind": verdict,
                "prompt_id": pair.prompt_id,
                "prompt": pair.prompt,
                "order": order,
                "system_a": a[0],
                "system_b": b[0],
                "words_a": count_words(a[1]),
                "words_b": count_words(b[1]),
                "verdicts": verdicts,
                "raw": reply,
                "request_id": rid,
                "request_key": request_key(template.version, conv),
            }
        )
    return rows


def pair_outcomes(rows: list[dict], dimension: str) -> list[tuple[str, str, float, int, int]]:
    """(system_a, system_b, outcome for A, words_a, words_b) of every valid verdict on `dimension`."""
    out = []
    for r in rows:
        v = r["verdicts"].get(dimension)
        if v and v["valid"]:
            out.append((r["system_a"], r["system_b"], _AS_OUTCOME[v["value"]], r["words_a"], r["words_b"]))
    return out


# --- TTCW ----------------------------------------------------------------------------------


def _tests(test_ids: list[int] | None, tests: list[TtcwTest] | None = None) -> list[TtcwTest]:
    pool = list(tests) if tests else list(TTCW_TESTS)
    chosen = [t for t in pool if not test_ids or t.idx in test_ids]
    if test_ids and len(chosen) != len(set(test_ids)):
        bad = sorted(set(test_ids) - {t.idx for t in pool})
        raise ValueError(f"unknown TTCW test id(s) {bad}; tests are numbered {', '.join(str(t.idx) for t in pool)}")
    return chosen


def _reference_background(test: TtcwTest) -> str:
    """The reference template's background: the expert text and the question, or the question alone."""
    return f"{test.background}\n\nQuestion: {test.question}" if test.background else test.question


def judge_ttcw(
    client: ChatClient,
    protocol: str,
    stories: list[dict],
    references: dict[str, str] | None = None,
    *,
    test_ids: list[int] | None = None,
    tests: list[TtcwTest] | None = None,
    baseline_template: Template | None = None,
    reference_template: Template | None = None,
    progress: bool = True,
) -> list[dict]:
    """TTCW verdict rows for story records (`references`: prompt_id -> reference story text; `tests`: the
    tests with background from `load_ttcw_tests`, needed by the original template, which is then the
    default for the Yes/No tests of every method)."""
    chosen = _tests(test_ids, tests)
    if baseline_template is None:
        with_background = tests is not None and all(t.background for t in tests)
        name = "ttcw_original" if protocol == "ttcw_original" or with_background else "ttcw_baseline"
        baseline_template = load_template(name, name)
    if baseline_template.protocol == "ttcw_original" and not all(t.background for t in chosen):
        raise ValueError(
            "the original TTCW prompt needs each test's background: give the tests file (ttcw_tests=PATH)"
        )
    by_baseline = [
        t for t in chosen if protocol in YES_NO_METHODS or (protocol == "ttcw_hybrid" and t.idx in ORIGINALITY_TESTS)
    ]
    by_reference = [t for t in chosen if t not in by_baseline]
    rows: list[dict] = []
    if by_baseline:
        tpl = baseline_template
        jobs = [(s, t) for s in stories for t in by_baseline]
        msgs = [
            tpl.render(
                prompt=s["prompt"],
                story=s["story"],
                dimension=t.dimension,
                question=t.question,
                background=t.background,
            )
            for s, t in jobs
        ]
        ids = [f"{s['prompt_id']}|{s['system']}|test{t.idx}" for s, t in jobs]
        replies = client.chat_many(msgs, cache_tag=tpl.version, desc=tpl.name, progress=progress, ids=ids)
        for (s, t), msg, rid, reply in zip(jobs, msgs, ids, replies, strict=True):
            parsed = parse_yes_no(reply)
            score = None if not parsed.valid else float(parsed.value == "Yes")
            row = _ttcw_row(tpl.protocol, tpl, s, t, None, parsed.to_dict(), score, reply)
            rows.append(dict(row, request_id=rid, request_key=request_key(tpl.version, msg)))
    if by_reference:
        if references is None:
            raise ValueError("the reference-based TTCW method needs reference stories")
        tpl = reference_template or load_template("ttcw_reference", "ttcw_reference")
        jobs = [(s, t, order) for s in stories for t in by_reference for order in (0, 1)]
        msgs = []
        for s, t, order in jobs:
            ref = references[s["prompt_id"]]
            a, b = (s["story"], ref) if order == 0 else (ref, s["story"])
            msgs.append(
                tpl.render(
                    prompt=s["prompt"],
                    story_a=a,
                    story_b=b,
                    dimension=t.dimension,
                    question=t.question,
                    background=_reference_background(t),
                )
            )
        ids = [f"{s['prompt_id']}|{s['system']}|test{t.idx}|order{order}" for s, t, order in jobs]
        replies = client.chat_many(msgs, cache_tag=tpl.version, desc=tpl.name, progress=progress, ids=ids)
        for (s, t, order), msg, rid, reply in zip(jobs, msgs, ids, replies, strict=True):
            parsed = parse_likert(reply)
            score = None if not parsed.valid else float(parsed.value if order == 0 else -parsed.value)
            row = _ttcw_row("ttcw_reference", tpl, s, t, order, parsed.to_dict(), score, reply)
            rows.append(dict(row, request_id=rid, request_key=request_key(tpl.version, msg)))
    return rows


def _ttcw_row(
    method: str, tpl: Template, story: dict, test: TtcwTest, order: int | None, verdict: dict, score, reply: str
) -> dict:
    return {
        "protocol": method,
        "template": tpl.name,
        "version": tpl.version,
        "prompt_id": story["prompt_id"],
        "prompt": story.get("prompt"),
        "system": story["system"],
        "words": count_words(story["story"]),
        "test": test.idx,
        "dimension": test.dimension,
        "order": order,
        "verdict": verdict,
        "candidate_score": score,
        "raw": reply,
    }


def ttcw_test_results(rows: list[dict]) -> dict[tuple[str, str], dict[int, bool | None]]:
    """(system, prompt_id) -> {test: passed (True/False) or None when a reply was invalid}."""
    grouped: dict[tuple[str, str, int, str], list[float | None]] = {}
    for r in rows:
        grouped.setdefault((r["system"], r["prompt_id"], r["test"], r["protocol"]), []).append(r["candidate_score"])
    out: dict[tuple[str, str], dict[int, bool | None]] = {}
    for (system, pid, test, method), scores in grouped.items():
        if any(s is None for s in scores):
            passed = None
        elif method in YES_NO_METHODS:
            passed = scores[0] == 1.0
        else:  # both orders, candidate's view: pass when the mean is >= 0
            passed = sum(scores) / len(scores) >= 0
        out.setdefault((system, pid), {})[test] = passed
    return out


def ttcw_story_scores(rows: list[dict]) -> list[dict]:
    """One row per story: tests passed, tests run, tests with an invalid reply."""
    out = []
    for (system, pid), tests in sorted(ttcw_test_results(rows).items()):
        passed = sum(1 for v in tests.values() if v is True)
        invalid = sum(1 for v in tests.values() if v is None)
        out.append(
            {
                "system": system,
                "prompt_id": pid,
                "score": passed,
                "tests_run": len(tests),
                "invalid_tests": invalid,
                "tests": {str(k): v for k, v in sorted(tests.items())},
            }
        )
    return out
