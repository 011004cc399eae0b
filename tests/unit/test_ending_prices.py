"""What an RM pays for ending, ending short and words (rlcw.metrics.ending), on hand-worked numbers."""

import math

import numpy as np
import pytest

from rlcw.metrics.ending import ending_prices


def rec(p, score, words, finished, lo=10, hi=20):
    return {"prompt_index": p, "score": score, "words": words, "finished": finished, "min_words": lo, "max_words": hi}


RECORDS = [
    rec(0, 2.0, 15, True),  # inside
    rec(0, 1.0, 5, True),  # short
    rec(0, 0.0, 30, False),  # cut
    rec(1, 3.0, 12, True),  # inside
    rec(1, -1.0, 25, False),  # cut
]


def test_prices_on_hand_worked_numbers():
    out = ending_prices(RECORDS, n_resamples=200)
    assert out["ended_minus_cut"] == pytest.approx(2.0 - (-0.5))  # ended 2, 1, 3 | cut 0, -1
    assert out["short_minus_inside"] == pytest.approx(1.0 - 2.5)  # short 1 | inside 2, 3
    # ended: words 15, 5, 12 -> scores 2, 1, 3: slope 7 / 52.667 per word
    assert out["per_10_words_ended"] == pytest.approx(10 * 7.0 / (158 / 3), abs=1e-9)
    scores, words = [r["score"] for r in RECORDS], [r["words"] for r in RECORDS]
    assert out["words_pearson"] == pytest.approx(float(np.corrcoef(scores, words)[0, 1]))
    assert out["words_pearson_ended"] == pytest.approx(float(np.corrcoef([2.0, 1.0, 3.0], [15, 5, 12])[0, 1]))
    assert (out["n_ended"], out["n_cut"], out["n_short"], out["n_inside"]) == (3, 2, 1, 2)
    for k in ("ended_minus_cut", "per_10_words_ended"):
        assert out[f"{k}_lo"] <= out[k] <= out[f"{k}_hi"]


def test_a_cut_story_below_the_range_is_not_ending_short_and_empty_groups_are_nan():
    out = ending_prices([rec(0, 1.0, 3, False), rec(0, 2.0, 15, True), rec(1, 0.0, 14, True)], n_resamples=50)
    assert out["n_short"] == 0 and math.isnan(out["short_minus_inside"])
    assert out["ended_minus_cut"] == pytest.approx(1.0 - 1.0)
    assert math.isnan(out["short_minus_inside_lo"])


def test_no_records_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        ending_prices([])


def test_ending_samples_without_their_fields_name_the_row_and_key(tmp_path):
    import json

    from rlcw.errors import RlcwError
    from rlcw.rm.pair_eval import load_samples

    path = tmp_path / "start.jsonl"
    rows = [{"prompt": "p", "story": "One. Two.", "finished": True}, {"prompt": "p", "story": "Cut off", "tokens": 88}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RlcwError, match="'finished'") as err:
        load_samples(str(path))
    assert f"{path}:2" in str(err.value) or "line 2" in str(err.value)
    path.write_text(json.dumps(rows[0]) + "\n")
    assert load_samples(str(path))[0]["finished"] is True
