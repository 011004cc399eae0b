"""build-pairs on the bundled stories."""

import json
from pathlib import Path

from rlcw.data.records import validate_preference
from rlcw.metrics.text import count_words


def test_build_pairs_writes_length_matched_split_pairs(pairs_run):
    assert pairs_run["status"] == "completed"
    train = [json.loads(x) for x in Path(pairs_run["artifacts"]["train"]).read_text().splitlines()]
    held = [json.loads(x) for x in Path(pairs_run["artifacts"]["eval"]).read_text().splitlines()]
    assert len(train) == pairs_run["metrics"]["train_pairs"] > 100
    assert len(held) == pairs_run["metrics"]["eval_pairs"] > 20
    assert not {p["meta"]["story_id"] for p in train} & {p["meta"]["story_id"] for p in held}
    for p in train + held:
        validate_preference(p)
        c, r = count_words(p["chosen"]), count_words(p["rejected"])
        assert abs(c - r) <= max(1, round(0.05 * c))
    assert {p["meta"]["kind"] for p in train} == {"shuffle", "splice", "substitute", "repeat", "truncate"}
    run_dir = Path(pairs_run["artifacts"]["train"]).parent.parent
    assert (run_dir / "config.yaml").read_text().startswith("# rlcw build-pairs\n# git_sha:")
