"""Outcome study: does optimising a learned reward make better stories, or only a higher reward?

Gao, Schulman & Hilton (2022)'s over-optimisation design at small scale (the maths and its
design note: `rlcw.metrics.overopt`), every training stage a real rlcw recipe in its own folder:
1. Gold, a fixed scorer RL never trains against: `gold.rm_path` (any RM folder or hub id), or by
   default one trained here: the start model writes `gold.samples_per_prompt` stories for every TELL ME
   A STORY train + validation prompt (`gold_samples/`), `build-pairs data.kind=human_vs_model` pairs each
   with the human story cut to the same length (`gold_pairs/`), `train-rm` (LoRA on all layers,
   `gold_rm/`); its held-out accuracy (prompt-level CI) goes into the report.
2. Proxies learned from the gold: `proxy_data.samples_per_prompt` start samples per RL prompt, scored by
   the gold, pairs labelled by sampled Bradley-Terry draws (label noise stated; `proxy_data/`), and one
   `train-rm` per entry of `proxies` (name -> number of training pairs, `proxy_rm_<name>/`).
3. Runs against the proxy `rl_proxy`: `grpo`, `grpo_lc` (length controls), `ppo`, `dpo` (offline, on the
   start's samples for the RL prompts labelled by the proxy, `dpo_pairs/`), and `best_of_n` for EVERY
   proxy from one pool of max(best_of_n.sizes) start samples per held-out prompt (`pool/`).
   A proxy named in `proxy_ensembles` (name -> members) is an RM ensemble (`rlcw.rm.ensemble`) trained
   on that proxy's pairs, each member on a bootstrap resample (so the same total pairs as a single proxy);
   `grpo_ens` runs GRPO against the ensemble proxy `ens_proxy` (its aggregate: `proxy_rm.rm.ensemble.*`),
   and best-of-n covers it like every proxy. A proxy named in `proxy_length_heads` is a length-disentangled
   two-head RM (ODIN, `rm.length_head=true`, `rlcw.rm.odin`) trained on that proxy's pairs; `grpo_odin`
   runs GRPO against its quality head (`odin_proxy`), and best-of-n and the measurements read that head too.
4. Measurement (`measure/`): every checkpoint samples `measure.samples_per_prompt` stories for each
   bundled `study` prompt (top_k 0, top_p 1, temperature 1, CRN; `rlcw.outcome.measure`), KL per story to
   the start on the sampled ids incl. EOS, gold and every proxy score, length, repetition, diversity.
   With `measure.screen_junk` (default) every story that is no prose at all scores as each gold's floor (its
   lowest score of a start story) in every gold reading (`rlcw.outcome.screen`); the proxies' scores stay raw.
5. Report (`report.md`, `plots/`): gold and proxy against d = sqrt(KL) for every run and best-of-n on
   one figure with Gao fits, length/repetition/diversity against d, the RM table, the fits, the
   split-half peak test, every point with prompt-level CIs, per-run verdicts (`rlcw.outcome.analysis`).

Every stage is reused when it completed under the same settings (`resume=true`), and a training stage
killed under the same settings continues from its last checkpoint, so a killed study continues with the same
command; stage wall times go into summary.json and the report.

    bash scripts/outcome_study.sh                                   # set-up + the CPU study
    rlcw outcome --config configs/outcome/cpu.yaml
    rlcw outcome --config configs/outcome/cpu.yaml runs=[grpo,best_of_n] grpo.train.max_steps=60
    rlcw outcome --config configs/outcome/cpu.yaml gold.rm_path=<RM folder or hub id>   # an external gold
    rlcw outcome --config configs/outcome/cpu.yaml "runs=[grpo,grpo_ens,best_of_n]" \
        "proxies={small: 80, large: 640, ens: 640}" "proxy_ensembles={ens: 4}" proxy_rm.rm.ensemble.aggregate=wco
    rlcw outcome --config configs/outcome/cpu.yaml "runs=[grpo,grpo_odin]" \
        "proxies={small: 80, large: 640, odin: 640}" "proxy_length_heads=[odin]"
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.io import read_jsonl
from rlcw.outcome import analysis
from rlcw.outcome.pairs import accuracy_by_prompt
from rlcw.outcome.report import write_outcome_report
from rlcw.pipelines.outcome_readings import (
    add_slop,
    agreement_rows,
    arms_reading,
    ensemble_bon,
    monitor_reads,
    screen_golds,
)
from rlcw.pipelines.outcome_stages import (
    DEFAULT_RUNS,
    GRPO_RUNS,
    SHIPPED_WARN,
    TRAINED,
    check,
    check_study_keys,
    monitor_proxy,
    proxy_rows,
    proxy_stage,
    run_proxy,
    seed_runs,
    seeded,
    study_setup,
    trained_runs,
    wire,
)
from rlcw.pipelines.outcome_steps import (
    Study,
    dpo_pairs_step,
    gold_samples_step,
    measure_run,
    pool_step,
    proxy_data_step,
    study_rows,
)
from rlcw.pipelines.stages import Stages
from rlcw.recipes import build_pairs, eval_rm, prepare_model, train_rm
from rlcw.recipes import dpo as dpo_recipe
from rlcw.recipes import grpo as grpo_recipe
from rlcw.recipes import ppo as ppo_recipe
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import ModelConfig, RunKeys


@dataclass
class StudyData:
    tmas: str = "../shared/data/tell-me-a-story"  # TELL ME A STORY (folder, jsonl or hub id) for the default gold
    # TELL ME A STORY splits read for the default gold (its prompts and human stories)
    tmas_splits: list[str] = field(default_factory=lambda: ["train", "validation"])
    prompts: str = "bundled"  # RL and held-out prompts
    rl_split: str = "train"  # prompts the proxies' pairs, RL and DPO use
    study_split: str = "study"  # held-out measurement prompts (never trained on)
    max_study_prompts: int | None = None  # first N held-out study prompts (None = all)


@dataclass
class GoldSection:
    rm_path: str | None = None  # any RM folder or hub id; None = train the default gold here
    samples_per_prompt: int = 3  # start-model stories per TELL ME A STORY prompt
    max_new_tokens: int = 128  # new-token cap of the start-model stories
    max_prompts: int | None = None  # None = every prompt of data.tmas_splits
    batch_size: int = 32  # TMAS prompts are long (~140 tokens, up to ~500): smaller sampling batches


@dataclass
class SecondGoldSection:
    # a second gold that shares neither the first gold's data nor its recipe: the TELL ME A STORY prompts are split
    # in two halves (by a seeded hash), the first gold trains on one (gold_pairs, gold_rm) and this one on the other
    # (gold2_pairs, gold2_rm: its own recipe, by default a full fine-tune); every story is scored by both
    enabled: bool = False


@dataclass
class ProxyDataSection:
    samples_per_prompt: int = 8  # k start samples per RL prompt; pairs among them
    pairs_per_prompt: int | None = None  # None = all k (k - 1) / 2
    label_temperature: float = 1.0  # Bradley-Terry label temperature on gold scores (0 = noiseless)
    eval_fraction: float = 0.2  # RL prompts whose pairs are train-rm's eval split
    max_new_tokens: int = 88  # new-token cap of the start samples
    max_prompts: int | None = None  # first N prompts of data.rl_split (None = all)


@dataclass
class BestOfNSection:
    sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])  # pool = the largest


@dataclass
class MeasureSection:
    samples_per_prompt: int = 2  # per held-out prompt at every checkpoint (the first of the pool for the start)
    max_new_tokens: int = 88  # new-token cap of the measured samples
    seed: int = 1234  # sample k draws with seed + k (CRN)
    batch_size: int = 96  # prompt rows per sampling batch (96: every study prompt in one batch)
    # every sampling stage's draw: multinomial, or inverse_cdf (one uniform a row a step from the sample index's
    # seed, ended rows leave the batch, indices share a batch: the same distribution, other samples, faster)
    draw: str = "multinomial"
    kl_batch_size: int = 32  # stories per batch when computing KL to the start
    agreement_pairs_per_prompt: int | None = 16  # pool pairs per held-out prompt for the RM agreement table
    n_resamples: int = 1000  # prompt-level bootstrap
    fit_resamples: int = 300  # prompt-level CIs of the fits
    matched_d: list[float] = field(default_factory=lambda: [2.0, 4.0, 6.0])  # d = sqrt(KL) the arms are compared at
    residual_bins: int = 8  # quantile bins of words (x ended) the residual's start-story cells use
    residual_min_count: int = 5  # start stories a cell needs before a residual may use it
    # every gold reading scores a story that is no prose at all as that gold's lowest start-story score (a failure;
    # the golds paid junk as a gain: `rlcw.outcome.screen`); false reads the golds' raw scores of junk
    screen_junk: bool = True


@dataclass
class OutcomeConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)
    data: StudyData = field(default_factory=StudyData)
    gold: GoldSection = field(default_factory=GoldSection)
    proxy_data: ProxyDataSection = field(default_factory=ProxyDataSection)
    # proxy name -> training pairs of its RM (data.max_train_pairs); 0 drops a proxy (e.g. the default small)
    proxies: dict[str, int] = field(default_factory=lambda: {"small": 80, "large": 640})
    rl_proxy: str = "large"  # the proxy grpo, grpo_lc, ppo and dpo optimise
    proxy_ensembles: dict[str, int] = field(default_factory=dict)  # proxy name -> ensemble members (>= 2)
    ens_proxy: str = "ens"  # the ensemble proxy grpo_ens optimises
    proxy_length_heads: list[str] = field(default_factory=list)  # proxies trained as ODIN two-head RMs
    odin_proxy: str = "odin"  # the two-head proxy grpo_odin optimises (its quality head)
    # the study's optimization runs: grpo | grpo_lc | grpo_ens | grpo_odin | grpo_par | grpo_kl | grpo_default |
    # grpo_refs | ppo | dpo | best_of_n
    runs: list[str] = field(default_factory=lambda: list(DEFAULT_RUNS))
    # more RL seeds per trained run: run name -> seeds, each run <name>_seed<k> (e.g. {grpo: [1, 2]}); the report
    # reads every run with seeds as an arm over its seeds at matched KL (`rlcw.outcome.seeds`)
    seeds: dict[str, list[int]] = field(default_factory=dict)
    gold2: SecondGoldSection = field(default_factory=SecondGoldSection)
    # best-of-n under each aggregate of the ensemble proxy (from its members' pool scores; uwo:<lambda>): the one
    # with the best gold on half the prompts is reported, tested on the other half
    ensemble_bon_aggregates: list[str] = field(default_factory=lambda: ["mean", "wco", "uwo:0.5", "uwo:1", "uwo:2"])
    # warn rules the monitors' lead-time table reads the RL runs' logged statistics against (rlcw.outcome.monitors)
    monitor_rules: dict[str, float] = field(default_factory=lambda: dict(SHIPPED_WARN))
    gold_pairs: build_pairs.BuildPairsConfig = field(default_factory=build_pairs.BuildPairsConfig)
    gold_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)
    gold2_pairs: build_pairs.BuildPairsConfig = field(default_factory=build_pairs.BuildPairsConfig)
    gold2_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)  # the second gold's recipe
    proxy_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)  # every proxy's settings
    grpo: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    grpo_lc: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    grpo_ens: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    grpo_odin: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    # against the RL proxy with reward specs of its own: a spec's `anchor` without `references` is anchored on
    # the start's proxy_data stories for the same prompt (PAR, `rlcw.rewards.anchored`)
    grpo_par: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    grpo_kl: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)  # e.g. grpo + beta
    # e.g. the quickstart's GRPO as shipped (its reward terms, schedule and rollout) against the RL proxy
    grpo_default: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    # e.g. grpo_default with reference stories injected into its groups (`rollout.references`)
    grpo_refs: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    ppo: ppo_recipe.PPORecipeConfig = field(default_factory=ppo_recipe.PPORecipeConfig)
    dpo: dpo_recipe.DPORecipeConfig = field(default_factory=dpo_recipe.DPORecipeConfig)
    best_of_n: BestOfNSection = field(default_factory=BestOfNSection)
    measure: MeasureSection = field(default_factory=MeasureSection)
    resume: bool = True  # reuse stages already completed with the same settings
    run_name: str = "outcome"  # name of the run folder under output_dir


def validate(cfg: OutcomeConfig) -> None:
    """Every check of the study's own keys and of each stage's, before the run folder is written and before
    anything loads: wire() first (an override it would reset is an error), then each stage's validate()."""
    check_study_keys(cfg)
    wire(cfg, str(Path(cfg.output_dir) / cfg.run_name))
    checks = [("gold_pairs", build_pairs.validate), ("gold_rm", train_rm.validate), ("proxy_rm", train_rm.validate)]
    checks += [("dpo", dpo_recipe.validate)] if "dpo" in cfg.runs else []
    special = [n for n in cfg.proxies if n in cfg.proxy_ensembles or n in cfg.proxy_length_heads]
    checks += [("proxy_rm", lambda _, n=n: train_rm.validate(proxy_stage(cfg, n))) for n in special]
    for name, validate_stage in checks:
        try:
            validate_stage(getattr(cfg, name))
        except RlcwError as exc:  # name the study's key: proxy_rm.train.batch_size, not train.batch_size
            message = str(exc).split("\n  hint:")[0].removeprefix(f"{exc.where}: ")
            raise RlcwError(message, where=f"{name}.{exc.where}" if exc.where else name, hint=exc.hint) from None


def gold_steps(cfg: OutcomeConfig, st: Stages, study: Study) -> list[dict]:
    """Train the default gold (or take gold.rm_path), and the second gold when `gold2.enabled`; each one's row of
    the RM table with its held-out accuracy on human-vs-model pairs."""
    if cfg.gold.rm_path:
        return [{"rm": "gold", "role": "gold (measures only)", "note": f"given: `{cfg.gold.rm_path}`"}]
    gold_samples_step(cfg, st, study)
    return [trained_gold(cfg, st, study, gold) for gold in study.golds()]


def proxy_steps(cfg: OutcomeConfig, st: Stages, study: Study, study_prompts: list[dict]) -> list[dict]:
    """Gold-labelled on-policy pairs -> one proxy per size -> their rows of the RM table."""
    labels = proxy_data_step(cfg, st, study, study_prompts)
    done = {name: st.run(f"proxy_rm_{name}", train_rm.main, proxy_stage(cfg, name)) for name in cfg.proxies}
    return proxy_rows(cfg, done, labels)


def trained_gold(cfg: OutcomeConfig, st: Stages, study: Study, gold: str) -> dict:
    """Build `gold`'s human-vs-model pairs, train it (`<gold>_pairs/`, `<gold>_rm/`), and measure its held-out
    accuracy on its own held-out prompts' pairs."""
    pairs = st.run(f"{gold}_pairs", build_pairs.main, getattr(cfg, f"{gold}_pairs"))
    st.run(f"{gold}_rm", train_rm.main, getattr(cfg, f"{gold}_rm"))
    held_file = study.root / f"{gold}_pairs" / "pairs" / "eval.jsonl"
    check(
        held_file.is_file(),
        f"the {gold} has no held-out pairs to measure its accuracy on",
        f"{gold}_pairs.data.eval_fraction",
        "raise it, or gold.max_prompts (pairs are split by prompt)",
    )
    held = read_jsonl(held_file)
    scorer = study.scorer(gold)
    acc = accuracy_by_prompt(
        scorer.score([p["prompt"] for p in held], [p["chosen"] for p in held]),
        scorer.score([p["prompt"] for p in held], [p["rejected"] for p in held]),
        [p["prompt"] for p in held],
        n_resamples=cfg.measure.n_resamples,
    )
    note = (
        f"held-out accuracy on human-vs-model pairs (held-out TMAS prompts): {acc.accuracy:.3f} "
        f"[{acc.ci_low:.3f}, {acc.ci_high:.3f}] ({acc.pairs} pairs, {acc.prompts} prompts)"
    )
    if cfg.gold2.enabled:
        lora = getattr(cfg, f"{gold}_rm").lora
        recipe = f"LoRA r={lora.r}" if lora.enabled else "full fine-tune"
        note += f"; trained on {'the first' if gold == 'gold' else 'the other'} half of the TMAS prompts ({recipe})"
    role = "gold (measures only)" if gold == "gold" else "second gold (measures only)"
    return {"rm": gold, "role": role, "train_pairs": pairs["metrics"]["train_pairs"], "note": note}


def length_fit_step(cfg: OutcomeConfig, st: Stages, root: str) -> None:
    """grpo_lc's length-controlled reward reads a length fit from the RL proxy's folder (eval-rm installs it)."""
    e = eval_rm.EvalRMConfig(output_dir=root, run_name="length_fit", seed=cfg.seed)
    e.scorer.kind, e.scorer.path = "bt", f"{root}/proxy_rm_{cfg.rl_proxy}/model"
    e.data.file = f"{root}/proxy_data/pairs/eval.jsonl"
    e.length_control.fit_on, e.length_control.install = f"{root}/proxy_data/pairs/train.jsonl", True
    st.run("length_fit", eval_rm.main, e)


def train_runs(cfg: OutcomeConfig, st: Stages, study: Study) -> None:
    """DPO's pairs and grpo_lc's length fit when those runs are asked for, then every trained run."""
    if "dpo" in cfg.runs:
        dpo_pairs_step(cfg, st, study)
    if "grpo_lc" in cfg.runs:
        length_fit_step(cfg, st, str(study.root))
    trainers = {name: grpo_recipe.main for name in GRPO_RUNS}
    trainers.update(ppo=ppo_recipe.main, dpo=dpo_recipe.main)
    for name in [r for r in cfg.runs if r in TRAINED]:
        st.run(name, trainers[name], getattr(cfg, name))
    for name, (run, k) in seed_runs(cfg).items():
        st.run(name, trainers[run], seeded(cfg, run, k))


def main(cfg: OutcomeConfig) -> dict:
    validate(cfg)
    with stage_run(cfg, "outcome") as run:
        root = str(run.path)
        wire(cfg, root)
        st = Stages(cfg.resume, "outcome")
        study = Study(run.path, cfg.model, cfg.measure, cfg.gold.rm_path, cfg.gold2.enabled, list(cfg.proxies))
        rows = study_rows(cfg)
        st.run(
            "prepare_model",
            prepare_model.main,
            prepare_model.PrepareModelConfig(model=cfg.model, output_dir=root, run_name="prepare_model"),
        )
        rm_rows = [*gold_steps(cfg, st, study), *proxy_steps(cfg, st, study, rows)]
        pool = pool_step(cfg, st, study, rows)
        rm_rows = agreement_rows(cfg, pool, rm_rows)
        train_runs(cfg, st, study)
        measured = {name: measure_run(cfg, st, study, name, rows) for name in trained_runs(cfg)}
        pool, measured, floor = screen_golds(cfg, study, pool, measured)  # every gold reading below is screened
        k = cfg.measure.samples_per_prompt
        start = [r for r in pool if r["sample_index"] < k]
        rest = [r for r in pool if r["sample_index"] >= k]  # the gold's length/ending slopes: not the start's stories
        setup = study_setup(cfg, rows, floor)
        setup.slop_phrases = add_slop(pool, start, measured)
        curves = [
            analysis.rl_curve(name, f"proxy_{run_proxy(cfg, name)}", start, points, slope_records=rest or start)
            for name, points in measured.items()
        ]
        choice = None
        if "best_of_n" in cfg.runs:
            curves += [
                analysis.bon_curve(f"best_of_n_{p}", f"proxy_{p}", pool, cfg.best_of_n.sizes) for p in cfg.proxies
            ]
            if monitor_proxy(cfg) and cfg.ensemble_bon_aggregates:
                chosen, choice = ensemble_bon(cfg, study, pool)
                curves.append(chosen)
        t0, m = time.time(), cfg.measure
        summaries = [analysis.summarise(c, m.n_resamples, m.fit_resamples, cfg.seed) for c in curves]
        reads = monitor_reads(cfg, st, study, summaries, measured, pool)
        rl = [c for c in curves if c.run in measured]
        arms, arm_flat = arms_reading(cfg, study, start, rest or start, measured, rl, floor)
        st.timings["analysis"] = time.time() - t0
        report, flat, plots = write_outcome_report(
            run.path, summaries, rm_rows, setup, st.timings, monitors=reads, aggregate_choice=choice, arms=arms
        )
        metrics = {**flat, **arm_flat, **{f"junk_floor/{g}": v for g, v in (floor or {}).items()}}
        metrics["wall_time_s"] = round(sum(st.timings.values()), 1)
        metrics.update({f"time/{k}_s": round(v, 1) for k, v in st.timings.items()})
        metrics.update({f"agreement/{r['rm']}": r["agreement"].accuracy for r in rm_rows if r.get("agreement")})
        return run.write_summary("completed", metrics, {"report": report, **plots})
