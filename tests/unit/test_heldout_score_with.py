"""heldout.score_with by hand: a python scorer and a scripted rubric judge on start and tuned samples -> the
change per scorer and per criterion with a CI over prompts, NaN pairs left out and counted, bad specs refused."""

from __future__ import annotations

import json

import pytest

from rlcw.errors import RlcwError
from rlcw.measure.heldout import check_score_with, score_with


def _records(stories: list[str]) -> list[dict]:
    # 2 prompts x 2 samples, in the held-out order (prompt-major)
    return [
        {"prompt_id": f"p{i // 2}", "sample_index": i % 2, "prompt": f"Prompt {i // 2}.", "story": s}
        for i, s in enumerate(stories)
    ]


def words(prompts, completions, **kwargs):
    return [float(len(c.split())) for c in completions]


def test_a_python_scorer_and_a_rubric_are_scored_on_both_policies(tmp_path):
    start = _records(["one two", "one", "a b c", "a"])  # words 2, 1, 3, 1
    tuned = _records(["GOOD one two three", "GOOD x", "a b c", "GOOD end"])  # words 4, 2, 3, 2
    rules = tmp_path / "judge.jsonl"
    rules.write_text(
        json.dumps({"match": ["GOOD", "Does the story end?"], "reply": "Answer: Yes"})
        + "\n"
        + json.dumps({"match": ["a b c", "Does the story end?"], "reply": "no idea"})
        + "\n"
        + json.dumps({"match": ["Does the story end?"], "reply": "Answer: No"})
        + "\n"
        + json.dumps({"match": ["GOOD"], "reply": "Answer: No"})
        + "\n"
        + json.dumps({"reply": "Answer: Yes"})
        + "\n"
    )
    criteria = [{"name": "ends", "question": "Does the story end?"}, {"name": "named", "question": "Is it named?"}]
    specs = {
        "words": {"type": "python", "target": f"{__name__}:words"},
        "rubric": {
            "type": "rubric",
            "verdict": "text",
            "criteria": criteria,
            "client": {"kind": "scripted", "script": str(rules)},
        },
    }
    out, rows = score_with(specs, start, tuned, {}, n_resamples=200)
    w = out["words"]
    # per prompt: p0 start 1.5 tuned 3.0 (+1.5), p1 start 2.0 tuned 2.5 (+0.5): mean +1.0, CI within [0.5, 1.5]
    assert (w["start"], w["tuned"], w["delta"], w["dropped"]) == pytest.approx((1.75, 2.75, 1.0, 0))
    assert 0.5 <= w["lo"] <= w["hi"] <= 1.5 and w["n_prompts"] == 2
    ends, named = out["rubric"]["criteria"]["ends"], out["rubric"]["criteria"]["named"]
    # ends: start No, No, invalid, No; tuned Yes, Yes, invalid, Yes -> the "a b c" pair (p1, sample 0) left out
    assert (ends["start"], ends["tuned"], ends["delta"], ends["dropped"]) == pytest.approx((0.0, 1.0, 1.0, 1))
    # named: start Yes x4; tuned No (GOOD), No, Yes, No -> 1.0 -> 0.25
    assert (named["start"], named["tuned"], named["delta"]) == pytest.approx((1.0, 0.25, -0.75))
    # the rubric score: mean of the valid criteria per story; start 0.5, 0.5, 1.0, 0.5; tuned 0.5, 0.5, 1.0, 0.5
    r = out["rubric"]
    assert (r["start"], r["tuned"], r["delta"], r["dropped"]) == pytest.approx((0.625, 0.625, 0.0, 0))
    # every story's values: the tuned "a b c" story (prompt p1, sample 0) has no "ends" verdict
    assert len(rows) == 8 and rows[6] == {
        "policy": "tuned",
        "prompt_id": "p1",
        "sample_index": 0,
        "words": 3.0,
        "rubric": 1.0,
        "rubric/ends": None,
        "rubric/named": 1.0,
    }


def test_bad_specs_are_refused_with_their_key():
    with pytest.raises(RlcwError, match=r"heldout.score_with.len.type") as exc:
        check_score_with({"len": {"type": "length_range"}})
    assert "token counts" in str(exc.value)
    with pytest.raises(RlcwError, match=r"heldout.score_with.x"):
        check_score_with({"x": {"type": "nope"}})
    with pytest.raises(RlcwError, match=r"heldout.score_with"):
        check_score_with(["rubric"])
