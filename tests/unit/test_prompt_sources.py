"""`data.sources.<name>` with `style: column` in the RL stages (rlcw.recipes.common.prompts): options checked with
`data.sources.<name>` in the error, column rows mixed with rlcw's bundled rows, conversational cells used
as the chat prompt as they are, and `eval.column` for held-out prompts."""

from __future__ import annotations

import json

import pytest

from rlcw.errors import RlcwError
from rlcw.recipes.common.prompts import held_out_prompts, prompt_messages, train_prompts
from rlcw.recipes.common.sections import EvalSection, PromptSection

CONV = [{"role": "system", "content": "Only haiku."}, {"role": "user", "content": "A haiku about frost."}]


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_column_source_mixes_with_bundled_rows(tmp_path):
    mine = _jsonl(
        tmp_path / "mine.jsonl", [{"prompt": f"Write about thing {i}."} for i in range(4)] + [{"prompt": CONV}]
    )
    data = PromptSection(
        sources={"mine": {"style": "column", "prompts": mine, "weight": 1.0}, "tmas": {"style": "tmas"}},
        max_train_prompts=20,
    )
    rows = train_prompts(data, cap=400, seed=0)
    assert len(rows) == 20 and {r["source"] for r in rows} == {"mine", "tmas"}
    own = {r["id"]: r for r in rows if r["source"] == "mine"}
    assert set(own) <= {f"mine-{i:06d}" for i in range(1, 6)} and own
    conv = next(
        r
        for r in train_prompts(PromptSection(sources={"m": {"style": "column", "prompts": mine}}), 400, 0)
        if r["id"] == "mine-000005"
    )
    assert prompt_messages(conv, "System of rlcw.") == CONV  # the cell's own conversation, system turn included
    assert prompt_messages({"prompt": "Plain."}, "Sys.") == [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "Plain."},
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"style": "column"}, "style: column needs `prompts`"),
        ({"style": "tmas", "column": "q"}, "'column' applies to style: column only"),
        ({"style": "column", "prompts": "x.jsonl", "colour": "red"}, "unknown option 'colour'"),
    ],
)
def test_bad_source_options_name_the_source(spec, message):
    with pytest.raises(RlcwError, match=message) as err:
        train_prompts(PromptSection(sources={"mine": spec}), cap=400, seed=0)
    assert err.value.where == "data.sources.mine"


def test_bad_cell_names_file_line_and_column(tmp_path):
    bad = _jsonl(tmp_path / "bad.jsonl", [{"prompt": "fine"}, {"prompt": ""}])
    with pytest.raises(RlcwError, match="empty prompt") as err:
        train_prompts(PromptSection(sources={"mine": {"style": "column", "prompts": bad}}), cap=400, seed=0)
    assert "bad.jsonl" in err.value.where and ":2" in err.value.where


def test_held_out_prompts_from_a_column(tmp_path):
    held = _jsonl(tmp_path / "held.jsonl", [{"q": "Write 30 to 40 words on snow."}, {"q": "A tale."}])
    rows = held_out_prompts(PromptSection(), EvalSection(prompts=held, column="q"), cap=96)
    assert [r["prompt"] for r in rows] == ["Write 30 to 40 words on snow.", "A tale."]
    assert (rows[0]["min_words"], rows[0]["max_words"]) == (30, 40)
