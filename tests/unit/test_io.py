"""rlcw.io: atomic writers and strict readers that name file and 1-based line/row."""

from __future__ import annotations

import json

import pytest

from rlcw.errors import RlcwError
from rlcw.io import (
    append_jsonl,
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    iter_jsonl,
    read_json,
    read_jsonl,
    read_table,
)

# --- writers ---


def test_atomic_write_text_creates_parents_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "a" / "b" / "out.txt"
    assert atomic_write_text(target, "hello\n") == target
    assert target.read_text(encoding="utf-8") == "hello\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_atomic_write_text_replaces_existing_content(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old content that is longer than the new one", encoding="utf-8")
    atomic_write_text(target, "new")
    assert target.read_text(encoding="utf-8") == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_atomic_write_text_failure_keeps_old_file_and_removes_temp(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(target, "bad surrogate \ud800")
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_atomic_write_json_and_jsonl_round_trip(tmp_path):
    atomic_write_json(tmp_path / "x.json", {"a": [1, 2], "é": "ü"})
    assert json.loads((tmp_path / "x.json").read_text(encoding="utf-8")) == {"a": [1, 2], "é": "ü"}
    rows = [{"i": 1, "t": "one"}, {"i": 2, "t": "two\nlines"}]
    atomic_write_jsonl(tmp_path / "x.jsonl", rows)
    assert read_jsonl(tmp_path / "x.jsonl") == rows


def test_append_jsonl_appends_lines(tmp_path):
    path = tmp_path / "logs" / "m.jsonl"
    append_jsonl(path, {"step": 1})
    append_jsonl(path, {"step": 2})
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]


# --- read_jsonl ---


def test_read_jsonl_skips_blank_lines_and_numbers_lines_from_one(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"a": 2}\n', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    assert [line for line, _ in iter_jsonl(path)] == [1, 4]


def test_read_jsonl_broken_line_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": \n', encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        read_jsonl(path)
    assert f"{path}:3" in str(info.value)
    assert "broken JSON" in str(info.value)


def test_read_jsonl_non_utf8_names_file_line_and_utf8(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": "caf\xff"}\n')
    with pytest.raises(RlcwError) as info:
        read_jsonl(path)
    msg = str(info.value)
    assert f"{path}:3" in msg
    assert "UTF-8" in msg
    assert "0xff" in msg


def test_read_jsonl_empty_file(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        read_jsonl(path)
    assert "empty" in str(info.value)
    assert str(path) in str(info.value)


def test_read_jsonl_missing_file(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(RlcwError) as info:
        read_jsonl(path)
    assert "not found" in str(info.value)
    assert str(path) in str(info.value)


def test_read_jsonl_folder_is_an_error(tmp_path):
    with pytest.raises(RlcwError, match="folder"):
        read_jsonl(tmp_path)


@pytest.mark.parametrize("line", ["[1, 2]", '"text"', "42", "null"])
def test_read_jsonl_non_object_line(tmp_path, line):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        read_jsonl(path)
    assert f"{path}:2" in str(info.value)
    assert "expected a JSON object" in str(info.value)


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
def test_jsonl_round_trip_with_unicode_line_separators(tmp_path, char):
    path = tmp_path / "d.jsonl"
    rows = [{"story": f"first{char}second"}, {"story": "plain"}]
    atomic_write_jsonl(path, rows)
    assert read_jsonl(path) == rows


# --- read_table ---


@pytest.mark.parametrize("content", [b'{"a": 1', b"\xff\xfe{}"])
def test_read_json_of_a_broken_file_names_it_what_and_how_to_repair(tmp_path, content):
    good, bad = tmp_path / "good.json", tmp_path / "spec.json"
    atomic_write_json(good, {"a": [1, 2]})
    assert read_json(good, "spec") == {"a": [1, 2]}
    bad.write_bytes(content)
    with pytest.raises(RlcwError, match="corrupt the spec") as err:
        read_json(bad, "the spec", hint="write it again")
    assert err.value.where == str(bad) and err.value.hint == "write it again"


def test_read_table_jsonl_uses_line_numbers(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('\n{"a": 1}\n{"a": 2}\n', encoding="utf-8")
    assert read_table(path) == [(2, {"a": 1}), (3, {"a": 2})]


def test_read_table_csv_rows_are_one_based_without_header(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('prompt,chosen,rejected\np1,"good, story",bad\np2,c2,r2\n', encoding="utf-8")
    rows = read_table(path)
    assert rows == [
        (1, {"prompt": "p1", "chosen": "good, story", "rejected": "bad"}),
        (2, {"prompt": "p2", "chosen": "c2", "rejected": "r2"}),
    ]


def test_read_table_csv_keeps_newlines_inside_quoted_fields(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('prompt,chosen,rejected\np,"line one\nline two",r\n', encoding="utf-8")
    assert read_table(path) == [(1, {"prompt": "p", "chosen": "line one\nline two", "rejected": "r"})]


def test_read_table_json_list(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"a": 1}, {"a": 2}, {"a": 3}]), encoding="utf-8")
    assert read_table(path) == [(1, {"a": 1}), (2, {"a": 2}), (3, {"a": 3})]


def test_read_table_json_not_a_list(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        read_table(path)
    assert "list" in str(info.value) and str(path) in str(info.value)


def test_read_table_broken_json_names_line(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[\n{"a": 1},\n{"a": }\n]', encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        read_table(path)
    assert f"{path}:3" in str(info.value)


def test_read_table_unsupported_suffix(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("x", encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        read_table(path)
    msg = str(info.value)
    assert "unsupported" in msg and "'.txt'" in msg
    assert ".jsonl" in msg and ".csv" in msg  # the hint lists what is supported


def test_read_table_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{"a": 1}, {"a": 2}]), path)
    assert read_table(path) == [(1, {"a": 1}), (2, {"a": 2})]


def test_read_table_json_list_of_non_objects_is_a_located_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"a": 1}, [1, 2]]', encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        read_table(path)
    assert "2" in str(info.value) and str(path) in str(info.value)
