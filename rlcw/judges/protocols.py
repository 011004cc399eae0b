"""The judging protocols of the three papers: build the calls, read the replies into verdict rows.

    rows = judge_side_by_side(client, load_template("agents_room"), pairs)      # both orders
    rows = judge_side_by_side(client, load_template("litbench_writerly"), pairs)
    rows = judge_ttcw(client, "ttcw_hybrid", stories, references)

A pair is `Pair(prompt_id, prompt, system_1, story_1, system_2, story_2)`; each is judged twice,
once with system_1 shown as A (order 0) and once with system_2 as A (order 1). A verdict row
keeps the raw reply, the parsed value per dimension, and why a value is invalid.

TTCW (reference-based paper): baseline = each test answered Yes/No on the story alone (Yes =
pass); reference = each test as a 5-level Likert comparison with the reference, in both orders,
candidate score s = label when the candidate is A, -label when it is B; the test passes when the
mean of the two scores is >= 0; hybrid = originality tests (9-11) by the baseline, the others by
the reference method. A story's score is the number of tests passed out of those run; a test
with an invalid reply is neither passed nor failed, and is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcw.judges.client import ChatClient
from rlcw.judges.parsing import AR_DIMENSIONS, parse_likert, parse_preference, parse_side_by_side, parse_yes_no
from rlcw.judges.templates import ORIGINALITY_TESTS, TTCW_TESTS, Template, load_template
from rlcw.metrics.text import count_words

PROTOCOLS = ("agents_room", "litbench", "ttcw_baseline", "ttcw_reference", "ttcw_hybrid")
DEFAULT_TEMPLATE = {
    "agents_room": "agents_room",
    "litbench": "litbench_writerly",
    "ttcw_baseline": "ttcw_baseline",
    "ttcw_reference": "ttcw_reference",
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


def judge_side_by_side(
    client: ChatClient,
    template: Template,
    pairs: list[Pair],
    *,
    progress: bool = True,
    orders: tuple[int, ...] = (0, 1),
) -> list[dict]:
    """Agents' Room or LitBench verdict rows, one per pair and order (order 0: system_1 is A; order 1: swapped)."""
    jobs = []
    for pair in pairs:
        for order in orders:
            a, b = ((pair.system_1, pair.story_1), (pair.system_2, pair.story_2))[:: 1 if order == 0 else -1]
            jobs.append((pair, order, a, b, template.render(prompt=pair.prompt, story_a=a[1], story_b=b[1])))
    replies = client.chat_many([j[4] for j in jobs], cache_tag=template.version, desc=template.name, progress=progress)
    rows = []
    for (pair, order, a, b, _), reply in zip(jobs, replies, strict=False):
        rows.append(
            {
                "protocol": template.protocol,
                "template": template.name,
                "version": template.version,
                "prompt_id": pair.prompt_id,
                "prompt": pair.prompt,
                "order": order,
                "system_a": a[0],
                "system_b": b[0],
                "words_a": count_words(a[1]),
                "words_b": count_words(b[1]),
                "verdicts": _parse_pairwise(template.protocol, reply),
                "raw": reply,
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


def _tests(test_ids: list[int] | None) -> list[tuple[int, str, str]]:
    chosen = [t for t in TTCW_TESTS if not test_ids or t[0] in test_ids]
    if test_ids and len(chosen) != len(set(test_ids)):
        bad = sorted(set(test_ids) - {t[0] for t in TTCW_TESTS})
        raise ValueError(f"unknown TTCW test id(s) {bad}; tests are numbered 1-14")
    return chosen


def judge_ttcw(
    client: ChatClient,
    protocol: str,
    stories: list[dict],
    references: dict[str, str] | None = None,
    *,
    test_ids: list[int] | None = None,
    baseline_template: Template | None = None,
    reference_template: Template | None = None,
    progress: bool = True,
) -> list[dict]:
    """TTCW verdict rows for story records (`references`: prompt_id -> reference story text)."""
    tests = _tests(test_ids)
    by_baseline = [
        t for t in tests if protocol == "ttcw_baseline" or (protocol == "ttcw_hybrid" and t[0] in ORIGINALITY_TESTS)
    ]
    by_reference = [t for t in tests if t not in by_baseline]
    rows: list[dict] = []
    if by_baseline:
        tpl = baseline_template or load_template("ttcw_baseline", "ttcw_baseline")
        jobs = [(s, t) for s in stories for t in by_baseline]
        msgs = [tpl.render(prompt=s["prompt"], story=s["story"], dimension=t[1], question=t[2]) for s, t in jobs]
        for (s, t), reply in zip(
            jobs, client.chat_many(msgs, cache_tag=tpl.version, desc=tpl.name, progress=progress), strict=False
        ):
            parsed = parse_yes_no(reply)
            rows.append(
                _ttcw_row(
                    "ttcw_baseline",
                    tpl,
                    s,
                    t,
                    None,
                    parsed.to_dict(),
                    None if not parsed.valid else float(parsed.value == "Yes"),
                    reply,
                )
            )
    if by_reference:
        if references is None:
            raise ValueError("the reference-based TTCW method needs reference stories")
        tpl = reference_template or load_template("ttcw_reference", "ttcw_reference")
        jobs = [(s, t, order) for s in stories for t in by_reference for order in (0, 1)]
        msgs = []
        for s, t, order in jobs:
            ref = references[s["prompt_id"]]
            a, b = (s["story"], ref) if order == 0 else (ref, s["story"])
            msgs.append(tpl.render(prompt=s["prompt"], story_a=a, story_b=b, dimension=t[1], question=t[2]))
        for (s, t, order), reply in zip(
            jobs, client.chat_many(msgs, cache_tag=tpl.version, desc=tpl.name, progress=progress), strict=False
        ):
            parsed = parse_likert(reply)
            score = None if not parsed.valid else float(parsed.value if order == 0 else -parsed.value)
            rows.append(_ttcw_row("ttcw_reference", tpl, s, t, order, parsed.to_dict(), score, reply))
    return rows


def _ttcw_row(
    method: str, tpl: Template, story: dict, test: tuple, order: int | None, verdict: dict, score, reply: str
) -> dict:
    return {
        "protocol": method,
        "template": tpl.name,
        "version": tpl.version,
        "prompt_id": story["prompt_id"],
        "prompt": story.get("prompt"),
        "system": story["system"],
        "words": count_words(story["story"]),
        "test": test[0],
        "dimension": test[1],
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
        elif method == "ttcw_baseline":
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
