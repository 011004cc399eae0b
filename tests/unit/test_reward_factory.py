"""Reward factory: specs -> callables + weights, defaults, and clear errors."""

from types import SimpleNamespace

import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.factory import REWARD_TYPES, build_reward, build_rewards
from rlcw.rewards.length import LengthReward, OverlongReward


def test_specs_build_callables_with_weights_names_and_defaults():
    funcs, weights = build_rewards(
        {
            "range": {"type": "length_range", "weight": 2.0, "clip": 1.0},
            "ov": {"type": "overlong", "weight": 0.5, "buffer": 4},
            "off": {"type": "length_range", "weight": 0},
        },
        defaults={"max_tokens": 16, "rm_path": "unused"},
    )
    assert weights == [2.0, 0.5]
    assert isinstance(funcs[0], LengthReward) and funcs[0].clip == 1.0 and funcs[0].__name__ == "range"
    assert isinstance(funcs[1], OverlongReward) and funcs[1].max_tokens == 16 and funcs[1].buffer == 4
    assert funcs[1](["p"], ["c"], completion_ids=[[0] * 14]) == [-0.5]  # 2 tokens into a 4-token buffer


def test_a_list_of_specs_works_and_keeps_default_names():
    funcs, weights = build_rewards([{"type": "length_range"}, {"type": "overlong", "max_tokens": 8}])
    assert weights == [1.0, 1.0] and [f.__name__ for f in funcs] == ["length_range", "overlong"]


def test_unknown_type_lists_the_types():
    with pytest.raises(RlcwError) as info:
        build_rewards({"x": {"type": "bleu"}})
    msg = str(info.value)
    assert "unknown reward type 'bleu'" in msg and "rewards.x" in msg
    assert all(t in msg for t in REWARD_TYPES)


def test_unknown_option_names_the_option_and_the_valid_ones():
    with pytest.raises(RlcwError, match="unknown option 'clipp' for reward type 'length_range'") as info:
        build_reward({"type": "length_range", "clipp": 2})
    assert "clip" in str(info.value)


def test_missing_required_option_and_empty_set():
    with pytest.raises(RlcwError, match="needs option 'rm_path'"):
        build_reward({"type": "bt"})
    with pytest.raises(RlcwError, match="needs option 'urls'"):
        build_reward({"type": "remote"})
    with pytest.raises(RlcwError, match="no reward left"):
        build_rewards({"a": {"type": "length_range", "weight": 0}})
    with pytest.raises(RlcwError, match="mapping with a 'type'"):
        build_rewards([{"weight": 1.0}])


def test_duplicate_names_are_rejected():
    with pytest.raises(RlcwError, match="share the name 'length_range'"):
        build_rewards([{"type": "length_range"}, {"type": "length_range", "clip": 1.0}])


def test_remote_spec_reaches_the_remote_client():
    from rlcw.rewards.remote import RemoteReward

    func = build_reward({"type": "remote", "urls": ["http://127.0.0.1:9"], "timeout_s": 1.0, "max_retries": 0})
    assert isinstance(func, RemoteReward)


def test_a_bad_option_value_names_the_spec_key_the_user_wrote():
    with pytest.raises(RlcwError) as err:
        build_rewards({"len": {"type": "length_range", "cut": "sometimes", "max_tokens": 88}}, key="reward.specs")
    msg = str(err.value)
    assert "reward.specs.len" in msg and "cut must be 'words' or 'skip'" in msg


def test_reward_set_keeps_the_scorer_of_the_recipes_rm(monkeypatch):
    import rlcw.rm.scoring as scoring
    from rlcw.rewards.factory import build_reward_set

    def fake_load_rm(rm_dir, batch_size: int = 8):  # load_rm's call shape, no weights loaded
        return SimpleNamespace(rm_dir=rm_dir, precision="fp32")

    monkeypatch.setattr(scoring, "load_rm", fake_load_rm)
    defaults = {"rm_path": "runs/rm/model"}
    built = build_reward_set({"other": {"type": "bt", "rm_path": "runs/rm2"}, "own": {"type": "bt"}}, defaults)
    assert built.scorer is built.funcs[1].scorer and built.funcs[1].scorer.rm_dir == "runs/rm/model"
    assert [f.__name__ for f in built.funcs] == ["other", "own"]
    same = build_reward_set(
        {"rm": {"type": "bt", "rm_path": "runs/rm/model/"}, "len": {"type": "length_range"}}, defaults
    )
    assert same.scorer is same.funcs[0].scorer
    assert build_reward_set({"other": {"type": "bt", "rm_path": "runs/rm2"}}, defaults).scorer is None
    assert build_reward_set({"len": {"type": "length_range"}}, defaults).scorer is None
