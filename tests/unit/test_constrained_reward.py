"""The Lagrangian constraint on a cost (rlcw.rewards.constrained), the ended_short cost, and their specs."""

import math

import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.constrained import ConstrainedReward
from rlcw.rewards.factory import build_reward, build_rewards
from rlcw.rewards.length import EndedShortCost
from rlcw.rl.aux_state import load_aux_state, save_aux_state


def fixed(costs):
    """A cost that returns the next list of `costs` on every call."""
    batches = iter(costs)

    def cost(prompts, completions, **kwargs):
        return next(batches)

    return cost


def call(term, n=4):
    return term(["p"] * n, ["c"] * n)


def test_multiplier_by_hand_from_a_fixed_limit():
    # limit 0.25, lr 2: batch means 0.5, 0.75, 0.0, 0.0 -> multiplier 0.5, 1.5, 1.0, 0.5
    term = ConstrainedReward(fixed([[1, 0, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]), limit=0.25, lr=2.0)
    assert call(term) == [-0.5, -0.0, -0.5, -0.0]
    assert call(term) == [-1.5, -1.5, -1.5, -0.0]
    assert term.multiplier == pytest.approx(1.5)
    assert call(term) == [-0.0] * 4 and term.multiplier == pytest.approx(1.0)
    call(term)
    assert term.multiplier == pytest.approx(0.5)


def test_multiplier_never_negative_and_capped():
    term = ConstrainedReward(fixed([[0.0] * 4, [1.0] * 4, [1.0] * 4]), limit=0.5, lr=10.0, max_multiplier=3.0)
    call(term)
    assert term.multiplier == 0.0  # 0 - 10 * 0.5 clipped at 0: a cost under its limit is never paid for
    call(term)
    assert term.multiplier == pytest.approx(3.0)  # 0 + 10 * 0.5 = 5, capped
    assert call(term) == [-3.0] * 4


def test_start_limit_is_the_mean_of_the_first_batches_and_pays_nothing_meanwhile():
    # start_calls 2: batches of 4 and 2 finite costs -> limit (1 + 0 + 0 + 1 + 1 + 1) / 6 = 4/6 (pooled, not 0.5 and 1.0)
    term = ConstrainedReward(
        fixed([[1, 0, 0, 1], [1, 1, None, math.nan], [1, 1, 1, 1]]), limit="start", lr=3.0, start_calls=2
    )
    first = call(term)
    assert first == [-0.0] * 4 and term.limit is None
    second = call(term)
    assert second[:2] == [-0.0, -0.0] and math.isnan(second[2]) and math.isnan(second[3])
    assert term.limit == pytest.approx(4 / 6)
    assert call(term) == [pytest.approx(-1.0)] * 4  # 3 * (1 - 4/6)


def test_state_round_trips_through_the_checkpoint_file(tmp_path):
    a = ConstrainedReward(fixed([[1, 1], [1, 1]]), limit="start", lr=1.0, start_calls=1)
    call(a, 2)
    a.multiplier = 0.7
    save_aux_state(tmp_path, {"reward/short": a})
    b = ConstrainedReward(fixed([[1, 0]]), limit="start", lr=1.0, start_calls=1)
    assert load_aux_state(tmp_path, {"reward/short": b})
    assert (b.limit, b.calls) == (1.0, 1)
    assert call(b, 2) == [pytest.approx(-0.2), -0.0]  # 0.7 + (0.5 - 1.0): resumed, not restarted


def test_ended_short_counts_only_stories_that_ended_below_their_range():
    cost = EndedShortCost(max_tokens=5)
    completions = ["one two", "one two", "one two three four", "one", "one"]
    ids = [[1, 2], [1, 2, 3, 4, 5], [1, 2, 3], [1], [1]]
    lows = [3, 3, 3, None, 2]
    # ended short; cut at the cap (unknown length); in range; no range; ended short
    assert cost(["p"] * 5, completions, min_words=lows, completion_ids=ids) == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_spec_builds_a_named_constrained_term_with_the_recipes_cap():
    funcs, weights = build_rewards(
        {"short": {"type": "ended_short", "constrain": {"limit": 0.1, "lr": 2.0}}}, {"max_tokens": 5}
    )
    (term,) = funcs
    assert isinstance(term, ConstrainedReward) and term.__name__ == "short" and weights == [1.0]
    assert term.cost.max_tokens == 5 and term.limit == 0.1 and term.lr == 2.0
    out = term(["p", "p"], ["a b", "a b c d e f"], min_words=[3, 3], completion_ids=[[1], [1, 2]])
    assert out == [pytest.approx(-0.8), -0.0]  # 2 * (0.5 - 0.1) on the one that ended short


@pytest.mark.parametrize(
    ("constrain", "weight", "where", "says"),
    [
        ({"limit": "begin"}, 1.0, "reward spec.constrain", "number or 'start'"),
        ({"lr": 0}, 1.0, "reward spec.constrain", "must be > 0"),
        ({"start_calls": 0}, 1.0, "reward spec.constrain", ">= 1"),
        ({"rate": 1}, 1.0, "reward spec.constrain", "unknown constrain option 'rate'"),
        ({}, -1.0, "reward spec.weight", "must be positive"),
        ("start", 1.0, "reward spec.constrain", "a mapping"),
    ],
)
def test_bad_constrain_options_name_the_key(constrain, weight, where, says):
    with pytest.raises(RlcwError) as err:
        build_reward({"type": "ended_short", "weight": weight, "constrain": constrain}, {"max_tokens": 5})
    assert err.value.where == where and says in err.value.message


def _rank_mean(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    from rlcw.rewards.constrained import batch_mean

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    values = [[1.0, 0.0, math.nan], [1.0, 1.0, 1.0, 0.0, None]][rank]
    mean, count = batch_mean(values)
    with open(f"{out}.{rank}", "w") as f:
        f.write(f"{mean} {count}")
    dist.destroy_process_group()


def test_batch_mean_pools_every_rank(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_rank_mean, args=(str(tmp_path / "store"), str(tmp_path / "out")), nprocs=2)
    for rank in (0, 1):  # (1 + 0 + 1 + 1 + 1 + 0) / 6 on both ranks, not 1/2 and 3/4
        mean, count = (tmp_path / f"out.{rank}").read_text().split()
        assert float(mean) == pytest.approx(4 / 6) and int(count) == 6


def test_rl_report_plots_each_constraint_and_names_its_limit(tmp_path, monkeypatch):
    import json

    from rlcw.rl.grpo import report

    rows = [{"step": 1, "reward": 0.5, "constraint/short/cost": 0.25, "constraint/short/multiplier": 0.0}]
    rows.append(
        {"step": 2, "reward": 0.4, "constraint/short/cost": 0.5, "constraint/short/limit": 0.2}
        | {"constraint/short/multiplier": 0.6}
    )
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = {}
    monkeypatch.setattr(
        report, "plot_lines", lambda panels, path, *a, **k: drawn.setdefault(path.name, panels) and path
    )
    report.grpo_plots(tmp_path)
    panels = {p[0]: p[1] for p in drawn["constraints.png"]}
    assert set(panels) == {"constraint 'short': batch cost and limit", "constraint 'short': multiplier"}
    assert set(panels["constraint 'short': batch cost and limit"]) == {"batch cost", "limit"}
    specs = {"rm": {"type": "bt"}, "short": {"type": "ended_short", "constrain": {"limit": 0.1}}}
    assert report.reward_summary(specs) == "rm (bt, weight 1.0), short (ended_short, weight 1.0, held under 0.1)"


def test_plan_checks_constrain_before_anything_loads():
    from rlcw.recipes.plan import check_reward_specs

    specs = {"short": {"type": "ended_short", "constrain": {"limit": "start", "lr": -1}}}
    with pytest.raises(RlcwError) as err:
        check_reward_specs(specs, "runs/train_rm/model")
    assert err.value.where == "reward.specs.short.constrain" and "must be > 0" in err.value.message
    check_reward_specs({"short": {"type": "ended_short", "constrain": {"limit": 0.1}}}, "runs/train_rm/model")
