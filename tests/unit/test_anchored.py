"""The reference-anchored reward (PAR): hand-worked values, caching, columns, and the spec's checks."""

from __future__ import annotations

import json
import math

import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.anchored import AnchoredReward, load_references, sigmoid
from rlcw.rewards.factory import build_reward_set, check_rewards


def by_length(prompts, completions, **kwargs):
    """A reward of len(story): easy to work by hand."""
    by_length.calls.append((list(prompts), list(completions), kwargs))
    return [float(len(c if isinstance(c, str) else c[-1]["content"])) for c in completions]


by_length.calls = []


def test_hand_worked_values():
    # references "ab" (2) and "abcd" (4); the story "abc" (3): mean(sigmoid(1), sigmoid(-1)) = 0.5 exactly
    # the story "abcde" (5): mean(sigmoid(3), sigmoid(1)) = (0.952574 + 0.731059) / 2 = 0.841816
    par = AnchoredReward(by_length, {"p": ["ab", "abcd"]})
    out = par(["p", "p"], ["abc", "abcde"])
    assert out[0] == pytest.approx(0.5, abs=1e-12)
    assert out[1] == pytest.approx(0.841816, abs=1e-6)
    assert sigmoid(-800.0) == pytest.approx(0.0) and sigmoid(800.0) == pytest.approx(1.0)  # no overflow


def test_bounded_and_saturating():
    par = AnchoredReward(by_length, {"p": ["abcd"]})
    near, far, farther = par(["p"] * 3, ["abcde", "a" * 16, "a" * 28])
    assert 0 < near < far < farther < 1
    assert farther - far < 1e-4 < far - near  # far past the reference, more reward buys almost nothing


def test_references_scored_once_with_the_rows_columns():
    by_length.calls.clear()
    par = AnchoredReward(by_length, {"p": ["ab"], "q": ["abcdef"]})
    cols = {"min_words": [1, 2, 3], "completion_ids": [[1], [2], [3]]}
    par(["p", "q", "p"], ["a", "b", "c"], **cols)
    ref_call = by_length.calls[1]
    assert ref_call[0] == ["p", "q"] and ref_call[1] == ["ab", "abcdef"]
    assert ref_call[2] == {"min_words": [1, 2]}  # the first row of each prompt; the completions' ids left out
    par(["q"], ["abcdefg"], min_words=[9])
    assert len(by_length.calls) == 3  # cached: no second reference call


def test_conversational_prompts_and_completions():
    by_length.calls.clear()
    par = AnchoredReward(by_length, {"tell a tale": ["abc"]})
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "tell a tale"}]
    (value,) = par([prompt], [[{"role": "assistant", "content": "abc"}]])
    assert value == pytest.approx(0.5)
    assert by_length.calls[1][1] == [[{"role": "assistant", "content": "abc"}]]


def test_missing_prompt_is_an_error_naming_the_file():
    par = AnchoredReward(by_length, {"p": ["ab"]}, source="refs.jsonl")
    with pytest.raises(RlcwError, match="no reference story") as exc:
        par(["other"], ["abc"])
    assert "refs.jsonl" in str(exc.value)


def _write_refs(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_references_per_prompt_and_human(tmp_path):
    rows = [
        {"id": f"a#{k}", "prompt": "A", "story": s, "system": "model", "reference": "human A"}
        for k, s in enumerate(["x", "y", "x", "z"])
    ]
    path = _write_refs(tmp_path / "refs.jsonl", rows)
    assert load_references(path) == {"A": ["x", "y", "z"]}
    assert load_references(path, per_prompt=2) == {"A": ["x", "y"]}
    assert load_references(path, human=True, per_prompt=1) == {"A": ["x", "human A"]}


def test_spec_anchor_wraps_any_reward(tmp_path):
    path = _write_refs(tmp_path / "refs.jsonl", [{"id": "1", "prompt": "Tell one", "story": "a b c", "system": "m"}])
    spec = {"type": "length_range", "anchor": {"references": str(path)}, "clip": 2.0}
    built = build_reward_set({"len": spec})
    (func,) = built.funcs
    assert isinstance(func, AnchoredReward) and func.__name__ == "len"
    (value,) = func(["Tell one"], ["a b c"], min_words=[1], max_words=[5])
    assert value == pytest.approx(0.5)  # the story scores what its reference does
    assert not math.isnan(value)


@pytest.mark.parametrize(
    ("anchor", "match"),
    [
        ({}, "needs `references`"),
        ("refs.jsonl", "needs `references`"),
        ({"references": "missing.jsonl"}, "no reference file"),
        ({"references": "REFS", "per_prompt": 0}, "per_prompt must be >= 1"),
        ({"references": "REFS", "temperature": 2}, "unknown anchor option"),
    ],
)
def test_bad_anchor_is_an_error_before_anything_loads(tmp_path, anchor, match):
    path = _write_refs(tmp_path / "refs.jsonl", [{"id": "1", "prompt": "P", "story": "s", "system": "m"}])
    if isinstance(anchor, dict) and anchor.get("references") == "REFS":
        anchor = {**anchor, "references": str(path)}
    with pytest.raises(RlcwError, match=match) as exc:
        check_rewards({"rm": {"type": "length_range", "anchor": anchor}}, key="reward.specs")
    assert "reward.specs.rm.anchor" in str(exc.value)


def test_default_references_fill_only_anchors_without_a_file():
    from rlcw.rewards.anchored import default_references

    specs = {
        "rm": {"type": "bt", "anchor": {"per_prompt": 2}},
        "own": {"type": "bt", "anchor": {"references": "mine.jsonl"}},
        "length": {"type": "length_range"},
    }
    assert default_references(specs, "start.jsonl") == ["rm"]
    assert specs["rm"]["anchor"] == {"per_prompt": 2, "references": "start.jsonl"}
    assert specs["own"]["anchor"]["references"] == "mine.jsonl" and "anchor" not in specs["length"]
    assert default_references(specs, "start.jsonl") == ["rm"]  # again: the same answer
