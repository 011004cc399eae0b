"""study-export -> answers -> study-ingest through the recipes' main(), plus the RM best/worst mode
on the tiny reward model."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import write_stories
from rlcw.errors import RlcwError
from rlcw.recipes.study_export import StudyExportConfig
from rlcw.recipes.study_export import main as export_main
from rlcw.recipes.study_ingest import StudyIngestConfig
from rlcw.recipes.study_ingest import main as ingest_main
from rlcw.study import DIMENSIONS

PROMPTS = [f"Write about lighthouse number {k}." for k in range(6)]


def stories(tmp_path: Path, system: str, marker: str) -> Path:
    rows = [
        {
            "id": f"{system}{k}",
            "prompt": p,
            "story": f"{marker} story {k}: the keeper climbs the stairs.",
            "system": system,
        }
        for k, p in enumerate(PROMPTS)
    ]
    return write_stories(tmp_path / f"{system}.jsonl", rows)


@pytest.fixture
def exported(tmp_path):
    cfg = load_config(
        StudyExportConfig,
        None,
        [
            f"output_dir={tmp_path}",
            "run_name=exp",
            "design.raters_per_item=2",
            "design.attention_checks=1",
            f"data.stories=[{stories(tmp_path, 'tuned', 'Bright')},{stories(tmp_path, 'base', 'Dull')}]",
        ],
    )
    return export_main(cfg), tmp_path


def test_export_writes_blinded_packets(exported):
    summary, _ = exported
    assert summary["status"] == "completed"
    m = summary["metrics"]
    # 6 pairs, one group of 2 raters; 4 real items + 1 check per sitting -> 2 sittings each
    assert (m["pairs"], m["raters"], m["packets"], m["max_items_per_sitting"]) == (6, 2, 4, 5)
    pages = sorted(Path(summary["artifacts"]["html"]).glob("*.html"))
    assert len(pages) == 4
    for page in pages:
        text = page.read_text()
        assert "tuned" not in text and "base" not in text.replace("database", "")  # no identities
        assert "http://" not in text and "https://" not in text and "<link" not in text  # offline
    with open(summary["artifacts"]["csv"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 6 + 4  # each rater sees every pair once, plus one check per sitting
    tasks = json.loads(Path(summary["artifacts"]["labelstudio_tasks"]).read_text())
    assert len(tasks) == len(rows) and set(tasks[0]["data"]) >= {"item_id", "prompt", "story_a", "story_b"}
    root = ET.parse(summary["artifacts"]["labelstudio_config"]).getroot()
    assert [c.get("name") for c in root.iter("Choices")] == list(DIMENSIONS)
    assert "win rate 0.60: 194 pairs" in Path(summary["artifacts"]["guidance"]).read_text()
    assert not list(Path(summary["artifacts"]["html"]).parent.rglob("key*"))  # the key is not in packets/


def _export(tmp_path, run_name, *systems):
    files = ",".join(str(stories(tmp_path, s, f"Writer {k}")) for k, s in enumerate(systems))
    args = [f"output_dir={tmp_path}", f"run_name={run_name}", "design.attention_checks=1", f"data.stories=[{files}]"]
    return export_main(load_config(StudyExportConfig, None, args))


def test_two_exports_of_one_config_differ_and_name_no_system(tmp_path):
    one, two = _export(tmp_path, "one", "sysalpha", "sysomega"), _export(tmp_path, "two", "sysalpha", "sysomega")
    keys = [json.loads(Path(s["artifacts"]["key"]).read_text()) for s in (one, two)]
    assert keys[0]["study_id"] != keys[1]["study_id"]
    assert not set(keys[0]["items"]) & set(keys[1]["items"])  # fresh item ids every export
    for summary, key in zip((one, two), keys, strict=True):
        packets = Path(summary["artifacts"]["html"]).parent
        files = [f for f in packets.rglob("*") if f.is_file()]
        assert len(files) == 6  # 2 pages, csv, tasks.json, config.xml, instructions.txt
        for f in files:
            text = f.read_text().lower()
            assert "sysalpha" not in text and "sysomega" not in text and "sysalpha" not in str(f)
            assert key["study_id"] in text or f.name in ("config.xml", "instructions.txt")
        key_path = Path(summary["artifacts"]["key"])
        assert key_path.parent.name == "private" and key_path.stat().st_mode & 0o777 == 0o600
        assert key_path.parent.stat().st_mode & 0o077 == 0  # the private folder is the owner's only


def test_ingest_refuses_answers_of_another_study(tmp_path):
    one, two = _export(tmp_path, "one", "tuned", "base"), _export(tmp_path, "two", "tuned", "base")
    answers = answer_packets(one, out=tmp_path / "answers")
    ids = [json.loads(Path(s["artifacts"]["key"]).read_text())["study_id"] for s in (one, two)]
    args = [f"output_dir={tmp_path}", "run_name=ing", f"key={two['artifacts']['key']}", f"answers=[{answers}]"]
    with pytest.raises(RlcwError, match=f"belong to study_id {ids[0]}, but the key is for study_id '{ids[1]}'"):
        ingest_main(load_config(StudyIngestConfig, None, args))


def answer_packets(summary, prefer="tuned", out=None):
    """A rater who always prefers `prefer` (read through the key, as a perfect rater would)."""
    key = json.loads(Path(summary["artifacts"]["key"]).read_text())
    out.mkdir(exist_ok=True)
    for pid, packet in key["packets"].items():
        answers = []
        for item_id in packet["item_ids"]:
            entry = key["items"][item_id]
            label = "B" if entry["kind"] == "attention" else ("A" if entry["A"]["system"] == prefer else "B")
            answers.append({"item_id": item_id, **{d: label for d in DIMENSIONS}})
        (out / f"answers-{pid}.json").write_text(
            json.dumps(
                {
                    "format": "rlcw-study-answers/1",
                    "packet_id": pid,
                    "rater_id": packet["rater_id"],
                    "study_id": key["study_id"],
                    "answers": answers,
                }
            )
        )
    return out


def test_ingest_reports_a_unanimous_study(exported):
    summary, tmp = exported
    answers = answer_packets(summary, out=tmp / "answers")
    result = ingest_main(
        load_config(
            StudyIngestConfig,
            None,
            [
                f"output_dir={tmp}",
                "run_name=ing",
                f"key={summary['artifacts']['key']}",
                f"answers=[{answers}]",
                "n_bootstrap=20",
            ],
        )
    )
    m = result["metrics"]
    assert m["judgements"] == 12 and m["raters"] == 2
    assert m["win_rate/tuned"] == 1.0 and m["win_rate/base"] == 0.0
    assert m["fleiss_kappa"] == 1.0  # two raters always agree
    assert m["bt/tuned"] > 1.0 > -1.0 > m["bt/base"]
    assert Path(result["artifacts"]["plot"]).stat().st_size > 0
    assert "| tuned | 1.000 |" in (tmp / "ing" / "report.md").read_text()


def test_ingest_refuses_a_tampered_key(exported):
    summary, tmp = exported
    answers = answer_packets(summary, out=tmp / "answers")
    key_path = Path(summary["artifacts"]["key"])
    key_path.write_text(key_path.read_text().replace('"tuned"', '"base"', 1))
    with pytest.raises(RlcwError, match="checksum"):
        ingest_main(
            load_config(
                StudyIngestConfig,
                None,
                [f"output_dir={tmp}", "run_name=ing", f"key={key_path}", f"answers=[{answers}]"],
            )
        )


def test_rm_best_worst_pairs_use_the_reward_model(tmp_path, rm_run):
    from rlcw.rm.scoring import load_rm

    rows = [
        {"id": f"s{p}{k}", "prompt": f"Prompt {p}", "story": f"Story {k} for {p}. " * (k + 1), "system": "policy"}
        for p in range(2)
        for k in range(3)
    ]
    path = write_stories(tmp_path / "samples.jsonl", rows)
    summary = export_main(
        load_config(
            StudyExportConfig,
            None,
            [
                f"output_dir={tmp_path}",
                "run_name=bw",
                "data.mode=rm_best_worst",
                f"data.stories=[{path}]",
                f"data.rm_dir={rm_run['artifacts']['model']}",
                "design.formats=[csv]",
            ],
        )
    )
    scores = load_rm(rm_run["artifacts"]["model"]).score([r["prompt"] for r in rows], [r["story"] for r in rows])
    expected = {}
    for p in range(2):
        block = list(zip(scores[3 * p : 3 * p + 3], [r["id"] for r in rows[3 * p : 3 * p + 3]], strict=False))
        expected[f"Prompt {p}"] = (max(block)[1], min(block)[1])
    key = json.loads(Path(summary["artifacts"]["key"]).read_text())["items"]
    got = {}
    for entry in key.values():
        sides = {entry[s]["system"]: entry[s]["record_id"] for s in "AB"}
        got[entry["prompt"]] = (sides["rm_best"], sides["rm_worst"])
    assert got == expected
    assert summary["metrics"]["pairs"] == 2 and "html" not in summary["artifacts"]


def test_export_config_errors(tmp_path):
    with pytest.raises(RlcwError, match="data.rm_dir"):
        export_main(
            load_config(
                StudyExportConfig,
                None,
                [f"output_dir={tmp_path}", "data.mode=rm_best_worst", f"data.stories=[{stories(tmp_path, 'x', 'X')}]"],
            )
        )
    with pytest.raises(RlcwError, match="two systems"):
        export_main(
            load_config(
                StudyExportConfig, None, [f"output_dir={tmp_path}", f"data.stories=[{stories(tmp_path, 'x', 'X')}]"]
            )
        )
