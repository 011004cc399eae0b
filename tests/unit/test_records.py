"""Story and preference records: validation errors name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.data.bundled import bundled_path
from rlcw.data.preferences import load_preferences
from rlcw.data.records import read_stories, validate_preference, validate_story, write_preferences, write_stories
from rlcw.errors import RlcwError
from rlcw.io import read_jsonl

STORY = {"id": "s1", "prompt": "Write about a fox.", "story": "The fox ran. It was fast.", "system": "human"}
PAIR = {"prompt": "Write about a fox.", "chosen": "The fox ran home.", "rejected": "Home fox the ran."}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _assert_located(exc: RlcwError, path: Path, line: int, field: str) -> None:
    msg = str(exc)
    assert f"{path}:{line}" in msg, msg
    assert f"'{field}'" in msg, msg


# --- stories ---


def test_validate_story_keeps_known_fields():
    rec = validate_story({**STORY, "source": "x", "step": 3, "min_words": 5, "max_words": 9})
    assert rec == {**STORY, "source": "x", "step": 3, "min_words": 5, "max_words": 9}


def test_validate_story_numeric_id_becomes_text():
    assert validate_story({**STORY, "id": 7})["id"] == "7"


def test_unknown_story_fields_go_into_meta():
    rec = validate_story({**STORY, "meta": {"genre": "fable"}, "rating": 4, "author": "me"})
    assert rec["meta"] == {"genre": "fable", "rating": 4, "author": "me"}
    assert "rating" not in rec and "author" not in rec


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"story": None}, "story", "null"),
        ({"story": 42}, "story", "expected text"),
        ({"story": "   "}, "story", "empty"),
        ({"prompt": ["a"]}, "prompt", "expected text"),
        ({"system": ""}, "system", "empty"),
        ({"id": "  "}, "id", "id"),
        ({"id": None}, "id", "id"),
        ({"step": "3"}, "step", "integer"),
        ({"seed": True}, "seed", "integer"),
        ({"min_words": 50, "max_words": 10}, "min_words", "larger"),
    ],
)
def test_read_stories_bad_values_are_located(tmp_path, change, field, words):
    path = _jsonl(tmp_path / "stories.jsonl", [STORY, {**STORY, "id": "s2"}, {**STORY, "id": "s3", **change}])
    with pytest.raises(RlcwError) as info:
        read_stories(path)
    _assert_located(info.value, path, 3, field)
    assert words in str(info.value)


@pytest.mark.parametrize("field", ["id", "prompt", "story", "system"])
def test_read_stories_missing_field_is_located(tmp_path, field):
    bad = {k: v for k, v in STORY.items() if k != field}
    path = _jsonl(tmp_path / "stories.jsonl", [STORY, bad])
    with pytest.raises(RlcwError) as info:
        read_stories(path)
    _assert_located(info.value, path, 2, field)


def test_story_meta_must_be_an_object(tmp_path):
    path = _jsonl(tmp_path / "stories.jsonl", [{**STORY, "meta": "note"}])
    with pytest.raises(RlcwError) as info:
        read_stories(path)
    _assert_located(info.value, path, 1, "meta")


def test_write_stories_validates_and_round_trips(tmp_path):
    path = tmp_path / "out" / "s.jsonl"
    write_stories(path, [STORY, {**STORY, "id": "s2", "extra": 1}])
    back = read_stories(path)
    assert back[0] == STORY
    assert back[1]["meta"] == {"extra": 1}
    with pytest.raises(RlcwError):
        write_stories(tmp_path / "bad.jsonl", [{**STORY, "story": ""}])
    assert not (tmp_path / "bad.jsonl").exists()


def test_bundled_stories_all_validate():
    stories = read_stories(bundled_path("stories.jsonl"))
    assert len(stories) == 48
    assert len({s["id"] for s in stories}) == 48
    assert all(s["system"] == "human" for s in stories)


# --- preferences ---


def test_validate_preference_allows_empty_prompt():
    assert validate_preference({**PAIR, "prompt": ""})["prompt"] == ""


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"chosen": None}, "chosen", "null"),
        ({"rejected": 42}, "rejected", "expected text"),
        ({"chosen": "  "}, "chosen", "empty"),
        ({"rejected": PAIR["chosen"] + "  "}, "rejected", "same text"),
        ({"meta": "x"}, "meta", "object"),
    ],
)
def test_validate_preference_bad_values_are_located(change, field, words):
    with pytest.raises(RlcwError) as info:
        validate_preference({**PAIR, **change}, "pairs.jsonl", 7)
    _assert_located(info.value, Path("pairs.jsonl"), 7, field)
    assert words in str(info.value)


@pytest.mark.parametrize("field", ["prompt", "chosen", "rejected"])
def test_validate_preference_missing_field(field):
    with pytest.raises(RlcwError) as info:
        validate_preference({k: v for k, v in PAIR.items() if k != field}, "p.jsonl", 2)
    _assert_located(info.value, Path("p.jsonl"), 2, field)


def test_load_preferences_jsonl_sets_source_and_keeps_meta(tmp_path):
    path = _jsonl(tmp_path / "pairs.jsonl", [{**PAIR, "meta": {"kind": "shuffle"}}, {**PAIR, "source": "mine"}])
    recs = load_preferences(str(path))
    assert recs[0] == {**PAIR, "source": "pairs.jsonl", "meta": {"kind": "shuffle"}}
    assert recs[1]["source"] == "mine"


def test_load_preferences_equal_texts_error_is_located(tmp_path):
    path = _jsonl(tmp_path / "pairs.jsonl", [PAIR, {**PAIR, "rejected": PAIR["chosen"]}])
    with pytest.raises(RlcwError) as info:
        load_preferences(str(path))
    _assert_located(info.value, path, 2, "rejected")


def test_load_preferences_null_chosen_is_located(tmp_path):
    path = _jsonl(tmp_path / "pairs.jsonl", [PAIR, PAIR, {**PAIR, "chosen": None}])
    with pytest.raises(RlcwError) as info:
        load_preferences(str(path))
    _assert_located(info.value, path, 3, "chosen")


def test_load_preferences_csv(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('prompt,chosen,rejected\nP,"A good, long story.",Bad story\n', encoding="utf-8")
    assert load_preferences(str(path)) == [
        {"prompt": "P", "chosen": "A good, long story.", "rejected": "Bad story", "source": "p.csv"}
    ]


def test_load_preferences_csv_missing_column_names_column_and_row(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("prompt,chosen,worse\nP,good,bad\n", encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        load_preferences(str(path))
    msg = str(info.value)
    assert "'rejected'" in msg
    assert f"{path}:1" in msg
    assert "worse" in msg  # the columns present are listed


def test_load_preferences_column_mapping(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("question,better,worse\nQ,good one,bad one\n", encoding="utf-8")
    recs = load_preferences(str(path), columns={"prompt": "question", "chosen": "better", "rejected": "worse"})
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in recs] == [("Q", "good one", "bad one")]


def test_load_preferences_mapping_without_prompt_column_gives_empty_prompt(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", [{"better": "good one", "worse": "bad one"}])
    recs = load_preferences(str(path), columns={"chosen": "better", "rejected": "worse"})
    assert recs[0]["prompt"] == "" and recs[0]["chosen"] == "good one" and recs[0]["rejected"] == "bad one"


def test_load_preferences_trl_conversational_layout(tmp_path):
    row = {
        "prompt": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Tell a story."}],
        "chosen": [{"role": "assistant", "content": "draft"}, {"role": "assistant", "content": "Good story."}],
        "rejected": [{"role": "assistant", "content": "Bad story."}],
    }
    path = _jsonl(tmp_path / "conv.jsonl", [row])
    [rec] = load_preferences(str(path))
    assert rec["prompt"] == "Tell a story."
    assert rec["chosen"] == "Good story."  # the last assistant message
    assert rec["rejected"] == "Bad story."


def test_load_preferences_conversational_without_assistant_is_empty_error(tmp_path):
    row = {
        "prompt": "P",
        "chosen": [{"role": "user", "content": "x"}],
        "rejected": [{"role": "assistant", "content": "y"}],
    }
    path = _jsonl(tmp_path / "conv.jsonl", [row])
    with pytest.raises(RlcwError) as info:
        load_preferences(str(path))
    _assert_located(info.value, path, 1, "chosen")


def test_load_preferences_trl_implicit_prompt(tmp_path):
    user = {"role": "user", "content": "Tell a story."}
    row = {
        "chosen": [user, {"role": "assistant", "content": "Good story."}],
        "rejected": [user, {"role": "assistant", "content": "Bad story."}],
    }
    path = _jsonl(tmp_path / "conv.jsonl", [row])
    [rec] = load_preferences(str(path))
    assert rec["chosen"] == "Good story." and rec["rejected"] == "Bad story."
    assert rec["prompt"] == "Tell a story."


def test_load_preferences_limit(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", [PAIR, PAIR, {**PAIR, "chosen": None}])
    assert len(load_preferences(str(path), limit=2)) == 2  # the broken third row is never read


def test_load_preferences_empty_table_is_an_error(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("prompt,chosen,rejected\n", encoding="utf-8")
    with pytest.raises(RlcwError, match="no preference pairs"):
        load_preferences(str(path))


def test_load_preferences_missing_local_file(tmp_path):
    with pytest.raises(RlcwError, match="not found"):
        load_preferences(str(tmp_path / "missing.jsonl"))


def test_write_preferences_round_trip(tmp_path):
    path = tmp_path / "w.jsonl"
    write_preferences(path, [{**PAIR, "source": "s", "meta": {"k": 1}}])
    assert read_jsonl(path) == [{**PAIR, "source": "s", "meta": {"k": 1}}]


def test_message_text_reads_strings_trl_messages_and_a_role():
    from rlcw.data.records import message_text

    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert message_text("plain") == "plain" and message_text(chat) == "u"
    assert message_text([*chat, {"role": "assistant", "content": "a"}]) == "a"
    assert message_text(chat, role="assistant") == "" and message_text(chat, role="system") == "s"
    with pytest.raises(TypeError):
        message_text(3)
