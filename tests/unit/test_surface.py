"""Surface metrics (Agents' Room Table 2) on hand-worked texts, and the `rlcw surface` command."""

from __future__ import annotations

import json

import pytest

from rlcw.cli import run
from rlcw.errors import RlcwError
from rlcw.metrics.surface import (
    ARTICLES,
    PRONOUNS,
    inter_trigram_rep_pcts,
    intra_trigram_rep_pct,
    markdown_table,
    paragraphs,
    prompt_trigram_overlap,
    rouge_l,
    sentence_start_pct,
    system_metrics,
    unique_pct,
)

STORY = "\tThe cat sat. He ran away.\n\tA dog barked loudly.\n\n"


def test_paragraphs_are_non_empty_lines():
    assert paragraphs(STORY) == 2


def test_sentence_starts():
    assert sentence_start_pct(STORY, ARTICLES) == pytest.approx(200 / 3)  # The, A of 3 sentences
    assert sentence_start_pct(STORY, PRONOUNS) == pytest.approx(100 / 3)  # He
    assert sentence_start_pct('"It was late," she said. His hat fell.', PRONOUNS) == pytest.approx(
        50.0
    )  # quote skipped; "his" is not counted
    assert sentence_start_pct("", ARTICLES) == 0.0


def test_unique_words_keep_case_and_punctuation():
    assert unique_pct("the cat and the dog") == pytest.approx(80.0)  # 4 distinct of 5
    assert unique_pct("The cat and the dog.") == pytest.approx(100.0)


def test_intra_repetition():
    assert intra_trigram_rep_pct("a b c a b c") == pytest.approx(25.0)  # abc bca cab abc: 1 of 4 repeats


def test_inter_repetition_per_story():
    assert inter_trigram_rep_pcts(["a b c d", "b c d e", "x y z"]) == pytest.approx([50.0, 50.0, 0.0])
    assert inter_trigram_rep_pcts(["a b c a b c"]) == [0.0]  # repeats inside one story are not inter-story


def test_prompt_overlap_is_a_proportion():
    assert prompt_trigram_overlap("a b c d", "x b c d y") == pytest.approx(0.5)


def test_rouge_l():
    assert rouge_l("cat dog", "cat bird dog") == pytest.approx(80.0)  # LCS 2: P 1, R 2/3


def test_system_metrics_and_table():
    recs = [
        {"story": "a b c d", "prompt": "x b c d y", "reference": "a b c d"},
        {"story": "b c d e", "prompt": "q", "reference": "zz"},
    ]
    m = system_metrics(recs)
    assert m["stories"] == 2 and m["words"] == 4.0 and m["inter_trigram_rep_pct"] == pytest.approx(50.0)
    assert m["prompt_trigram_overlap"] == pytest.approx(0.25) and m["rouge_l"] == pytest.approx(50.0)
    assert "rouge_l" not in system_metrics([{**recs[0], "reference": None}, recs[1]])  # not every record has one
    table = markdown_table({"e2e": m, "human": system_metrics([{"story": "x y z", "prompt": "p"}])})
    lines = table.splitlines()
    assert lines[0].startswith("| system | stories | words |") and "rouge_l" in lines[0]
    assert (
        lines[2].startswith("| e2e | 2 | 4 |")
        and lines[3].startswith("| human | 1 | 3 |")
        and lines[3].endswith("| - |")
    )


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_cli_json_groups_systems_across_files(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [{"id": "1", "prompt": "p", "story": "The cat sat.", "system": "e2e"}])
    b = _write(tmp_path / "b.jsonl", [{"id": "1", "prompt": "p", "story": "A b c. A d e.\nF g h.", "system": "pw"}])
    assert run(["surface", str(a), str(b), "--json", "--out", str(tmp_path / "t.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        list(out) == ["e2e", "pw"]
        and out["pw"]["paragraphs"] == 2.0
        and out["pw"]["article_pct"] == pytest.approx(200 / 3)
    )
    assert json.loads((tmp_path / "t.json").read_text()) == out


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"id": "1", "prompt": "p", "system": "s"}, "story"),
        ({"id": "1", "prompt": "p", "story": 42, "system": "s"}, "story"),
        ({"id": "1", "prompt": ["p"], "story": "x", "system": "s"}, "prompt"),
    ],
)
def test_cli_bad_story_file_names_line_and_field(tmp_path, row, field):
    path = _write(tmp_path / "bad.jsonl", [{"id": "0", "prompt": "p", "story": "ok", "system": "s"}, row])
    with pytest.raises(RlcwError) as info:
        run(["surface", str(path)])
    assert f"{path}:2 field '{field}'" in str(info.value)


@pytest.mark.needs_data
def test_calibration_on_human_validation_stories(tmas_dir, capsys):
    assert (
        run(["surface", "--tmas", str(tmas_dir), "--tmas-split", "train", "--tmas-split", "validation", "--json"]) == 0
    )
    human = json.loads(capsys.readouterr().out)["human"]
    # Table 2 Humans row (test split): close for the length and sentence-start columns
    assert human["stories"] == 175 and "rouge_l" not in human
    assert 1300 < human["words"] < 1600 and 28 < human["paragraphs"] < 40
    assert abs(human["article_pct"] - 10.01) < 1.5 and abs(human["pronoun_pct"] - 32.37) < 1.5
    assert abs(human["unique_pct"] - 50.35) < 4 and abs(human["inter_trigram_rep_pct"] - 19.24) < 2
    assert human["prompt_trigram_overlap"] < 0.01
