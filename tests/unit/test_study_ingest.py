"""Ingest: a hand-made set of answers gives hand-worked win rates, kappa and agreements; every
kind of bad answer is an error naming where it is."""

from __future__ import annotations

import json
import math

import pytest

from rlcw.errors import RlcwError
from rlcw.study import DIMENSIONS
from rlcw.study.analysis import analyse
from rlcw.study.blinding import read_key, write_key
from rlcw.study.ingest import load_answers, normalise_label, validate_and_unblind
from rlcw.study.verdicts import read_verdicts


def side(system, rm, rid):
    return {"system": system, "record_id": rid, "rm_score": rm}


KEY = {
    "i1": {"prompt": "p1", "kind": "systems", "A": side("tuned", 2.0, "t1"), "B": side("base", 1.0, "b1")},
    "i2": {"prompt": "p2", "kind": "systems", "A": side("base", 0.5, "b2"), "B": side("tuned", 1.5, "t2")},
    "i3": {"prompt": "p3", "kind": "systems", "A": side("tuned", 1.0, "t3"), "B": side("base", 3.0, "b3")},
    "chk": {"prompt": "p1", "kind": "attention", "expected": "B"},
}
PACKETS = [
    {"packet_id": f"{r}-s1", "rater_id": r, "sitting": 1, "items": [{"item_id": i} for i in ("i1", "i2", "i3", "chk")]}
    for r in ("r1", "r2")
]
# overall (= every dimension here): r1 prefers tuned, tuned, same; r2 tuned, base, base
LABELS = {"r1": {"i1": "A", "i2": "B", "i3": "same", "chk": "B"}, "r2": {"i1": "A", "i2": "A", "i3": "B", "chk": "B"}}


def write_answers(folder, labels=LABELS, extra=(), drop=()):
    folder.mkdir(exist_ok=True)
    for rater, answers in labels.items():
        rows = [
            {"item_id": i, **{d: v for d in DIMENSIONS}, "comment": ""}
            for i, v in answers.items()
            if (rater, i) not in drop
        ]
        rows += [r for who, r in extra if who == rater]
        (folder / f"answers-{rater}-s1.json").write_text(
            json.dumps(
                {"format": "rlcw-study-answers/1", "packet_id": f"{rater}-s1", "rater_id": rater, "answers": rows}
            )
        )
    return folder


@pytest.fixture
def key(tmp_path):
    return read_key(write_key(tmp_path / "key.json", KEY, PACKETS))


def test_hand_made_answers_give_hand_worked_report(tmp_path, key):
    judgements, report = validate_and_unblind(load_answers([write_answers(tmp_path / "ans")]), key)
    assert report["judgements"] == 6 and report["raters"] == 2 and report["dropped_raters"] == []
    verdicts = tmp_path / "judge.jsonl"
    verdicts.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"prompt": "p1", "system_a": "tuned", "system_b": "base", "winner": "A"},
                {"prompt": "p2", "system_a": "base", "system_b": "tuned", "winner": "tie"},
                {"prompt": "p3", "system_a": "tuned", "system_b": "base", "winner": "B"},
                {"prompt": "p3", "system_a": "base", "system_b": "tuned", "winner": "A"},
                {"prompt": "p2", "system_a": "base", "system_b": "tuned", "winner": "???", "valid": False},
            ]
        )
        + "\n"
    )
    rows, invalid = read_verdicts(verdicts)
    assert invalid == 1
    res = analyse(judgements, {"judge": rows}, n_bootstrap=20)
    overall = res["dimensions"]["overall"]
    # tuned's outcomes: r1 1, 1, 0.5; r2 1, 0, 0 -> 3.5 / 6
    assert overall["win_rates"]["tuned"]["win_rate"] == pytest.approx(3.5 / 6)
    assert overall["win_rates"]["base"]["win_rate"] == pytest.approx(2.5 / 6)
    bt = overall["bradley_terry"]
    assert bt["tuned"]["strength"] - bt["base"]["strength"] == pytest.approx(math.log(3.5 / 2.5), abs=0.005)
    # items i1 [A,A], i2 [B,A], i3 [same,B]: P = 1/3, Pe = 1/4 + 1/9 + 1/36 = 14/36 -> -2/22
    assert overall["fleiss"] == {"kappa": pytest.approx(-2 / 22), "items": 3, "raters_per_item": 2}
    # RM prefers tuned on i1, tuned on i2, base on i3; 5 decided human answers, r2/i2 disagrees
    assert res["rm"]["agreement"] == pytest.approx(4 / 5) and res["rm"]["n"] == 5
    assert res["rm"]["rm_preferred_rate"] == pytest.approx(4.5 / 6)
    # judge: p1 tuned, p2 tie (half credit twice), p3 base -> (1 + .5 + 1 + .5 + 1) / 5
    assert res["judges"]["judge"]["agreement"] == pytest.approx(4 / 5)
    assert res["judges"]["judge"]["n"] == 5


def test_labels_are_normalised_and_unknown_ones_rejected():
    assert [normalise_label(x) for x in ("a", " B is better", "About the same", "Story A", "tie")] == [
        "A",
        "B",
        "same",
        "A",
        "same",
    ]
    assert normalise_label("maybe") is None


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(extra=[("r1", {"item_id": "zzz", **{d: "A" for d in DIMENSIONS}})]), "unknown item id 'zzz'"),
        (dict(extra=[("r1", {"item_id": "i1", **{d: "B" for d in DIMENSIONS}})]), "answered item 'i1' twice"),
        (dict(drop=[("r2", "i3")]), "packet 'r2-s1': 1 item(s) not answered: i3"),
        (dict(labels={**LABELS, "r2": {**LABELS["r2"], "chk": "A"}}), "rater 'r2' failed an attention check"),
        (dict(labels={**LABELS, "r2": {**LABELS["r2"], "i2": "maybe"}}), "unknown label 'maybe'"),
    ],
)
def test_bad_answers_are_errors_naming_the_file(tmp_path, key, change, message):
    folder = write_answers(tmp_path / "ans", **change)
    with pytest.raises(RlcwError) as err:
        validate_and_unblind(load_answers([folder]), key)
    text = str(err.value)
    assert message in text
    if not message.startswith("packet"):
        assert "answers-r" in text  # the offending file is named


def test_failed_attention_check_can_drop_the_rater(tmp_path, key):
    folder = write_answers(tmp_path / "ans", labels={**LABELS, "r2": {**LABELS["r2"], "chk": "same"}})
    judgements, report = validate_and_unblind(load_answers([folder]), key, drop_failed_raters=True)
    assert report["dropped_raters"] == ["r2"] and {j["rater_id"] for j in judgements} == {"r1"}


def test_missing_dimension_and_foreign_packet(tmp_path, key):
    folder = tmp_path / "ans"
    folder.mkdir()
    answers = [{"item_id": "i1", "overall": "A"}]
    (folder / "a.json").write_text(
        json.dumps({"format": "rlcw-study-answers/1", "packet_id": "r1-s1", "rater_id": "r2", "answers": answers})
    )
    with pytest.raises(RlcwError) as err:
        validate_and_unblind(load_answers([folder]), key)
    text = str(err.value)
    assert "has no answer for 'plot'" in text and "belongs to 'r1', not 'r2'" in text


def test_csv_and_labelstudio_answers_read_like_the_page(tmp_path, key):
    page = validate_and_unblind(load_answers([write_answers(tmp_path / "ans")]), key)[0]
    lines = ["packet_id,rater_id,item_id," + ",".join(DIMENSIONS) + ",comment"]
    lines += [
        f"{r}-s1,{r},{i}," + ",".join([v] * len(DIMENSIONS)) + "," for r, ans in LABELS.items() for i, v in ans.items()
    ]
    (tmp_path / "filled.csv").write_text("\n".join(lines) + "\n")
    from_csv = validate_and_unblind(load_answers([tmp_path / "filled.csv"]), key)[0]
    shown = {"A": "A", "B": "B", "same": "About the same"}
    tasks = [
        {
            "data": {"packet_id": f"{r}-s1", "rater_id": r, "item_id": i},
            "annotations": [
                {"result": [{"from_name": d, "type": "choices", "value": {"choices": [shown[v]]}} for d in DIMENSIONS]}
            ],
        }
        for r, ans in LABELS.items()
        for i, v in ans.items()
    ]
    (tmp_path / "ls.json").write_text(json.dumps(tasks))
    from_ls = validate_and_unblind(load_answers([tmp_path / "ls.json"]), key)[0]

    def strip(js):
        return sorted((j["rater_id"], j["item_id"], tuple(sorted(j["labels"].items()))) for j in js)

    assert strip(from_csv) == strip(page) == strip(from_ls)
    assert len(page) == 6


def test_rlcw_judge_verdict_layout_matches_by_prompt_id(tmp_path, key):
    judgements, _ = validate_and_unblind(load_answers([write_answers(tmp_path / "ans")]), key)

    def row(pid, a, b, dim, value, valid=True):
        return {
            "prompt_id": pid,
            "order": 0,
            "system_a": a,
            "system_b": b,
            "verdicts": {dim: {"value": value, "valid": valid}, "plot": {"value": None, "valid": False}},
        }

    path = tmp_path / "verdicts.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                row("t1", "tuned", "base", "overall", "A"),
                row("t1", "base", "tuned", "overall", "B"),  # tuned, both orders
                row("b2", "base", "tuned", "overall", "Same"),
                row("t3", "base", "tuned", "preferred", "A"),  # LitBench: base
            ]
        )
        + "\n"
    )
    rows, invalid = read_verdicts(path)
    assert invalid == 4  # the four invalid 'plot' verdicts
    res = analyse(judgements, {"judge": rows}, n_bootstrap=0)["judges"]["judge"]
    assert res["agreement"] == pytest.approx(4 / 5) and res["n"] == 5
