"""grpo beyond the basics: mixed sources, several rewards, KL to the start, per-source logs,
monitors that stop the run, top/bottom samples, prompt checks (overlap, cap fit, vLLM)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import read_stories
from rlcw.errors import RlcwError


def _cfg(overrides: list[str]):
    from rlcw.recipes.grpo import GRPORecipeConfig

    return load_config(GRPORecipeConfig, None, overrides)


@pytest.fixture(scope="module")
def stopped_run(runs_root, rm_run, tiny_model_dir):
    from rlcw.recipes.grpo import main

    cfg = _cfg(
        [
            f"output_dir={runs_root}",
            "run_name=grpo_features",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={rm_run['artifacts']['model']}",
            "train.max_steps=4",
            "train.batch_size=4",
            "train.num_generations=2",
            "train.max_completion_length=8",
            "train.learning_rate=5e-2",
            "lora.r=4",
            "data.sources.tmas.style=tmas",
            "data.sources.tmas.weight=3",
            "data.sources.wp.style=wp",
            "data.sources.wp.weight=1",
            "data.max_train_prompts=8",
            "reward.specs.overlong.type=overlong",
            "reward.specs.overlong.buffer=4",
            "reward.specs.overlong.weight=0.5",
            "eval.every_steps=0",
            # distinct-3 of a batch is at most 1, so this rule breaks at every step: stop after 2 logged steps
            "monitor.stop.min_distinct_batch=1.01",
            "monitor.patience=2",
        ]
    )
    return main(cfg)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_monitor_stops_the_run_with_the_reason_in_the_summary(stopped_run):
    assert stopped_run["status"] == "failed"
    assert "min_distinct_batch" in stopped_run["error"] and "step 2" in stopped_run["error"]
    assert stopped_run["metrics"]["train/steps"] == 2.0
    run_dir = Path(stopped_run["artifacts"]["metrics"]).parent
    assert json.loads((run_dir / "summary.json").read_text())["error"] == stopped_run["error"]
    assert "Stopped early" in (run_dir / "report.md").read_text()
    for png in ("reward.png", "monitors.png"):
        assert (run_dir / "plots" / png).read_bytes()[:4] == b"\x89PNG"


def test_per_step_extras_are_logged(stopped_run):
    run_dir = Path(stopped_run["artifacts"]["metrics"]).parent
    train = [r for r in _rows(run_dir) if "reward" in r]
    assert [r["step"] for r in train] == [1, 2]
    for key in (
        "monitor/cap_share",
        "monitor/rep_intra",
        "monitor/distinct_group",
        "monitor/distinct_batch",
        "monitor/shared_ngrams",
        "monitor/words_mean",
        "monitor/kl_to_start",
        "monitor/slop",
        "entropy",
        "rewards/rm/mean",
        "rewards/length_range/mean",
        "rewards/overlong/mean",
    ):
        assert key in train[0], key
    # before the first update the LoRA B matrices are zero: the policy is the starting model exactly
    assert train[0]["monitor/kl_to_start"] == pytest.approx(0.0, abs=1e-7)
    assert train[1]["monitor/kl_to_start"] > 1e-6
    assert all(0.0 <= r["monitor/slop"] <= 100.0 for r in train)  # % of words in over-used phrases
    # 8-token cap: a completion is either cut by the cap or ended by EOS; batch 4 with samples_k=2 writes
    # every completion of step 1 into its samples, so the share cut by the cap is countable by hand
    recs = read_stories(Path(stopped_run["artifacts"]["samples"]) / "train_step_000001.jsonl")
    assert len(recs) == 4
    assert train[0]["monitor/cap_share"] == pytest.approx(sum(r["meta"]["truncated"] for r in recs) / 4)
    sources = {k.split("/")[1] for r in train for k in r if k.startswith("source/")}
    assert sources and sources <= {"tmas", "wp"}


def test_top_and_bottom_samples_and_data_order(stopped_run):
    samples = Path(stopped_run["artifacts"]["samples"])
    recs = read_stories(samples / "train_step_000001.jsonl")
    assert [r["meta"]["rank"] for r in recs] == ["top", "top", "bottom", "bottom"]
    rewards = [r["meta"]["reward"] for r in recs]
    assert rewards[0] >= rewards[1] >= max(rewards[2:]) and rewards[2] <= rewards[3]
    order = [json.loads(x) for x in (samples / "data_order.jsonl").read_text().splitlines()]
    assert [o["step"] for o in order] == [1, 2]
    for o in order:  # GRPO groups: each prompt id twice in a row (num_generations=2)
        ids = o["prompt_ids"]
        assert len(ids) == 4 and ids[0] == ids[1] and ids[2] == ids[3]


def test_sources_are_mixed_by_weight():
    from rlcw.recipes.grpo import rollout_seam, train_prompts

    cfg = _cfg(
        [
            "data.sources.tmas.style=tmas",
            "data.sources.tmas.weight=3",
            "data.sources.wp.style=wp",
            "data.max_train_prompts=8",
        ]
    )
    rows = train_prompts(cfg, rollout_seam(cfg))
    assert Counter(r["source"] for r in rows) == {"tmas": 6, "wp": 2}
    assert all(r["style"] == r["source"] for r in rows)


def test_fit_to_cap_filters_ranges_the_cap_cannot_reach():
    from rlcw.recipes.grpo import rollout_seam, train_prompts

    # 70 tokens at 1.4 tokens/word hold 50 words: only prompts asking for at most 50 words stay
    cfg = _cfg(["train.max_completion_length=70", "data.fit_to_cap=filter"])
    rows = train_prompts(cfg, rollout_seam(cfg))
    assert rows and max(r["max_words"] for r in rows) <= 50
    cfg = _cfg(["train.max_completion_length=70", "data.fit_to_cap=error"])
    with pytest.raises(RlcwError, match="ask for more words than 70 tokens"):
        train_prompts(cfg, rollout_seam(cfg))


def test_overlap_with_rm_data_is_an_error_naming_the_prompt(tmp_path):
    from rlcw.recipes.common.prompts import check_overlap
    from rlcw.recipes.grpo import eval_prompts, rollout_seam, train_prompts

    cfg = _cfg([])
    rollout = rollout_seam(cfg)
    train, held = train_prompts(cfg, rollout), eval_prompts(cfg, rollout)
    check_overlap(train, held, [])  # the bundled splits are disjoint
    pairs = tmp_path / "pairs.jsonl"
    leaked = "  " + train[3]["prompt"].upper() + " "  # same words, other case and spacing
    pairs.write_text(
        json.dumps({"prompt": "unrelated", "chosen": "a", "rejected": "b"})
        + "\n"
        + json.dumps({"prompt": leaked, "chosen": "a", "rejected": "b"})
        + "\n"
    )
    with pytest.raises(RlcwError) as info:
        check_overlap(train, held, [str(pairs)])
    assert train[3]["id"] in str(info.value) and "pairs.jsonl (line 2)" in str(info.value)
    with pytest.raises(RlcwError, match="held-out prompts"):
        check_overlap(train + [dict(held[0], id="copy")], held, [])


def test_vllm_requested_but_missing_is_a_clear_error(monkeypatch):
    import importlib.util

    from rlcw.rl.grpo.seam import check_vllm_installed

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(RlcwError, match="vLLM is not installed"):
        check_vllm_installed(_cfg(["rollout.kind=vllm"]).rollout)
    check_vllm_installed(_cfg([]).rollout)  # not asked for: nothing to check


def test_full_fine_tune_logs_kl_against_a_frozen_copy(runs_root, rm_run, tiny_model_dir):
    from rlcw.recipes.grpo import main

    summary = main(
        _cfg(
            [
                f"output_dir={runs_root}",
                "run_name=grpo_full",
                f"model.name={tiny_model_dir}",
                "lora.enabled=false",
                f"reward.rm_path={rm_run['artifacts']['model']}",
                "train.max_steps=3",
                "train.batch_size=4",
                "train.num_generations=2",
                "train.max_completion_length=8",
                "train.learning_rate=1e-2",
                "train.beta=0.0",
                "eval.every_steps=0",
                "data.max_train_prompts=4",
                "reward.specs.length_range.weight=0",
                "train.log_kl_every=2",
            ]
        )
    )
    assert summary["status"] == "completed"
    train = [r for r in _rows(Path(summary["artifacts"]["metrics"]).parent) if "reward" in r]
    assert "rewards/length_range/mean" not in train[0]  # weight 0 drops the reward
    assert train[0]["monitor/kl_to_start"] == pytest.approx(0.0, abs=1e-7)  # same weights as the copy
    assert train[1]["monitor/kl_to_start"] > 1e-6
    assert "monitor/kl_to_start" not in train[2]  # train.log_kl_every=2: steps 1 and 2 only
    assert (Path(summary["artifacts"]["policy"]) / "model.safetensors").is_file()


def test_kl_to_start_takes_the_policy_side_from_the_loss_forward(runs_root, rm_run, tiny_model_dir, monkeypatch):
    """On-policy, the KL step's only extra forward is the start model's, and it gives the KL a fresh policy
    forward gives (2 micro-batches a step: each is measured on its own rows)."""
    from rlcw.recipes.grpo import main
    from rlcw.rl.grpo.trainer import RlcwGRPOTrainer

    forwards, pairs = [0], []  # log-prob forwards, TRL's or the shared-prefix one
    real_forward, real_kl = RlcwGRPOTrainer._get_per_token_logps_and_entropies, RlcwGRPOTrainer.kl_to_start

    def counted(self, *args, **kwargs):
        forwards[0] += 1
        return real_forward(self, *args, **kwargs)

    def kl(self, output, policy_logps=None):
        before = forwards[0]
        got = real_kl(self, output, policy_logps)
        used = forwards[0] - before
        pairs.append((got, used, real_kl(self, output), forwards[0] - before - used, len(output["completion_ids"])))
        return got

    monkeypatch.setattr(RlcwGRPOTrainer, "_get_per_token_logps_and_entropies", counted)
    monkeypatch.setattr(RlcwGRPOTrainer, "kl_to_start", kl)
    summary = main(
        _cfg(
            [
                f"output_dir={runs_root}",
                "run_name=grpo_kl_from_loss",
                f"model.name={tiny_model_dir}",
                f"reward.rm_path={rm_run['artifacts']['model']}",
                "train.max_steps=2",
                "train.batch_size=2",
                "train.gradient_accumulation_steps=2",
                "train.num_generations=2",
                "train.max_completion_length=8",
                "train.learning_rate=5e-2",
                "train.log_kl_every=1",
                "lora.r=4",
                "eval.every_steps=0",
                "data.max_train_prompts=4",
            ]
        )
    )
    assert summary["status"] == "completed"
    assert len(pairs) == 4  # 2 steps x 2 micro-batches
    for (k3, k1), used, (ref_k3, ref_k1), fresh, rows in pairs:
        assert (used, fresh, rows) == (1, 2, 2)  # the start forward only; a fresh policy forward would be a second
        assert (k3, k1) == (pytest.approx(ref_k3, abs=1e-6), pytest.approx(ref_k1, abs=1e-6))
    train = [r for r in _rows(Path(summary["artifacts"]["metrics"]).parent) if "reward" in r]
    assert train[0]["monitor/kl_to_start"] == pytest.approx(0.0, abs=1e-7)  # before the first update
    assert train[1]["monitor/kl_to_start"] == pytest.approx((pairs[2][0][0] + pairs[3][0][0]) / 2, rel=1e-5)
    assert train[1]["monitor/kl_to_start"] > 1e-6


def test_lm_head_choices_train_alike_and_say_which_head_ran(runs_root, tiny_grpo_overrides, capsys):
    """train.lm_head: rlcw's head (the CPU default) and TRL's give the same first step to float rounding, and the
    log names the head each run used; an unknown value is refused before the run folder exists."""
    from rlcw.recipes.grpo import main

    def run(head: str) -> dict:
        main(_cfg(tiny_grpo_overrides(f"grpo_head_{head}", "eval.every_steps=0", f"train.lm_head={head}")))
        return _rows(runs_root / f"grpo_head_{head}")[0]

    own, trl = run("auto"), run("trl")
    log = capsys.readouterr().out
    assert "loss forward: rlcw's LM head (auto: CPU, a plain linear head)" in log
    assert "loss forward: TRL's LM head (train.lm_head=trl)" in log
    assert own["reward"] == pytest.approx(trl["reward"], abs=1e-6)  # the same samples: heads differ in the loss only
    assert own["loss"] == pytest.approx(trl["loss"], rel=1e-4, abs=1e-6)
    assert own["grad_norm"] == pytest.approx(trl["grad_norm"], rel=1e-3)
    with pytest.raises(RlcwError, match="train.lm_head"):
        main(_cfg([f"output_dir={runs_root}", "run_name=grpo_head_bad", "train.lm_head=fused"]))
    assert not (runs_root / "grpo_head_bad").exists()


def test_ending_credit_adds_the_stopping_terms_on_the_last_token(runs_root, tiny_grpo_overrides, capsys, monkeypatch):
    """train.ending_credit: a real grpo step whose loss gets (B, T) advantages, the RM's on every completion token and
    the overlong term's added on each completion's last, both from that generation's rewards; the log says so."""

    from rlcw.recipes.grpo import main
    from rlcw.rl.grpo.ending_credit import split_advantages
    from rlcw.rl.grpo.trainer import RlcwGRPOTrainer

    seen = []
    own = RlcwGRPOTrainer._ending_credit_advantages

    def record(self, completion_mask):
        adv = own(self, completion_mask)
        seen.append((self.step_state.rewards.clone(), self.reward_weights.clone(), list(self.reward_func_names), adv))
        seen.append(completion_mask.clone())
        return adv

    monkeypatch.setattr(RlcwGRPOTrainer, "_ending_credit_advantages", record)
    more = ("eval.every_steps=0", "reward.specs.stop.type=overlong", "reward.specs.stop.buffer=4")
    summary = main(_cfg(tiny_grpo_overrides("grpo_ending_credit", *more, "train.ending_credit=[stop]")))
    assert summary["status"] == "completed"
    assert "ending credit: stop judge each completion's last token only" in capsys.readouterr().out
    (rewards, weights, names, adv), mask = seen
    assert names == ["rm", "length_range", "stop"] and adv.shape == mask.shape == (4, mask.shape[1])
    content, ending = split_advantages(rewards, weights, [False, False, True], 2, "group")
    for row in range(4):
        last = int(mask[row].nonzero().max())
        assert adv[row, last] == pytest.approx(float(content[row] + ending[row]))
        assert adv[row, :last].tolist() == pytest.approx([float(content[row])] * last)
    assert content.abs().sum() > 0  # the RM scores differ: the content side carries a signal


def test_the_trainer_refuses_ending_credit_it_cannot_split(tiny_model_dir, tokenizer, tmp_path):
    """RlcwGRPOTrainer used directly: ending_credit must name its reward functions and leave one for the content."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from rlcw.rl.grpo.trainer import RlcwGRPOTrainer
    from rlcw.runs import RunDir

    def rm(completions, **kw):
        return [0.0] * len(completions)

    def stop(completions, **kw):
        return [0.0] * len(completions)

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=4,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        gradient_checkpointing=False,
    )
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "Write."}]}] * 2)
    for names in (("stpo",), ("rm", "stop")):
        with pytest.raises(ValueError, match="at least one must be left for the content tokens"):
            RlcwGRPOTrainer(
                model=AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
                reward_funcs=[rm, stop],
                args=args,
                train_dataset=data,
                processing_class=tokenizer,
                run=RunDir(tmp_path / "run", "grpo"),
                ending_credit=names,
            )


def test_early_end_unlikelihood_adds_its_term_on_the_held_positions(
    runs_root, tiny_grpo_overrides, monkeypatch, tmp_path
):
    """train.early_end_unlikelihood with the short endings blocked in the rollout and train.end_rate_in_range: a real
    grpo step holds exactly the completion positions whose text is short of the row's min_words (count_words of the
    decoded prefix) and marks those from min_words to max_words, adds lambda * (sum -log(1 - pi(end)) there + sum
    KL(Bernoulli(rate) || Bernoulli(pi(end))) in range) per completion token to the loss, and logs the term."""
    import json
    import math
    from pathlib import Path

    import torch

    from rlcw.metrics.text import count_words
    from rlcw.models import load_tokenizer
    from rlcw.recipes.grpo import main
    from rlcw.rl.grpo.trainer import RlcwGRPOTrainer

    seen = []
    own_positions, own_term = RlcwGRPOTrainer._end_positions, RlcwGRPOTrainer._early_end_term

    def positions(self, inputs, output):
        out = own_positions(self, inputs, output)
        rows = [(r["min_words"], r["max_words"]) for r in inputs]
        seen.append((rows, output["completion_ids"].clone(), out["end_held"].clone(), out["end_in_range"].clone()))
        return out

    def term(self, end, inputs):
        value = own_term(self, end, inputs)
        seen.append((end.detach().clone(), float(value), inputs["completion_mask"].clone()))
        return value

    monkeypatch.setattr(RlcwGRPOTrainer, "_end_positions", positions)
    monkeypatch.setattr(RlcwGRPOTrainer, "_early_end_term", term)
    prompts = tmp_path / "prompts.jsonl"  # ranges 8 tokens can reach: held and in-range positions both occur
    prompts.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "prompt": f"Tell story {i}.", "min_words": 1 + i % 2, "max_words": 3}) + "\n"
            for i in range(4)
        )
    )
    more = (
        f"data.prompts={prompts}",
        "data.train_split=null",
        "eval.prompts=bundled",
        "eval.every_steps=0",
        "rollout.kind=fast",
        "rollout.block_short_endings=true",
        "train.end_rate_in_range=0.1",
    )
    cfg = _cfg(tiny_grpo_overrides("grpo_early_end", *more, "train.early_end_unlikelihood=2.0"))
    summary = main(cfg)
    assert summary["status"] == "completed"
    (ranges, ids, held, inside), (end, value, cmask) = seen
    tok = load_tokenizer(cfg.model.name)
    for (low, high), row, row_held, row_in in zip(ranges, ids.tolist(), held.tolist(), inside.tolist(), strict=True):
        cut = next((i + 1 for i, t in enumerate(row) if t == tok.eos_token_id), len(row))
        words = [count_words(tok.decode(row[:t], skip_special_tokens=True)) for t in range(cut)]
        assert row_held[:cut] == [w < (low or 0) for w in words] and not any(row_held[cut:])
        assert row_in[:cut] == [(low or 0) <= w <= (high or -1) for w in words] and not any(row_in[cut:])
    assert held.any() and inside.any()  # the tiny prompts' ranges hold both kinds: each part is exercised
    assert (end[held] < 0).all()
    p = end.exp()
    kl = 0.1 * (math.log(0.1) - end) + 0.9 * (math.log(0.9) - torch.log1p(-p))
    want_term = float(((-torch.log1p(-p) * held).sum() + (kl * inside).sum()) / cmask.sum())
    assert value == pytest.approx(want_term, rel=1e-5) and value > 0
    rows = [
        json.loads(x)
        for x in (Path(summary["artifacts"]["metrics"]).parent / "metrics.jsonl").read_text().splitlines()
    ]
    assert any("early_end/unlikelihood" in r for r in rows)
