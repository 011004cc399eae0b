"""The quickstart's held-out prompt set: several splits in order, and RL prompts kept apart from all of them."""

import collections

import pytest

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.recipes import grpo
from rlcw.recipes.quickstart import QuickstartConfig, heldout_rows, main


def test_two_splits_give_the_heldout_prompts_then_the_first_study_ones():
    cfg = load_config(QuickstartConfig, None, ["heldout.split=[heldout,study]", "heldout.max_prompts=64"])
    rows = heldout_rows(cfg, grpo.rollout_seam(cfg.grpo).story_cap)
    assert len(rows) == 64 and len({r["id"] for r in rows}) == 64
    assert [r["split"] for r in rows] == ["heldout"] * 32 + ["study"] * 32
    assert collections.Counter(r["style"] for r in rows) == {"tmas": 32, "wp": 32}
    one = load_config(QuickstartConfig, None, ["heldout.split=heldout"])
    assert [r["id"] for r in heldout_rows(one, grpo.rollout_seam(one.grpo).story_cap)] == [r["id"] for r in rows[:32]]


def test_a_measured_prompt_that_rl_trains_on_fails_before_any_folder(tmp_path):
    cfg = load_config(QuickstartConfig, None, [f"output_dir={tmp_path}", "heldout.split=[heldout,train]"])
    with pytest.raises(RlcwError, match="also appears in held-out prompts"):
        main(cfg)
    assert list(tmp_path.iterdir()) == []
