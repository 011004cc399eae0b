"""TELL ME A STORY loading and the word-range phrasings its prompts use."""

from __future__ import annotations

import json

import pytest

from rlcw.data.prompts import parse_word_range
from rlcw.data.records import validate_story
from rlcw.data.tmas import content_hash, load_tmas, prompt_rows
from rlcw.errors import RlcwError


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("The story should be between 1,300 and 1,350 words.", (1300, 1350)),
        ("Write a 1,300 - 1,400 word short story about a party.", (1300, 1400)),
        ("Keep the word count between 1,400 and 1,500.", (1400, 1500)),  # no "words" after the numbers
        ("The word count should be between 1,200 and 1.250.", (1200, 1250)),  # "1.250" typo
        ("Keep the word count under 850.", (680, 850)),  # one-sided: band of 2 x 10% below
        ("It should be no more than 1150 words.", (920, 1150)),
        ("The word count should be at least 900.", (900, 1080)),
        ("Make sure it is over 1000 words in length.", (1000, 1200)),
        ("The story should be about 950 words and be funny.", (855, 1045)),
        ("Write a 1,400 word story about someone trapped.", (1260, 1540)),
        ("Word count should be about 1100 to 1200 words.", (1100, 1200)),
        ("A story with 2 dogs and 300 cats.", None),  # numbers that are not a length
    ],
)
def test_parse_word_range_phrasings(prompt, expected):
    assert parse_word_range(prompt) == expected


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


ROW = {
    "example_id": "example_000",
    "inputs": "Write a story of about 100 words about a fox.",
    "targets": "\tThe fox ran.\n\tIt stopped.",
}


def test_folder_splits_are_keyed_by_split_and_id(tmp_path):
    _write(tmp_path / "tell-me-a-story-train.jsonl", [ROW, {**ROW, "example_id": "example_001"}])
    _write(tmp_path / "tell-me-a-story-validation.jsonl", [ROW])  # same example_id in another split
    recs = load_tmas(str(tmp_path), ["train", "validation"])
    assert [r["id"] for r in recs] == ["train/example_000", "train/example_001", "validation/example_000"]
    first = recs[0]
    assert first["system"] == "human" and first["story"] == first["reference"] == ROW["targets"]
    assert (first["min_words"], first["max_words"]) == (90, 110)
    assert first["meta"]["sha256"] == recs[2]["meta"]["sha256"] == content_hash(ROW["inputs"], ROW["targets"])
    assert validate_story(first) == first
    rows = prompt_rows(recs)
    assert rows[2]["split"] == "validation" and rows[2]["reference"] == ROW["targets"] and rows[0]["max_words"] == 110


def test_single_file_takes_split_from_its_name(tmp_path):
    recs = load_tmas(str(_write(tmp_path / "tmas-validation.jsonl", [ROW])))
    assert recs[0]["id"] == "validation/example_000"


def test_content_hash_changes_with_text():
    assert content_hash("a", "b") != content_hash("a", "c") and len(content_hash("a", "b")) == 16


@pytest.mark.parametrize(
    ("bad", "key"), [({"targets": None}, "targets"), ({"inputs": 3}, "inputs"), ({"targets": "  "}, "targets")]
)
def test_bad_rows_name_file_line_and_key(tmp_path, bad, key):
    path = _write(tmp_path / "x-train.jsonl", [ROW, {**ROW, "example_id": "e1", **bad}])
    with pytest.raises(RlcwError) as info:
        load_tmas(str(path))
    assert f"{path}:2 field '{key}'" in str(info.value)


def test_missing_field_and_repeated_id(tmp_path):
    row = {k: v for k, v in ROW.items() if k != "inputs"}
    with pytest.raises(RlcwError, match="field 'inputs'"):
        load_tmas(str(_write(tmp_path / "a-train.jsonl", [row])))
    with pytest.raises(RlcwError, match="repeats"):
        load_tmas(str(_write(tmp_path / "b-train.jsonl", [ROW, ROW])))


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(RlcwError, match="does not exist"):
        load_tmas(str(tmp_path / "nope"))


@pytest.mark.needs_data
def test_real_tmas_loads_and_every_prompt_states_a_range(tmas_dir):
    recs = load_tmas(str(tmas_dir), ["train", "validation"])
    assert len(recs) == 123 + 52  # the README's counts
    assert len({r["id"] for r in recs}) == len(recs)
    assert all(r.get("min_words") is not None for r in recs)
    first = next(r for r in recs if r["id"] == "train/example_000")
    assert (first["min_words"], first["max_words"]) == (855, 1045)  # "about 950 words"
