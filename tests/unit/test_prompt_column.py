"""Prompts from any table or HF dataset column (`style: column`): plain and conversational cells,
ids, word ranges, the dispatcher used by data.sources, and bad cells as clear errors."""

from __future__ import annotations

import json

import pytest

from rlcw.data.prompts import load_prompt_column, source_rows
from rlcw.errors import RlcwError


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_plain_jsonl_prompt_column(tmp_path):
    path = _jsonl(
        tmp_path / "mine.jsonl",
        [{"prompt": "Write about a fox in about 100 words.", "x": 1}, {"prompt": "A poem on rain.", "x": 2}],
    )
    rows = load_prompt_column(path)
    assert [r["id"] for r in rows] == ["mine-000001", "mine-000002"]
    assert rows[0]["prompt"].startswith("Write about a fox") and rows[0]["messages"] is None
    assert (rows[0]["min_words"], rows[0]["max_words"]) == (90, 110) and rows[1]["min_words"] is None
    assert {r["style"] for r in rows} == {"column"}
    assert source_rows({"style": "column", "prompts": path, "weight": 2}, "bundled", "train") == rows


def test_conversational_column_and_ids(tmp_path):
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell a tale of 50 words."}]
    path = _jsonl(tmp_path / "c.jsonl", [{"q": conv, "key": "k1"}])
    [row] = load_prompt_column(path, column="q", id_column="key")
    assert row["id"] == "k1" and row["prompt"] == "Tell a tale of 50 words." and row["messages"] == conv


def test_parquet_and_saved_hf_dataset(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([{"prompt": "One."}, {"prompt": "Two."}])
    ds.to_parquet(str(tmp_path / "p.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    assert [r["prompt"] for r in load_prompt_column(str(tmp_path / "p.parquet"))] == ["One.", "Two."]
    assert [r["prompt"] for r in load_prompt_column(str(tmp_path / "saved"))] == ["One.", "Two."]


@pytest.mark.parametrize(
    "row,message",
    [
        ({"prompt": ""}, "empty prompt"),
        ({"prompt": 3}, "expected a string or a list of messages"),
        ({"other": "x"}, "columns here: other"),
        ({"prompt": [{"role": "user"}]}, "message 0"),
        ({"prompt": [{"role": "system", "content": "only a system turn"}]}, "no non-empty user message"),
    ],
)
def test_bad_cells(tmp_path, row, message):
    with pytest.raises(RlcwError, match=message) as err:
        load_prompt_column(_jsonl(tmp_path / "bad.jsonl", [row]))
    assert "bad.jsonl:1" in str(err.value)


def test_source_rows_rejects_unknown_options_and_missing_file():
    with pytest.raises(RlcwError, match="unknown option 'colum'"):
        source_rows({"style": "column", "prompts": "x.jsonl", "colum": "p"}, "bundled", None)
    with pytest.raises(RlcwError, match="needs `prompts`"):
        source_rows({"style": "column"}, "bundled", None)


def test_other_styles_still_filter_rlcw_rows():
    rows = source_rows({"style": "wp"}, "bundled", None)
    assert rows and {r["style"] for r in rows} == {"wp"}
