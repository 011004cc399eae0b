"""The outcome study end to end on the tiny model: gold, proxies, runs, measurement, report, resume."""

from __future__ import annotations

import json
import math

import pytest

from rlcw.config import load_config
from rlcw.outcome.report import SCALE_UP

SENTENCES = [
    "The lighthouse keeper counted the ships every night.",
    "One evening a ship came in with no crew at all.",
    "She rowed out with a lantern and a loaf of bread.",
    "On the deck she found a cat asleep on a map.",
    "The map showed her own island with a cross on the lighthouse.",
    "She dug beneath the stairs until dawn.",
    "There was only a letter, written in her mother's hand.",
    "She read it twice and then put out the light.",
]


def _tmas(folder, n=8):
    folder.mkdir(parents=True, exist_ok=True)
    for split, first in (("train", 0), ("validation", n)):
        with open(folder / f"tell-me-a-story-{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(first, first + n // 2 if split == "validation" else first + n):
                story = " ".join(SENTENCES[i % 3 :] + SENTENCES[: i % 3]) * 2
                row = {
                    "example_id": str(i),
                    "inputs": f"Write a story about a lighthouse keeper number {i} and a ship.",
                    "targets": story,
                }
                f.write(json.dumps(row) + "\n")
    return folder


TINY_GRPO = (
    "train.max_steps=2",
    "train.save_steps=1",
    "train.batch_size=4",
    "train.num_generations=2",
    "train.max_completion_length=8",
    "lora.r=4",
    "data.max_train_prompts=8",
    "data.fit_to_cap=ignore",
)


def tiny_grpo(*runs: str) -> list[str]:
    """The tiny sizes of every GRPO run named."""
    return [f"{run}.{k}" for run in runs for k in TINY_GRPO]


TINY = (
    [
        "data.max_study_prompts=6",
        "gold.samples_per_prompt=2",
        "gold.max_new_tokens=24",
        "gold_pairs.data.min_words=3",
        "gold_pairs.data.eval_fraction=0.5",
        "proxy_data.samples_per_prompt=3",
        "proxy_data.max_prompts=8",
        "proxy_data.max_new_tokens=12",
        "proxy_data.eval_fraction=0.3",
        "proxies={small: 4, large: 12}",
        "best_of_n.sizes=[1,2,3,4]",
        "measure.samples_per_prompt=2",
        "measure.max_new_tokens=12",
        "measure.agreement_pairs_per_prompt=null",
        "measure.n_resamples=100",
        "measure.fit_resamples=20",
        "ppo.train.max_steps=2",
        "ppo.train.save_steps=1",
        "ppo.train.batch_size=4",
        "ppo.train.minibatch_size=2",
        "ppo.train.micro_batch_size=2",
        "ppo.train.max_new_tokens=8",
        "ppo.lora.r=4",
        "ppo.value.lora.r=4",
        "ppo.data.max_train_prompts=8",
        "dpo.train.max_steps=2",
        "dpo.train.save_steps=1",
        "dpo.train.batch_size=4",
        "dpo.train.max_length=64",
        "dpo.lora.r=4",
        "dpo.data.max_pairs=16",
        "grpo_lc.reward.specs.overlong.buffer=4",
        "seeds={grpo: [1]}",
    ]
    + [
        f"{rm}.{k}"
        for rm in ("gold_rm", "proxy_rm")
        for k in ("train.max_steps=2", "train.batch_size=2", "train.eval_steps=2", "rm.max_length=64", "lora.r=4")
    ]
    + tiny_grpo("grpo", "grpo_lc")
)


@pytest.fixture(scope="module")
def study(tmp_path_factory, tiny_model_dir):
    from rlcw.recipes.outcome import OutcomeConfig, main

    tmp = tmp_path_factory.mktemp("outcome")
    overrides = [f"output_dir={tmp}", f"model.name={tiny_model_dir}", f"data.tmas={_tmas(tmp / 'tmas')}", *TINY]
    cfg = load_config(OutcomeConfig, "configs/outcome/cpu.yaml", overrides)
    return tmp / "outcome", main(cfg), (OutcomeConfig, overrides, main)


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_stage_gold_proxies_and_runs(study):
    root, summary, _ = study
    assert summary["status"] == "completed"
    for stage in ("gold_pairs", "gold_rm", "proxy_rm_small", "proxy_rm_large", "length_fit", *RL_RUNS):
        assert json.loads((root / stage / "summary.json").read_text())["status"] == "completed", stage
    # the proxies' pairs: pairs of start samples for the RL prompts, ordered by sampled gold labels
    samples = _jsonl(root / "proxy_data" / "samples.jsonl")
    assert {r["sample_index"] for r in samples} == {0, 1, 2} and all("gold" in r["scores"] for r in samples)
    gold = {(r["prompt_id"], r["sample_index"]): r["scores"]["gold"] for r in samples}
    pairs = _jsonl(root / "proxy_data" / "pairs" / "train.jsonl") + _jsonl(
        root / "proxy_data" / "pairs" / "eval.jsonl"
    )
    labels = json.loads((root / "proxy_data" / "labels.json").read_text())
    assert len(pairs) == labels["pairs"] == 8 * 3 - labels["identical"] and 0 < labels["label_noise"] < 0.5
    for p in pairs:
        m = p["meta"]
        assert m["chosen_score"] == gold[(m["prompt_id"], m["chosen_index"])] and p["source"] == "gold_labelled"
    # each proxy saw its own number of pairs (train-rm's max_train_pairs)
    for name, n in (("small", 4), ("large", 12)):
        cfg = (root / f"proxy_rm_{name}" / "config.yaml").read_text()
        assert f"max_train_pairs: {n}" in cfg, name
    # DPO trains on the same samples ordered by the RL proxy, never on gold labels or corruption pairs
    dpo = _jsonl(root / "dpo_pairs" / "pairs" / "train.jsonl")
    assert dpo and all(p["source"] == "proxy_large_labelled" for p in dpo)
    assert all(p["meta"]["chosen_score"] >= p["meta"]["rejected_score"] for p in dpo)


RL_RUNS = ("grpo", "grpo_lc", "ppo", "dpo", "grpo_seed1")


def test_measurement_samples_ids_with_kl_on_common_prompts(study):
    root, _, _ = study
    assert "scores" not in _jsonl(root / "pool" / "samples.jsonl")[0]  # sampled once; scored in pool_scores/
    pool = _jsonl(root / "pool_scores" / "samples.jsonl")
    assert len(pool) == 6 * 4 and {r["sample_index"] for r in pool} == {0, 1, 2, 3}
    assert all(set(r["scores"]) == {"gold", "proxy_small", "proxy_large"} for r in pool)
    for run in RL_RUNS:
        steps = sorted(p.name for p in (root / "measure" / run).iterdir())
        assert steps == ["step_000001", "step_000002"], run
        recs = _jsonl(root / "measure" / run / "step_000002" / "samples.jsonl")
        assert len(recs) == 6 * 2 and {r["sample_index"] for r in recs} == {0, 1}
        assert {r["prompt_id"] for r in recs} == {r["prompt_id"] for r in pool}
        # KL on the sampled ids (k3 >= 0 per story) and a story ending in EOS keeps it in its ids
        assert all(r["kl_k3"] >= 0 and len(r["completion_ids"]) <= 12 for r in recs)
        # scored by the gold and the proxy the run optimised; the sampler's log-probs are not kept
        assert all(set(r["scores"]) == {"gold", "proxy_large"} and "completion_logps" not in r for r in recs)
    moved = [r["kl_k3"] for run in RL_RUNS for r in _jsonl(root / "measure" / run / "step_000002" / "samples.jsonl")]
    assert max(moved) > 0  # lr > 0 moved the policies


def test_report_holds_the_gao_plot_fits_agreement_surface_and_ci_tables(study):
    root, summary, _ = study
    text = (root / "report.md").read_text()
    for part in (
        "## Conclusion",
        "stand-in for human judgement",
        "## Reward models",
        "## Gao plot",
        "## Fits",
        "## Peak and fall (split-half)",
        "## Length, repetition and diversity",
        "## Every point",
        "## Every method at its gold peak",
        "## Gold change: length and ending against the residual",
        "## Monitors against the gold peak",
        "## Stage times",
        "## Scale up",
        "estimator k3",
        "| longer story wins |",
    ):
        assert part in text, part
    for plot in ("gao_gold_proxy_vs_d", "length_repetition_diversity_vs_d"):
        assert (root / "plots" / f"{plot}.png").stat().st_size > 1000, plot
        assert f"plots/{plot}.png" in text
    for run in (*RL_RUNS, "best_of_n_small", "best_of_n_large"):
        assert f"**{run}**" in text and f"| {run} | " in text, run
    # every point row: run, x, d, KL, ..., a change with its CI "[low, high]"
    rows = [line for line in text.splitlines() if line.startswith("| best_of_n_large | 4 |") and line.count("|") == 14]
    assert len(rows) == 1 and rows[0].count("[") == 3  # proxy, gold and slop changes with their CIs
    d4 = float(rows[0].split("|")[3])
    assert d4 == pytest.approx(math.sqrt(math.log(4) - 3 / 4), abs=1e-3)
    # best-of-n has 3 points at d > 0: the Gao form d (a - b d) is fitted (a, b as numbers with a CI)
    fit = next(line for line in text.splitlines() if line.startswith("| best_of_n_large | d(a - b d) |"))
    assert fit.split("|")[3].strip()[0] in "+-0123456789" and "[" in fit.split("|")[3]
    # the monitors' table reads every RL run (grpo's second seed included) against the shipped warn rules
    monitor_rows = [line for line in text.splitlines() if line.startswith("| grpo_seed1 | cap_share |")]
    assert len(monitor_rows) == 1 and "max_cap_share 0.95" in monitor_rows[0]
    assert "| max_kl_to_start 0.5 | 5 |" in text  # 5 RL runs read against that rule
    assert "seed: 1" in (root / "grpo_seed1" / "config.yaml").read_text()
    residual_rows = [line for line in text.splitlines() if line.startswith("| grpo | 2 |") and "explained" not in line]
    assert any(line.count("[") == 2 for line in residual_rows)  # Δgold and Δresidual with their CIs
    m = summary["metrics"]
    assert 0.0 <= m["agreement/proxy_large"] <= 1.0 and "time/pool_s" in m and m["grpo/gold_fell"] in (0.0, 1.0)
    assert all(isinstance(v, float) for v in m.values()), {k: v for k, v in m.items() if not isinstance(v, float)}


def test_rerun_reuses_every_stage(study, capsys):
    root, first, (cls, overrides, main) = study
    before = (root / "report.md").read_text()
    again = main(load_config(cls, "configs/outcome/cpu.yaml", overrides))
    out = capsys.readouterr().out
    assert again["status"] == "completed" and " ... " not in out.replace("[outcome] analysis", "")
    assert out.count("completed before, reused") == 11  # prepare_model, gold x2, proxies x2, length_fit, 5 runs
    assert (
        out.count("done before with the same settings, reused") == 7 + 2 * 5
    )  # gold_samples, proxy_data, pool, pool_scores x3 (gold, small, large), dpo_pairs; 5 runs x 2 checkpoints

    def body(text: str) -> str:  # stage times are rounded differently when reused
        return text.split("## Stage times")[0]

    assert body((root / "report.md").read_text()) == body(before)
    # a reused step keeps its time; measure_<run> times one step per checkpoint, and they add up again
    for key in [k for k in first["metrics"] if k.startswith("time/measure_")]:
        assert again["metrics"][key] == pytest.approx(first["metrics"][key], abs=0.2), key


def test_unknown_run_and_bad_proxy_are_rejected(tmp_path):
    from rlcw.errors import RlcwError
    from rlcw.recipes.outcome import OutcomeConfig, main

    cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", "runs=[grpo,rlhf]"])
    with pytest.raises(RlcwError, match="unknown run"):
        main(cfg)
    cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", "rl_proxy=huge"])
    with pytest.raises(RlcwError, match="rl_proxy"):
        main(cfg)
    for bad in ("uwo:x", "wco:1", "max", "uwo:-1"):
        cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", f"ensemble_bon_aggregates=[{bad}]"])
        with pytest.raises(RlcwError, match="ensemble_bon_aggregates.*bad aggregate"):
            main(cfg)
    cfg = load_config(
        OutcomeConfig, None, [f"output_dir={tmp_path}", "best_of_n.sizes=[1,2]", "measure.samples_per_prompt=4"]
    )
    with pytest.raises(RlcwError, match="measure.samples_per_prompt"):
        main(cfg)


@pytest.mark.parametrize("overrides", [o for _, o in SCALE_UP], ids=[why for why, _ in SCALE_UP])
def test_every_scale_up_override_in_the_report_is_a_valid_config(tmp_path, overrides):
    from rlcw.recipes.outcome import OutcomeConfig, validate

    cfg = load_config(OutcomeConfig, "configs/outcome/cpu.yaml", [f"output_dir={tmp_path}", *overrides])
    validate(cfg)


def test_a_given_gold_skips_gold_training_and_best_of_n_runs_alone(study, tmp_path):
    from rlcw.recipes.outcome import OutcomeConfig, main

    root, _, (_, overrides, _) = study
    given = [o for o in overrides if not o.startswith(("output_dir=", "seeds="))]
    cfg = load_config(
        OutcomeConfig,
        "configs/outcome/cpu.yaml",
        [f"output_dir={tmp_path}", *given, f"gold.rm_path={root / 'gold_rm' / 'model'}", "runs=[best_of_n]"],
    )
    summary = main(cfg)
    out = tmp_path / "outcome"
    assert summary["status"] == "completed" and not (out / "gold_samples").exists() and not (out / "gold_rm").exists()
    assert not any((out / run).exists() for run in RL_RUNS) and not (out / "dpo_pairs").exists()
    text = (out / "report.md").read_text()
    assert "given by gold.rm_path" in text and "this study does not check it" in text
    assert "**best_of_n_large**" in text and "**grpo**" not in text
    # the same gold scores the same pool samples the same way as in the study that trained it
    a = {r["id"]: r["scores"]["gold"] for r in _jsonl(root / "pool_scores" / "samples.jsonl")}
    b = {r["id"]: r["scores"]["gold"] for r in _jsonl(out / "pool_scores" / "samples.jsonl")}
    assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], abs=1e-5) for k in a)


def test_ensemble_and_two_head_proxies_their_grpo_runs_and_best_of_n(tmp_path, tiny_model_dir):
    """An ensemble proxy (3 members on the same pairs) and a two-head ODIN proxy trained in the study, GRPO against
    each (grpo_ens, grpo_odin), best-of-n with both; the ODIN proxy scores with its quality head everywhere."""
    from rlcw.recipes.outcome import OutcomeConfig, main
    from rlcw.rm.ensemble import load_manifest
    from rlcw.rm.scoring import load_rm

    ens = [
        "proxies={ens: 12, odin: 12}",
        "rl_proxy=ens",
        "proxy_ensembles={ens: 3}",
        "proxy_length_heads=[odin]",
        "proxy_rm.rm.ensemble.aggregate=wco",
        "proxy_rm.rm.ensemble.offset_stories=8",
        "runs=[grpo_ens,grpo_odin,best_of_n]",
    ] + tiny_grpo("grpo_ens", "grpo_odin")
    tiny = [o for o in TINY if not o.startswith(("proxies=", "seeds="))]
    overrides = [f"output_dir={tmp_path}", f"model.name={tiny_model_dir}", f"data.tmas={_tmas(tmp_path / 'tmas')}"]
    multinomial = ["measure.draw=multinomial"]  # the draw the study fixture's shipped config switches off
    summary = main(load_config(OutcomeConfig, "configs/outcome/cpu.yaml", [*overrides, *tiny, *ens, *multinomial]))
    out = tmp_path / "outcome"
    assert summary["status"] == "completed"
    assert len(load_manifest(out / "proxy_rm_ens" / "model").members) == 3
    members = json.loads((out / "pool_scores" / "proxy_ens" / "members.json").read_text())
    wco = [min(col) for col in zip(*members, strict=True)]  # the aggregate the proxy scored with: the minimum
    pool_ens = [r["scores"]["proxy_ens"] for r in _jsonl(out / "pool_scores" / "samples.jsonl")]
    assert len(members) == 3 and pool_ens == pytest.approx(wco, abs=1e-5)
    assert not (out / "pool_scores" / "proxy_odin" / "members.json").exists()
    grpo_cfg = (out / "grpo_ens" / "config.yaml").read_text()
    assert "proxy_rm_ens/model" in grpo_cfg
    measured = _jsonl(next((out / "measure" / "grpo_ens").glob("step_*")) / "samples.jsonl")
    assert all("proxy_ens" in r["scores"] and "gold" in r["scores"] for r in measured)
    text = (out / "report.md").read_text()
    assert "**grpo_ens**" in text and "**best_of_n_ens**" in text and "ensemble of 3 (wco)" in text
    # the two-head proxy: trained with rm.length_head, grpo_odin's reward, measured and best-of-n on its quality head
    assert "length_head: true" in (out / "proxy_rm_odin" / "config.yaml").read_text()
    assert "length_head: false" in (out / "proxy_rm_ens" / "config.yaml").read_text()
    assert "proxy_rm_odin/model" in (out / "grpo_odin" / "config.yaml").read_text()
    odin_measured = _jsonl(next((out / "measure" / "grpo_odin").glob("step_*")) / "samples.jsonl")
    assert all(set(r["scores"]) == {"gold", "proxy_odin"} for r in odin_measured)
    pool = _jsonl(out / "pool_scores" / "samples.jsonl")[:6]
    prompts, stories = [r["prompt"] for r in pool], [r["story"] for r in pool]
    heads = {h: load_rm(out / "proxy_rm_odin" / "model", head=h).score(prompts, stories) for h in ("quality", "sum")}
    assert [r["scores"]["proxy_odin"] for r in pool] == pytest.approx(heads["quality"], abs=1e-4)
    assert heads["quality"] != pytest.approx(heads["sum"], abs=1e-4)
    assert "**grpo_odin**" in text and "**best_of_n_odin**" in text and "two-head (ODIN), quality head" in text
    # best-of-n under each aggregate of the ensemble, from its members' pool scores: one chosen on half the prompts
    assert "## Ensemble aggregate for best-of-n" in text and "| uwo:0.5 |" in text and "| mean |" in text
    assert "**best_of_n_ens@" in text
    # the ensemble's disagreement measured on every checkpoint of both runs, read against their gold peaks
    for run in ("grpo_ens", "grpo_odin"):
        assert (out / "measure" / run / "step_000002" / "ensemble_ens" / "members.json").is_file()
        assert f"| {run} | measured_disagreement | - |" in text, run


def test_grpo_odin_needs_a_two_head_proxy(tmp_path):
    from rlcw.errors import RlcwError
    from rlcw.recipes.outcome import OutcomeConfig, main

    cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", "runs=[grpo_odin]"])
    with pytest.raises(RlcwError, match="odin_proxy.*not a two-head proxy"):
        main(cfg)
    cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", "proxy_length_heads=[huge]"])
    with pytest.raises(RlcwError, match=r"proxy_length_heads.*'huge' is not a proxy"):
        main(cfg)


def test_grpo_ens_needs_an_ensemble_proxy(tmp_path):
    from rlcw.errors import RlcwError
    from rlcw.recipes.outcome import OutcomeConfig, main

    cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", "runs=[grpo_ens]"])
    with pytest.raises(RlcwError, match="ens_proxy.*not an ensemble proxy"):
        main(cfg)
    cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", "proxy_ensembles={large: 1}"])
    with pytest.raises(RlcwError, match=r"proxy_ensembles.large.*>= 2 members"):
        main(cfg)


def test_seeds_two_golds_and_the_anchored_arm(tmp_path, tiny_model_dir):
    """configs/outcome/seeds_cpu.yaml on the tiny model: each gold on its own half of the TMAS prompts (the second a
    full fine-tune with the prompt in its input), grpo_par anchored on the start's proxy_data stories with KL, every
    run over two seeds, every story scored by both golds, and the arms section read at matched KL by both."""
    from rlcw.recipes.outcome import OutcomeConfig, main

    arms = tiny_grpo("grpo", "grpo_par", "grpo_kl")
    gold2 = [
        "gold2_pairs.data.min_words=3",
        "gold2_pairs.data.eval_fraction=0.5",
        *[
            f"gold2_rm.{k}"
            for k in ("train.max_steps=2", "train.batch_size=2", "train.eval_steps=2", "rm.max_length=64")
        ],
    ]
    study = [
        "runs=[grpo,grpo_par,grpo_kl,best_of_n]",
        "seeds={grpo: [1], grpo_par: [1], grpo_kl: [], grpo_odin: []}",
        "proxies.odin=0",  # the config's ODIN arm has tests of its own; its proxy is dropped here
        "proxy_length_heads=[]",
        "grpo_par.reward.specs.rm.anchor.per_prompt=2",
        "measure.matched_d=[0.01]",
        "proxy_data.max_prompts=null",  # every RL prompt: the anchor's references cover whatever grpo_par draws
        "measure.residual_min_count=1",  # the tiny pool's few start stories still make cells
    ]
    tiny = [o for o in TINY if not o.startswith("seeds=")]
    overrides = [f"output_dir={tmp_path}", f"model.name={tiny_model_dir}", f"data.tmas={_tmas(tmp_path / 'tmas')}"]
    cfg = load_config(OutcomeConfig, "configs/outcome/seeds_cpu.yaml", [*overrides, *tiny, *arms, *gold2, *study])
    summary = main(cfg)
    out = tmp_path / "outcome_seeds"
    assert summary["status"] == "completed"
    # the two golds: disjoint halves of the prompts, the second fully tuned with the prompt in its input
    halves = [
        {r["id"].rsplit("#", 1)[0] for r in _jsonl(out / "gold_samples" / "halves" / f"half_{h}.jsonl")} for h in "ab"
    ]
    assert halves[0] and halves[1] and not halves[0] & halves[1]
    assert halves[0] | halves[1] == {r["id"].rsplit("#", 1)[0] for r in _jsonl(out / "gold_samples" / "stories.jsonl")}
    pairs = [{p["prompt"] for p in _jsonl(out / f"{g}_pairs" / "pairs" / "train.jsonl")} for g in ("gold", "gold2")]
    assert pairs[0] and pairs[1] and not pairs[0] & pairs[1]
    gold2_cfg = (out / "gold2_rm" / "config.yaml").read_text()
    assert "enabled: false" in gold2_cfg.split("lora:")[1].split("\n")[1] and "include_prompt: true" in gold2_cfg
    assert not (out / "gold2_rm" / "model" / "adapter_config.json").exists()
    # grpo_par: the proxy anchored on the start's stories for the same prompts, KL in the loss
    par_cfg = (out / "grpo_par" / "config.yaml").read_text()
    assert f"references: {out}/proxy_data/samples.jsonl" in par_cfg and "beta: 0.1" in par_cfg
    rewards = [json.loads(line) for line in (out / "grpo_par_seed1" / "metrics.jsonl").read_text().splitlines()]
    means = [r["rewards/rm/mean"] for r in rewards if "rewards/rm/mean" in r]
    assert means and all(0.0 < v < 1.0 for v in means)  # sigmoid(r - r_ref): bounded
    # every run and seed measured, every story scored by both golds
    for run in ("grpo", "grpo_seed1", "grpo_par", "grpo_par_seed1"):
        recs = _jsonl(out / "measure" / run / "step_000002" / "samples.jsonl")
        assert all({"gold", "gold2", "proxy_large"} <= set(r["scores"]) for r in recs), run
    assert "seed: 1" in (out / "grpo_par_seed1" / "config.yaml").read_text()
    text = (out / "report.md").read_text()
    assert "## Arms over seeds at matched KL" in text and "second gold (measures only)" in text
    assert "| gold raw | gold residual | gold2 raw | gold2 residual | outside |" in text
    assert "| run | junk share by step | most junk from step |" in text  # every seeded run's checkpoints
    assert any(line.startswith("| grpo_par_seed1 | 1: ") for line in text.splitlines())
    assert "Seeds whose stories turned to junk, by arm" in text and "junk/grpo/step2" in summary["metrics"]
    for arm in ("grpo", "grpo_par"):
        assert any(line.startswith(f"| {arm} | 2 | d = 0.01 |") for line in text.splitlines()), arm
        assert any(line.startswith(f"| {arm} | 2 | peak (d = ") for line in text.splitlines()), arm
    rows = [
        line.split(" | ")
        for line in text.splitlines()
        if line.startswith(("| grpo | 2 | d = ", "| grpo_par | 2 | d = "))
    ]
    assert all("[" in row[4] and "[" in row[6] and not row[7].startswith("100%") for row in rows)  # residuals read
    assert (
        "| grpo_par - grpo | d = 0.01 |" in text and "Conclusions (stated only where all of gold, gold2 agree)" in text
    )
    m = summary["metrics"]
    assert "arms/grpo_par/d0.01/gold2/residual" in m and "agreement/gold2" in m
    # the junk screen (on in the config): each gold's floor is its lowest score of a start story, stated in the report
    assert "(gold readings from that step on score junk as a failure, each gold's floor)" in text
    start = [r for r in _jsonl(out / "pool_scores" / "samples.jsonl") if r["sample_index"] < 2]
    for g in ("gold", "gold2"):
        floor = min(r["scores"][g] for r in start)
        assert m[f"junk_floor/{g}"] == pytest.approx(floor) and f"{g} {floor:+.2f}" in text, g
