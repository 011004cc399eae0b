"""The junk screen of the gold readings: the floor, the screened scores, the switch, and a residual read through it,
on numbers worked by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rlcw.outcome.screen import junk_floor, screen_junk, screen_note
from rlcw.outcome.seeds import Baseline, Cells, SeedReading, arm_seed, cell_sums
from rlcw.pipelines.outcome_readings import screen_golds

PROSE, JUNK = "The keeper climbed the stairs and lit the lamp.", "[[[[[[[[[[[["


def rec(prompt: str, k: int, gold: float, gold2: float = 0.0, story: str = PROSE, words: float = 20.0, ended=True):
    return {
        "prompt_id": prompt,
        "sample_index": k,
        "story": story,
        "scores": {"gold": gold, "gold2": gold2, "proxy_large": 7.0},
        "words": words,
        "finished": ended,
    }


def test_floor_is_each_golds_lowest_start_score():
    start = [rec("A", 0, -1.0, 0.5), rec("A", 1, -3.0, 1.0), rec("B", 0, 2.0, -0.5)]
    assert junk_floor(start, ["gold", "gold2"]) == {"gold": -3.0, "gold2": -0.5}  # the minima of different stories
    assert junk_floor(start, ["gold"]) == {"gold": -3.0}
    with pytest.raises(ValueError, match="no start stories"):
        junk_floor([], ["gold"])


def test_junk_story_scores_the_floor_and_prose_is_untouched():
    prose, junk = rec("A", 0, 1.0, 2.0), rec("A", 1, 5.0, 3.0, story=JUNK, words=1.0, ended=False)
    out = screen_junk([prose, junk], {"gold": -3.0, "gold2": -0.5})
    assert out[0] is prose and prose["scores"] == {"gold": 1.0, "gold2": 2.0, "proxy_large": 7.0}
    assert out[1]["scores"] == {"gold": -3.0, "gold2": -0.5, "proxy_large": 7.0}  # the proxy stays raw
    assert (out[1]["words"], out[1]["finished"], out[1]["story"]) == (1.0, False, JUNK)  # words and ending kept
    assert out[1]["junk"] is True and "junk" not in out[0]
    assert junk["scores"] == {"gold": 5.0, "gold2": 3.0, "proxy_large": 7.0}  # the caller's record is not changed
    empty = screen_junk([rec("B", 0, 4.0, story=" \n ")], {"gold": -3.0})
    assert empty[0]["scores"]["gold"] == -3.0 and empty[0]["scores"]["gold2"] == 0.0  # only the golds in the floor


def _study_cfg(screen: bool):
    cfg = SimpleNamespace(measure=SimpleNamespace(screen_junk=screen, samples_per_prompt=2))
    return cfg, SimpleNamespace(golds=lambda: ["gold", "gold2"])


def test_screen_golds_takes_the_floor_from_the_start_only_and_can_be_switched_off():
    # the pool's sample 2 is not the start (samples_per_prompt = 2): its lower gold is not the floor
    pool = [rec("A", 0, -1.0, 0.0), rec("A", 1, -2.0, 1.0), rec("A", 2, -9.0, -9.0), rec("A", 3, 0.0, 0.0, story=JUNK)]
    measured = {"grpo": [(6, [rec("A", 0, 4.0, 2.0, story=JUNK), rec("A", 1, 1.0, 1.0)])]}
    cfg, study = _study_cfg(True)
    new_pool, new_measured, floor = screen_golds(cfg, study, pool, measured)
    assert floor == {"gold": -2.0, "gold2": 0.0}
    assert [r["scores"]["gold"] for r in new_pool] == [-1.0, -2.0, -9.0, -2.0]
    ((step, recs),) = new_measured["grpo"]
    assert step == 6 and [(r["scores"]["gold"], r["scores"]["gold2"]) for r in recs] == [(-2.0, 0.0), (1.0, 1.0)]
    cfg, study = _study_cfg(False)
    off_pool, off_measured, off_floor = screen_golds(cfg, study, pool, measured)
    assert off_floor is None and off_pool is pool and off_measured is measured
    assert [r["scores"]["gold"] for r in off_measured["grpo"][0][1]] == [4.0, 1.0]


def test_residual_counts_a_junk_story_as_a_failure():
    cells = Cells((0.0, 50.0, 100.0))  # 2 bins x ended = 4 cells
    prompts = ["A", "B"]
    # the start-policy stories' gold by cell: (bin 0, ended) = mean(1, 3) = 2; (bin 1, not ended) = mean(0, 2) = 1
    slope = [rec("A", 2, 1.0, words=10), rec("A", 3, 3.0, words=40), rec("B", 2, 0.0, words=60, ended=False)]
    slope.append(rec("B", 3, 2.0, words=90, ended=False))
    base = Baseline.of(*cell_sums(slope, "gold", prompts, cells), min_count=2)
    start = [rec("A", 0, 2.5, words=20), rec("B", 0, 0.5, words=70, ended=False)]  # residuals 0.5 and -0.5
    floor = junk_floor(start, ["gold"])
    assert floor == {"gold": 0.5}
    # A's checkpoint story is junk that the gold paid 9.0, in the (bin 1, not ended) cell; B's is prose at 2.0
    ckpt = [rec("A", 0, 9.0, story=JUNK, words=80, ended=False), rec("B", 0, 2.0, words=70, ended=False)]

    def read(records: list[dict], kind: str) -> float:
        run = arm_seed("grpo", 0, start, [(2.0, records)], "gold", prompts, cells, base)
        return SeedReading({"grpo": [run]}, base, prompts, n_resamples=50, seed=0).at_d("grpo", 2.0, kind).delta

    screened = screen_junk(ckpt, floor)
    # residual: junk against the overall start mean 1.5 (not its cell's 1): A (0.5 - 1.5) - 0.5 = -1.5,
    # B (2.0 - 1) - (-0.5) = 1.5, mean 0.0; raw: A 0.5 - 2.5, B 2.0 - 0.5
    assert read(screened, "residual") == pytest.approx(0.0)
    assert read(screened, "raw") == pytest.approx(-0.25)
    # unscreened, the junk is a gain: A (9.0 - 1) - 0.5 = 7.5, B 1.5; raw A 6.5, B 1.5
    assert read(ckpt, "residual") == pytest.approx(4.5)
    assert read(ckpt, "raw") == pytest.approx(4.0)


def test_screen_note_states_each_floor_or_that_junk_is_read_raw():
    note = screen_note({"gold": -6.4468, "gold2": -3.4345})
    assert "scored as a failure in every gold reading" in note and "(gold -6.45, gold2 -3.43)" in note
    assert "keep the golds' raw scores (`measure.screen_junk=false`)" in screen_note(None)


def test_residual_reads_junk_in_a_cell_the_start_never_filled_against_the_overall_start_mean():
    cells = Cells((0.0, 50.0, 100.0))
    prompts = ["A", "B"]
    slope = [rec("A", 2, 1.0, words=10), rec("A", 3, 3.0, words=40), rec("B", 2, 0.0, words=60, ended=False)]
    slope.append(rec("B", 3, 2.0, words=90, ended=False))  # overall start mean (1 + 3 + 0 + 2) / 4 = 1.5
    base = Baseline.of(*cell_sums(slope, "gold", prompts, cells), min_count=2)
    assert base.means(np.ones(2))[-1] == pytest.approx(1.5)
    assert base.means(np.array([2.0, 0.0]))[-1] == pytest.approx(2.0)  # a replicate that drew A twice: A's stories
    start = [rec("A", 0, 2.5, words=20), rec("B", 0, 0.5, words=70, ended=False)]  # residuals 0.5 and -0.5
    floor = junk_floor(start, ["gold"])
    # A's junk has 5 words and did not end: (bin 0, not ended) holds no start story, so the cell is unusable
    ckpt = [rec("A", 0, 9.0, story=JUNK, words=5, ended=False), rec("B", 0, 2.0, words=70, ended=False)]
    run = arm_seed("grpo", 0, start, [(2.0, screen_junk(ckpt, floor))], "gold", prompts, cells, base)
    est = SeedReading({"grpo": [run]}, base, prompts, n_resamples=50, seed=0).at_d("grpo", 2.0, "residual")
    # A (0.5 - 1.5) - 0.5 = -1.5, B (2.0 - 1) - (-0.5) = 1.5: mean 0.0, nothing outside
    assert est.delta == pytest.approx(0.0) and est.outside == 0.0
    # unscreened, the same story is outside the cells and left out: the reading is B's alone
    raw_run = arm_seed("grpo", 0, start, [(2.0, ckpt)], "gold", prompts, cells, base)
    est = SeedReading({"grpo": [raw_run]}, base, prompts, n_resamples=50, seed=0).at_d("grpo", 2.0, "residual")
    assert est.delta == pytest.approx(1.5) and est.outside == pytest.approx(0.5)  # 1 of the checkpoint's 2
