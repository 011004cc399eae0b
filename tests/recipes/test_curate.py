"""rlcw curate main() on a small synthetic local file (posts layout; CSV with JSON-string lists too)."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.preferences import load_preferences
from rlcw.errors import RlcwError
from rlcw.recipes.curate import CurateConfig, main

DAY = 86400


def synthetic_posts(n_train: int = 30, n_test: int = 10) -> list[dict]:
    """Two-story posts: the better story (50 votes) is posted a day after the other (20 votes, -60%).
    In 70% of posts the better story is 40 words longer, else 40 words shorter."""
    rows = []
    for i in range(n_train + n_test):
        base = datetime(2021 if i < n_train else 2023, 3, 1, tzinfo=timezone.utc).timestamp() + i * DAY
        good, bad = (100, 60) if i % 10 < 7 else (60, 100)
        texts = [" ".join([f"good-{i}"] + ["fine"] * (good - 1)), " ".join([f"bad-{i}"] + ["meh"] * (bad - 1))]
        rows.append(
            {
                "post_title": f"[WP] prompt {i}",
                "post_text": "",
                "comment_texts": texts,
                "comment_scores": [50, 20],
                "comment_times": [base + DAY, base],
            }
        )
    rows.append(
        {"post_title": "[WP] ragged", "comment_texts": ["x " * 60], "comment_scores": [], "comment_times": [0]}
    )
    return rows


def _run(tmp_path: Path, source: Path, name: str, *extra: str) -> dict:
    cfg = load_config(
        CurateConfig,
        None,
        [
            f"output_dir={tmp_path}",
            f"run_name={name}",
            f"train.source={source}",
            "rules.train_before=2023-01-01",
            "rules.test_from=2023-01-02",
            *extra,
        ],
    )
    return main(cfg)


def test_curate_local_jsonl(tmp_path):
    src = tmp_path / "raw.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in synthetic_posts()), encoding="utf-8")
    summary = _run(tmp_path, src, "cur", "rules.tokenizer=null")  # token limit: next test
    m = summary["metrics"]
    assert summary["status"] == "completed"
    # 30 train posts -> 30 pairs (21 chosen-longer, 9 shorter, all |d| = 40) -> 9 + 9 after balancing
    assert m["train/after/later_is_better"] == 30 and m["train/pairs"] == 18
    assert m["train/chosen_longer_share_before"] == pytest.approx(0.7) and m["train/chosen_longer_share_after"] == 0.5
    assert m["test/after/later_is_better"] == 10 and m["test/pairs"] == 6  # 7 longer, 3 shorter -> 3 + 3
    assert m["train/dropped/ragged_comment_lists"] == 1
    train = load_preferences(summary["artifacts"]["train"])
    assert len(train) == 18 and all(p["meta"]["chosen_upvotes"] == 50 and p["meta"]["post_id"] for p in train)
    assert all(p["chosen"].startswith("good-") for p in train)
    run = Path(summary["artifacts"]["train"]).parents[1]
    text = (run / "report.md").read_text()
    assert "70.00% before, 50.00% after" in text and "ragged_comment_lists" in text
    assert (run / "length_balance.png").stat().st_size > 1000
    assert json.loads((run / "summary.json").read_text())["metrics"]["train/pairs"] == 18


def test_curate_csv_with_list_strings_and_token_limit(tmp_path):
    src = tmp_path / "raw.csv"
    rows = synthetic_posts(10, 0)[:-1]
    with src.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    # 100-word stories have > 80 tokens under the real tokenizer, 60-word ones fewer: no pair survives
    summary = _run(tmp_path, src, "cur_csv", "rules.test_from=null", "rules.max_tokens=400", "rules.balance=false")
    assert summary["metrics"]["train/after/max_tokens"] == 20 and summary["metrics"]["train/pairs"] == 10
    with pytest.raises(RlcwError, match="no training pairs") as err:
        _run(tmp_path, src, "cur_csv2", "rules.test_from=null", "rules.max_tokens=80")
    report = tmp_path / "cur_csv2" / "report.md"
    assert str(report) in err.value.hint  # the error points at a report that exists, with the drop reasons
    text = report.read_text()
    assert (
        "| tokens <= max | 3 |" in text
        and "| candidate pairs (same post) | 0 |" in text
        and "Dropped, by reason" in text
        and "No training pairs survived" in text
    )


def test_curate_bad_source_and_dates(tmp_path):
    with pytest.raises(RlcwError, match="not found"):
        _run(tmp_path, tmp_path / "missing.jsonl", "bad1")
    src = tmp_path / "raw.jsonl"
    src.write_text(json.dumps(synthetic_posts(2, 0)[0]) + "\n", encoding="utf-8")
    with pytest.raises(RlcwError, match="rules.train_before"):
        _run(tmp_path, src, "bad2", "rules.train_before=someday")
