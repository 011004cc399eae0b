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
   A proxy named in `proxy_ensembles` (name -> members) is an RM ensemble (`rlcw.rewards.ensemble`) trained
   on that proxy's pairs, each member on a bootstrap resample (so the same total pairs as a single proxy);
   `grpo_ens` runs GRPO against the ensemble proxy `ens_proxy` (its aggregate: `proxy_rm.rm.ensemble.*`),
   and best-of-n covers it like every proxy. A proxy named in `proxy_length_heads` is a length-disentangled
   two-head RM (ODIN, `rm.length_head=true`, `rlcw.rewards.odin`) trained on that proxy's pairs; `grpo_odin`
   runs GRPO against its quality head (`odin_proxy`), and best-of-n and the measurements read that head too.
4. Measurement (`measure/`): every checkpoint samples `measure.samples_per_prompt` stories for each
   bundled `study` prompt (top_k 0, top_p 1, temperature 1, CRN; `rlcw.outcome.measure`), KL per story to
   the start on the sampled ids incl. EOS, gold and every proxy score, length, repetition, diversity.
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

import copy
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlcw.config import assign, to_yaml
from rlcw.data.prompts import load_prompts
from rlcw.data.records import write_preferences, write_stories
from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from rlcw.measure.monitors import validate_rules
from rlcw.outcome import analysis
from rlcw.outcome.measure import add_kl, add_scores, checkpoints_of, load_gold_scorer, sample_stories
from rlcw.outcome.monitors import MEASURED, MonitorRead, lead_rows, read_series
from rlcw.outcome.pairs import accuracy_by_prompt, agreement_with, labelled_pairs, split_by_prompt
from rlcw.outcome.report import StudySetup, write_outcome_report
from rlcw.recipes import build_pairs, eval_rm, prepare_model, train_rm
from rlcw.recipes import dpo as dpo_recipe
from rlcw.recipes import grpo as grpo_recipe
from rlcw.recipes import ppo as ppo_recipe
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import ModelConfig
from rlcw.rewards.anchored import default_references
from rlcw.runs import last_checkpoint, move_aside, resume_mode
from rlcw.sampling import DRAWS

RUNS = ("grpo", "grpo_lc", "grpo_ens", "grpo_odin", "grpo_par", "grpo_kl", "ppo", "dpo", "best_of_n")
TRAINED = ("grpo", "grpo_lc", "grpo_ens", "grpo_odin", "grpo_par", "grpo_kl", "ppo", "dpo")
GRPO_RUNS = ("grpo", "grpo_lc", "grpo_ens", "grpo_odin", "grpo_par", "grpo_kl")
# grpo_ens needs an ensemble proxy (proxy_ensembles), grpo_odin a two-head one (proxy_length_heads)
DEFAULT_RUNS = ("grpo", "grpo_lc", "ppo", "dpo", "best_of_n")
# configs/grpo/cpu.yaml's monitor.warn: the thresholds the lead-time table tests by default
SHIPPED_WARN = {
    "max_cap_share": 0.95,
    "max_rep_intra": 0.15,
    "min_distinct_group": 0.6,
    "max_reward_length_corr": 0.8,
    "max_kl_to_start": 0.5,
    "max_slop": 15.0,
}
GOLD_REWARDS = (
    "It was trained to tell TELL ME A STORY's human-written stories from the start model's own stories for the "
    "same prompts, both cut to the same length: it rewards text that reads like those human writers' rather "
    "than the start model's, which is not the same as a better story for a reader."
)


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


@dataclass
class OutcomeConfig:
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
    # the study's optimization runs: grpo | grpo_lc | grpo_ens | grpo_odin | ppo | dpo | best_of_n
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
    ppo: ppo_recipe.PPORecipeConfig = field(default_factory=ppo_recipe.PPORecipeConfig)
    dpo: dpo_recipe.DPORecipeConfig = field(default_factory=dpo_recipe.DPORecipeConfig)
    best_of_n: BestOfNSection = field(default_factory=BestOfNSection)
    measure: MeasureSection = field(default_factory=MeasureSection)
    resume: bool = True  # reuse stages already completed with the same settings
    output_dir: str = "runs"  # parent folder of the run folder <output_dir>/<run_name>
    run_name: str = "outcome"  # name of the run folder under output_dir
    seed: int = 0  # random seed of the run
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>


STAGE_NAMES = ("gold_pairs", "gold_rm", "gold2_pairs", "gold2_rm", "proxy_rm", *GRPO_RUNS, "ppo", "dpo")


def wire(cfg: OutcomeConfig, root: str) -> None:
    """Point every stage at the shared model, seed and this study's folder, and chain their files.

    Every key set here is derived: setting one yourself (YAML or command line) to another value is an
    error naming it (`rlcw.config.assign`), never a silent reset. Each proxy's train-rm config is a copy of
    `proxy_rm` with its own run name and `data.max_train_pairs` (`proxy_stage`)."""

    def put(key: str, value) -> None:
        assign(cfg, key, value)

    for name in STAGE_NAMES:
        put(f"{name}.output_dir", root), put(f"{name}.seed", cfg.seed)
        if name != "proxy_rm":
            put(f"{name}.run_name", name)
    base = ModelConfig(**vars(cfg.model))
    halves = cfg.gold2.enabled  # each gold on its own half of the prompts
    for gold, half in (("gold", "half_a"), ("gold2", "half_b")):
        put(f"{gold}_pairs.data.kind", "human_vs_model")
        put(
            f"{gold}_pairs.data.stories",
            f"{root}/gold_samples/" + (f"halves/{half}.jsonl" if halves else "stories.jsonl"),
        )
        put(f"{gold}_rm.model", ModelConfig(name=cfg.model.name, dtype=cfg.model.dtype))
        put(f"{gold}_rm.data.train_file", f"{root}/{gold}_pairs/pairs/train.jsonl")
        put(f"{gold}_rm.data.eval_file", f"{root}/{gold}_pairs/pairs/eval.jsonl")
    default_references(cfg.grpo_par.reward.specs, f"{root}/proxy_data/samples.jsonl")  # PAR on the start's stories
    put("proxy_rm.model", ModelConfig(name=cfg.model.name, dtype=cfg.model.dtype))
    put("proxy_rm.data.train_file", f"{root}/proxy_data/pairs/train.jsonl")
    put("proxy_rm.data.eval_file", f"{root}/proxy_data/pairs/eval.jsonl")
    for rl in (*GRPO_RUNS, "ppo"):
        put(f"{rl}.model", base), put(f"{rl}.reward.rm_path", f"{root}/proxy_rm_{run_proxy(cfg, rl)}/model")
        put(f"{rl}.data.prompts", cfg.data.prompts), put(f"{rl}.data.train_split", cfg.data.rl_split)
        put(f"{rl}.eval.every_steps", 0)  # the study measures every checkpoint itself
    put("dpo.model", base), put("dpo.eval.every_steps", 0)
    put("dpo.data.train_file", f"{root}/dpo_pairs/pairs/train.jsonl")
    put("dpo.data.eval_file", f"{root}/dpo_pairs/pairs/eval.jsonl")


def run_proxy(cfg: OutcomeConfig, run: str) -> str:
    """The proxy a trained run optimises: `ens_proxy` for grpo_ens, `odin_proxy` for grpo_odin, `rl_proxy` for
    the others."""
    return {"grpo_ens": cfg.ens_proxy, "grpo_odin": cfg.odin_proxy}.get(arm_of(cfg, run)[0], cfg.rl_proxy)


def proxy_stage(cfg: OutcomeConfig, name: str) -> train_rm.TrainRMConfig:
    """The train-rm config of proxy `name`: `proxy_rm` with run name proxy_rm_<name> and its pair budget
    (and `rm.ensemble.size` when `proxy_ensembles` names it, `rm.length_head` when `proxy_length_heads` does)."""
    out = copy.deepcopy(cfg.proxy_rm)
    out.run_name, out.data.max_train_pairs = f"proxy_rm_{name}", cfg.proxies[name]
    out.rm.ensemble.size = cfg.proxy_ensembles.get(name, out.rm.ensemble.size)
    out.rm.length_head = out.rm.length_head or name in cfg.proxy_length_heads
    return out


def seeded(cfg: OutcomeConfig, run: str, seed: int):
    """Trained run `run` (after `wire`) with another seed, in its own folder <run>_seed<k>."""
    out = copy.deepcopy(getattr(cfg, run))
    out.run_name, out.seed = f"{run}_seed{seed}", seed
    return out


def seed_runs(cfg: OutcomeConfig) -> dict[str, tuple[str, int]]:
    """<run>_seed<k> -> (run, k) for every extra seed of `seeds`, in training order."""
    return {f"{r}_seed{k}": (r, k) for r, ks in cfg.seeds.items() for k in ks}


def trained_runs(cfg: OutcomeConfig) -> list[str]:
    """Every trained run's name, in training order: `runs`, then each run's extra seeds."""
    return [r for r in cfg.runs if r in TRAINED] + list(seed_runs(cfg))


def arm_of(cfg: OutcomeConfig, name: str) -> tuple[str, int]:
    """(the run a trained run belongs to, its seed): (grpo, seed) for grpo, (grpo, 1) for grpo_seed1, ..."""
    return seed_runs(cfg).get(name) or (name, getattr(cfg, name).seed)


def _check(ok: bool, message: str, where: str, hint: str | None = None) -> None:
    if not ok:
        raise RlcwError(message, where=where, hint=hint)


def check_study_keys(cfg: OutcomeConfig) -> None:
    """The study's own keys: runs, proxies, best-of-n sizes, sample counts and batch sizes."""
    unknown = sorted(set(cfg.runs) - set(RUNS))
    _check(not unknown, f"unknown run(s) {unknown}", "runs", f"choose from {', '.join(RUNS)}")
    for name, n in cfg.proxies.items():
        ok = isinstance(n, int) and not isinstance(n, bool) and n >= 0
        _check(ok, f"proxy {name!r} needs >= 1 training pair (0 drops it), got {n!r}", f"proxies.{name}")
    # 0 pairs drops a proxy: a config file's mapping adds to the defaults' (small, large), so this is how it leaves one out
    cfg.proxies = {name: n for name, n in cfg.proxies.items() if n != 0}
    _check(bool(cfg.proxies), "no proxy to train", "proxies", "e.g. proxies={small: 80, large: 640}")
    _check(cfg.rl_proxy in cfg.proxies, f"{cfg.rl_proxy!r} is not a proxy", "rl_proxy", f"one of {list(cfg.proxies)}")
    for name, k in cfg.proxy_ensembles.items():
        _check(name in cfg.proxies, f"{name!r} is not a proxy", f"proxy_ensembles.{name}", "add it to proxies")
        _check(isinstance(k, int) and k >= 2, f"an ensemble needs >= 2 members, got {k!r}", f"proxy_ensembles.{name}")
    for name in cfg.proxy_length_heads:
        _check(name in cfg.proxies, f"{name!r} is not a proxy", "proxy_length_heads", "add it to proxies")
    special = (
        (
            "grpo_ens",
            "ens_proxy",
            cfg.proxy_ensembles,
            "an ensemble",
            '"proxies={small: 80, large: 640, ens: 640}" "proxy_ensembles={ens: 4}"',
        ),
        (
            "grpo_odin",
            "odin_proxy",
            cfg.proxy_length_heads,
            "a two-head",
            '"proxies={small: 80, large: 640, odin: 640}" "proxy_length_heads=[odin]"',
        ),
    )
    for run, key, kinds, kind, example in special:  # a run against a special proxy needs that proxy to be one
        if run in cfg.runs:
            proxy = getattr(cfg, key)
            _check(proxy in kinds, f"{run} optimises {proxy!r}, which is not {kind} proxy", key, f"e.g. {example}")
    for run, seeds in cfg.seeds.items():
        where = f"seeds.{run}"
        ok = not seeds or (run in cfg.runs and run in TRAINED)  # an empty list asks for nothing
        _check(ok, f"{run!r} is not a trained run of `runs`", where, f"runs: {cfg.runs}")
        ok = all(isinstance(k, int) for k in seeds) and len(set(seeds)) == len(seeds) and cfg.seed not in seeds
        _check(ok, f"seeds must be distinct integers other than seed={cfg.seed}, got {seeds}", where)
    _check(all(d > 0 for d in cfg.measure.matched_d), "every d must be > 0", "measure.matched_d", "e.g. [2, 4, 6]")
    _check(cfg.measure.residual_bins >= 1, "must be >= 1", "measure.residual_bins")
    _check(
        not cfg.gold2.enabled or not cfg.gold.rm_path,
        "a second gold is trained on half of TELL ME A STORY, which a given gold.rm_path does not use",
        "gold2.enabled",
        "set gold2.enabled=false, or leave gold.rm_path empty",
    )
    validate_rules({k: v for k, v in cfg.monitor_rules.items() if k.partition("_")[2] != MEASURED}, "monitor_rules")
    for label in cfg.ensemble_bon_aggregates:
        parse_aggregate(label)
    sizes, m, d = cfg.best_of_n.sizes, cfg.measure, cfg.proxy_data
    _check(bool(sizes) and all(isinstance(k, int) and k >= 1 for k in sizes), f"bad sizes {sizes}", "best_of_n.sizes")
    pool = max(sizes)
    _check(pool >= 2, "a pool of 1 sample per prompt has no pairs", "best_of_n.sizes", "e.g. [1, 2, 4, 8, 16, 32]")
    for key, value in (
        ("measure.samples_per_prompt", m.samples_per_prompt),
        ("measure.batch_size", m.batch_size),
        ("measure.kl_batch_size", m.kl_batch_size),
        ("gold.batch_size", cfg.gold.batch_size),
        ("gold.samples_per_prompt", cfg.gold.samples_per_prompt),
    ):
        _check(value >= 1, f"must be >= 1, got {value}", key)
    _check(
        m.samples_per_prompt <= pool,
        f"{m.samples_per_prompt} start samples per prompt but the pool holds {pool}",
        "measure.samples_per_prompt",
        "the start's samples are the first of the best-of-n pool: raise max(best_of_n.sizes) or lower this",
    )
    _check(m.draw in DRAWS, f"unknown draw {m.draw!r}", "measure.draw", " or ".join(DRAWS))
    _check(d.samples_per_prompt >= 2, "pairs need >= 2 samples per prompt", "proxy_data.samples_per_prompt")
    _check(0 < d.eval_fraction < 1, f"must be between 0 and 1, got {d.eval_fraction}", "proxy_data.eval_fraction")
    _check(d.label_temperature >= 0, f"must be >= 0, got {d.label_temperature}", "proxy_data.label_temperature")


def validate(cfg: OutcomeConfig) -> None:
    """Every check of the study's own keys and of each stage's, before the run folder is written and before
    anything loads: wire() first (an override it would reset is an error), then each stage's validate()."""
    check_study_keys(cfg)
    wire(cfg, str(Path(cfg.output_dir) / cfg.run_name))
    checks = [("gold_pairs", build_pairs.validate), ("gold_rm", train_rm.validate), ("proxy_rm", train_rm.validate)]
    checks += [("dpo", dpo_recipe.validate)] if "dpo" in cfg.runs else []
    special = [n for n in cfg.proxies if n in cfg.proxy_ensembles or n in cfg.proxy_length_heads]
    checks += [("proxy_rm", lambda _, n=n: train_rm.validate(proxy_stage(cfg, n))) for n in special]
    for name, check in checks:
        try:
            check(getattr(cfg, name))
        except RlcwError as exc:  # name the study's key: proxy_rm.train.batch_size, not train.batch_size
            message = str(exc).split("\n  hint:")[0].removeprefix(f"{exc.where}: ")
            raise RlcwError(message, where=f"{name}.{exc.where}" if exc.where else name, hint=exc.hint) from None


def config_drift(before: str, cfg) -> tuple[list[str], list[str]]:
    """(changed, added) dotted keys between a run folder's config YAML `before` and the config `cfg`: changed =
    a value that differs, a key `cfg` no longer has, or a key `before` lacks set away from its default; added =
    keys `before` lacks that hold their defaults (new in rlcw since the stage ran: the default is the code's
    stand-in for running without them, as for any other code change)."""
    from omegaconf import OmegaConf

    def flat(node, prefix=""):
        out = {}
        for key, value in node.items():
            path = f"{prefix}{key}"
            out.update(flat(value, path + ".") if isinstance(value, dict) and value else {path: value})
        return out

    old = flat(OmegaConf.to_container(OmegaConf.create(before)) or {})
    new = flat(OmegaConf.to_container(OmegaConf.structured(cfg)))
    default = flat(OmegaConf.to_container(OmegaConf.structured(type(cfg))))
    added = sorted(k for k in new if k not in old)
    changed = [k for k in old if k not in new or new[k] != old[k]]
    changed += [k for k in added if k not in default or default[k] != new[k]]  # set away from its default: a change
    return sorted(changed), [k for k in added if k not in changed]


class Stages:
    """Runs recipes in-process (reused when completed under the same config) and the study's own cached steps."""

    def __init__(self, resume: bool):
        self.resume, self.timings = resume, {}

    def run(self, name: str, fn, stage_cfg) -> dict:
        """Reuse a stage completed under the same config; continue one killed under the same config from its
        last complete checkpoint (its `train.resume` set to auto); start any other in a clean folder."""
        folder = Path(stage_cfg.output_dir) / stage_cfg.run_name
        summary, config = folder / "summary.json", folder / "config.yaml"
        resumed = _continued(stage_cfg)
        if self.resume and summary.is_file() and config.is_file():
            done = json.loads(summary.read_text())
            before = config.read_text().split("\n", 2)[-1]
            same = before in (to_yaml(stage_cfg), to_yaml(resumed) if resumed is not None else None)
            if not same:  # keys rlcw added since the stage ran (at their defaults) do not make it another run
                changed, added = config_drift(before, stage_cfg)
                same = not changed or (resumed is not None and not config_drift(before, resumed)[0])
                if same:
                    added = ", ".join(added)
                    print(
                        f"[outcome] {name}: its config lacks keys added since ({added}); taken as the same", flush=True
                    )
            if done.get("status") == "completed" and same:
                print(f"[outcome] {name}: completed before, reused", flush=True)
                self._add(name, float(done.get("wall_time_s") or 0.0))
                return done
            if same and resumed is not None and last_checkpoint(folder / "checkpoints") is not None:
                print(
                    f"[outcome] {name}: unfinished under the same config; continuing from its last checkpoint",
                    flush=True,
                )
                return self._timed(name, lambda: fn(resumed))
        if folder.exists() and resume_mode(getattr(getattr(stage_cfg, "train", None), "resume", False)) == "false":
            # a stage run again under a new config starts clean: old checkpoints or metrics must not mix in
            aside = move_aside(folder)
            print(f"[outcome] {name}: config changed or run unfinished; old folder kept as {aside.name}", flush=True)
        return self._timed(name, lambda: fn(stage_cfg))

    def cached(self, name: str, folder: Path, key: dict, make) -> None:
        """`make(folder)` writes the step's files; `folder/done.json` (written last) holds the settings key, so
        a killed step, or one whose settings changed, runs again."""
        done = folder / "done.json"
        key = json.loads(json.dumps(key))  # what the file will hold (tuples -> lists)
        if self.resume and done.is_file():
            old = json.loads(done.read_text())
            if old.get("key") == key:
                print(f"[outcome] {name} ({folder.name}): done before with the same settings, reused", flush=True)
                self._add(name, float(old.get("wall_time_s", 0.0)))
                return
        folder.mkdir(parents=True, exist_ok=True)
        took = time.time()
        self._timed(name, lambda: make(folder))
        atomic_write_json(done, {"key": key, "wall_time_s": round(time.time() - took, 2)})

    def _add(self, name: str, seconds: float) -> None:
        """One name can time several steps (measure_<run>: one per checkpoint): their times add up."""
        self.timings[name] = self.timings.get(name, 0.0) + seconds

    def _timed(self, name: str, fn):
        start = time.time()
        print(f"[outcome] {name} ...", flush=True)
        out = fn()
        self._add(name, time.time() - start)
        print(f"[outcome] {name} done in {time.time() - start:.0f}s", flush=True)
        return out


def _continued(stage_cfg):
    """A copy of a training stage's config with `train.resume=auto` (None for a stage without train.resume, or
    one whose resume is already set by the user)."""
    train = getattr(stage_cfg, "train", None)
    if train is None or not hasattr(train, "resume") or resume_mode(train.resume) != "false":
        return None
    out = copy.deepcopy(stage_cfg)
    out.train.resume = "auto"
    return out


def _trained_at(run_dir: Path) -> float | None:
    summary = run_dir / "summary.json"
    return json.loads(summary.read_text()).get("started_at") if summary.is_file() else None


class Study:
    """The models and scorers the study's own steps share, loaded once on first use."""

    def __init__(self, cfg: OutcomeConfig, root: Path):
        self.cfg, self.root, self._start, self._tok, self.scorers = cfg, root, None, None, {}

    @property
    def start(self):
        if self._start is None:
            from rlcw.models import load_causal_lm

            self._start = load_causal_lm(self.cfg.model.name, self.cfg.model.dtype)
        return self._start

    @property
    def tokenizer(self):
        if self._tok is None:
            from rlcw.models import load_tokenizer

            self._tok = load_tokenizer(self.cfg.model.name, padding_side="left")
        return self._tok

    def gold_path(self) -> str:
        return self.cfg.gold.rm_path or str(self.root / "gold_rm" / "model")

    def golds(self) -> list[str]:
        """The scorers that measure: gold, and gold2 when the second gold is on."""
        return ["gold", "gold2"] if self.cfg.gold2.enabled else ["gold"]

    def scorer(self, name: str):
        """The scorer called `name`: gold, gold2, or proxy_<name> (raw: a length-control fit shapes only grpo_lc's
        reward)."""
        if name not in self.scorers:
            if name == "gold":
                self.scorers[name] = load_gold_scorer(self.gold_path())
            elif name == "gold2":
                self.scorers[name] = load_gold_scorer(str(self.root / "gold2_rm" / "model"))
            else:
                from rlcw.rm.scoring import load_rm as BTScorer

                self.scorers[name] = BTScorer(self.root / f"proxy_rm_{name[6:]}" / "model", length_control=False)
        return self.scorers[name]

    def sample(
        self, model, rows: list[dict], n: int, max_new_tokens: int, batch_size: int | None = None, logps: bool = False
    ) -> list[dict]:
        return sample_stories(
            model,
            self.tokenizer,
            rows,
            n_samples=n,
            max_new_tokens=max_new_tokens,
            seed=self.cfg.measure.seed,
            system_prompt=self.cfg.model.system_prompt,
            batch_size=batch_size or self.cfg.measure.batch_size,
            keep_logps=logps,
            draw=self.cfg.measure.draw,
        )

    def identity(self) -> dict:
        """What every score depends on: the gold and each proxy's training run."""
        gold = self.cfg.gold.rm_path or _trained_at(self.root / "gold_rm")
        golds = {"gold2": _trained_at(self.root / "gold2_rm")} if self.cfg.gold2.enabled else {}
        return {"gold": gold, **golds, **{p: _trained_at(self.root / f"proxy_rm_{p}") for p in self.cfg.proxies}}


def study_rows(cfg: OutcomeConfig) -> list[dict]:
    rows = load_prompts(cfg.data.prompts, cfg.data.study_split)[: cfg.data.max_study_prompts or None]
    _check(len(rows) >= 2, f"{len(rows)} held-out prompts: the split-half test needs >= 2", "data.study_split")
    return rows


def gold_steps(cfg: OutcomeConfig, st: Stages, study: Study) -> list[dict]:
    """Train the default gold (or take gold.rm_path), and the second gold when `gold2.enabled`; each one's row of
    the RM table with its held-out accuracy on human-vs-model pairs."""
    if cfg.gold.rm_path:
        return [{"rm": "gold", "role": "gold (measures only)", "note": f"given: `{cfg.gold.rm_path}`"}]
    from rlcw.data.tmas import load_tmas, prompt_rows

    g, root = cfg.gold, study.root
    rows = prompt_rows(load_tmas(cfg.data.tmas, cfg.data.tmas_splits))[: g.max_prompts or None]
    key = {"model": asdict(cfg.model), "gold": asdict(g), "prompts": [r["id"] for r in rows], "seed": cfg.measure.seed}
    key.update(draw_key(cfg))

    def write(folder: Path) -> None:
        recs = study.sample(study.start, rows, g.samples_per_prompt, g.max_new_tokens, batch_size=g.batch_size)
        write_stories(folder / "stories.jsonl", [_story(r) for r in recs])

    st.cached("gold_samples", root / "gold_samples", key, write)
    if cfg.gold2.enabled:
        st.cached("gold_samples", root / "gold_samples" / "halves", {"samples": key, "seed": cfg.seed}, split_halves)
    rows = [trained_gold(cfg, st, study, "gold")]
    if cfg.gold2.enabled:
        rows.append(trained_gold(cfg, st, study, "gold2"))
    return rows


def split_halves(folder: Path) -> None:
    """gold_samples/halves/half_a.jsonl and half_b.jsonl: the start's TMAS stories of each half of the prompts (a seeded
    hash of the prompt ids, `split_prompts`); the first gold trains on half a, the second on half b."""
    from rlcw.metrics.overopt import split_prompts

    stories = read_jsonl(folder.parent / "stories.jsonl")

    def prompt_id(r: dict) -> str:  # ids are <prompt id>#<sample index>
        return r["id"].rsplit("#", 1)[0]

    first = set(split_prompts([prompt_id(r) for r in stories], seed=0)[0])
    write_stories(folder / "half_a.jsonl", [r for r in stories if prompt_id(r) in first])
    write_stories(folder / "half_b.jsonl", [r for r in stories if prompt_id(r) not in first])


def trained_gold(cfg: OutcomeConfig, st: Stages, study: Study, gold: str) -> dict:
    """Build `gold`'s human-vs-model pairs, train it (`<gold>_pairs/`, `<gold>_rm/`), and measure its held-out
    accuracy on its own held-out prompts' pairs."""
    pairs = st.run(f"{gold}_pairs", build_pairs.main, getattr(cfg, f"{gold}_pairs"))
    st.run(f"{gold}_rm", train_rm.main, getattr(cfg, f"{gold}_rm"))
    held_file = study.root / f"{gold}_pairs" / "pairs" / "eval.jsonl"
    _check(
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


def _story(rec: dict) -> dict:
    """A sampled record as a plain story record (the token ids stay in the study's own files)."""
    return {k: v for k, v in rec.items() if k not in ("prompt_ids", "completion_ids")}


def _scored(records: list[dict], study: Study, names: list[str]) -> list[dict]:
    return add_scores(records, {n: study.scorer(n) for n in names})


def proxy_steps(cfg: OutcomeConfig, st: Stages, study: Study, study_prompts: list[dict]) -> list[dict]:
    """Gold-labelled on-policy pairs -> one proxy per size -> their agreement with the gold on held-out pairs."""
    root, d = study.root, cfg.proxy_data
    rl_rows = load_prompts(cfg.data.prompts, cfg.data.rl_split)[: d.max_prompts or None]
    _check(len(rl_rows) >= 2, f"{len(rl_rows)} RL prompts: proxy pairs need >= 2", "data.rl_split")
    shared = sorted({r["prompt"] for r in rl_rows} & {r["prompt"] for r in study_prompts})
    _check(not shared, f"{len(shared)} held-out prompts are also RL prompts, e.g. {shared[:1]}", "data.study_split")
    key = {"model": asdict(cfg.model), "data": asdict(d), "prompts": [r["id"] for r in rl_rows], **draw_key(cfg)}
    key.update(gold=study.identity()["gold"], seed=cfg.seed)

    def write_pairs(folder: Path) -> None:
        recs = _scored(study.sample(study.start, rl_rows, d.samples_per_prompt, d.max_new_tokens), study, ["gold"])
        atomic_write_jsonl(folder / "samples.jsonl", recs)
        pairs, info = labelled_pairs(
            recs,
            "gold",
            k=d.samples_per_prompt,
            per_prompt=d.pairs_per_prompt,
            temperature=d.label_temperature,
            seed=cfg.seed,
        )
        train, held = split_by_prompt(pairs, d.eval_fraction, cfg.seed)
        _check(
            bool(train) and bool(held), "proxy pairs need both a train and an eval side", "proxy_data.eval_fraction"
        )
        write_preferences(folder / "pairs" / "train.jsonl", train)
        write_preferences(folder / "pairs" / "eval.jsonl", held)
        atomic_write_json(folder / "labels.json", {**asdict(info), "train_pairs": len(train), "eval_pairs": len(held)})

    st.cached("proxy_data", root / "proxy_data", key, write_pairs)
    labels = json.loads((root / "proxy_data" / "labels.json").read_text())
    done = {name: st.run(f"proxy_rm_{name}", train_rm.main, proxy_stage(cfg, name)) for name in cfg.proxies}
    rows = []
    for name, n in cfg.proxies.items():
        m = done[name]["metrics"]
        acc, n_eval = m.get("eval/accuracy", float("nan")), m.get("eval/pairs", 0)
        note = f"accuracy on its eval pairs (sampled gold labels, held-out RL prompts): {acc:.3f} ({n_eval:.0f} pairs)"
        if n > labels["train_pairs"]:
            note += f"; asked for {n} pairs, {labels['train_pairs']} exist"
        role = "proxy" + (" (RL, DPO)" if name == cfg.rl_proxy else "") + ", best-of-n"
        if name in cfg.proxy_ensembles:
            role = f"ensemble of {cfg.proxy_ensembles[name]} ({cfg.proxy_rm.rm.ensemble.aggregate}): " + role
            role += " (grpo_ens)" if name == cfg.ens_proxy and "grpo_ens" in cfg.runs else ""
        if name in cfg.proxy_length_heads:
            role = "two-head (ODIN), quality head: " + role
            role += " (grpo_odin)" if name == cfg.odin_proxy and "grpo_odin" in cfg.runs else ""
        rows.append(
            {
                "rm": f"proxy_{name}",
                "role": role,
                "train_pairs": min(n, labels["train_pairs"]),
                "label_noise": labels["label_noise"],
                "note": note,
            }
        )
    return rows


def draw_key(cfg: OutcomeConfig) -> dict:
    """The sampler's draw in a cached step's key when it is not the multinomial default (keys written before
    `measure.draw` existed stay valid)."""
    return {} if cfg.measure.draw == "multinomial" else {"draw": cfg.measure.draw}


def sampling_key(cfg: OutcomeConfig, rows: list[dict]) -> dict:
    """What held-out samples depend on (not the statistics' settings: changing those re-samples nothing)."""
    m = cfg.measure
    return {
        "model": asdict(cfg.model),
        "max_new_tokens": m.max_new_tokens,
        "seed": m.seed,
        "batch_size": m.batch_size,
        "prompts": [r["id"] for r in rows],
        **draw_key(cfg),
    }


def pool_step(cfg: OutcomeConfig, st: Stages, study: Study, rows: list[dict]) -> list[dict]:
    """max(best_of_n.sizes) start samples per held-out prompt (`pool/`), then each scorer's scores of them
    (`pool_scores/<gold|proxy_name>/`, one cached step per scorer: a new or retrained proxy scores the pool
    alone, without re-sampling it or re-scoring the others; `pool_scores/samples.jsonl` holds them all)."""
    n, root = max(cfg.best_of_n.sizes), study.root
    key = {**sampling_key(cfg, rows), "n": n}
    ids = study.identity()

    def sample(folder: Path) -> None:
        atomic_write_jsonl(folder / "samples.jsonl", study.sample(study.start, rows, n, cfg.measure.max_new_tokens))

    st.cached("pool", root / "pool", key, sample)
    pool = read_jsonl(root / "pool" / "samples.jsonl")
    for name in [*study.golds(), *[f"proxy_{p}" for p in cfg.proxies]]:

        def score(folder: Path, name=name) -> None:
            scorer = study.scorer(name)
            values = scorer.score([r["prompt"] for r in pool], [r["story"] for r in pool])
            if getattr(scorer, "last_members", None):  # an ensemble: keep every member's scores (other aggregates)
                atomic_write_json(folder / "members.json", scorer.last_members)
            atomic_write_json(folder / "scores.json", [float(v) for v in values])

        folder = root / "pool_scores" / name
        st.cached("pool_scores", folder, {"pool": key, "scorer": ids[name.removeprefix("proxy_")]}, score)
        scores = json.loads((folder / "scores.json").read_text())
        _check(len(scores) == len(pool), f"{len(scores)} scores for {len(pool)} pool samples", str(folder))
        for r, v in zip(pool, scores, strict=True):
            r.setdefault("scores", {})[name] = float(v)
    add_scores(pool, {})  # words and rep
    atomic_write_jsonl(root / "pool_scores" / "samples.jsonl", pool)  # the pool with every scorer's scores
    for r in pool:
        r["scores"]["length"] = float(r["words"])  # the length-only baseline of the agreement table
        r.update(kl_k3=0.0, kl_k1=0.0)  # the start itself
    return pool


def dpo_pairs_step(cfg: OutcomeConfig, st: Stages, study: Study) -> None:
    """DPO's offline data: the start's samples for the RL prompts, each pair ordered by the RL proxy."""
    d, proxy = cfg.proxy_data, f"proxy_{cfg.rl_proxy}"
    key = {
        "samples": json.loads((study.root / "proxy_data" / "done.json").read_text())["key"],
        proxy: study.identity()[cfg.rl_proxy],
    }

    def write(folder: Path) -> None:
        recs = _scored(read_jsonl(study.root / "proxy_data" / "samples.jsonl"), study, [proxy])
        pairs, _ = labelled_pairs(
            recs, proxy, k=d.samples_per_prompt, per_prompt=d.pairs_per_prompt, temperature=0.0, seed=cfg.seed
        )
        train, held = split_by_prompt(pairs, d.eval_fraction, cfg.seed)
        write_preferences(folder / "pairs" / "train.jsonl", train)
        write_preferences(folder / "pairs" / "eval.jsonl", held)

    st.cached("dpo_pairs", study.root / "dpo_pairs", key, write)


def length_fit_step(cfg: OutcomeConfig, st: Stages, root: str) -> None:
    """grpo_lc's length-controlled reward reads a length fit from the RL proxy's folder (eval-rm installs it)."""
    e = eval_rm.EvalRMConfig(output_dir=root, run_name="length_fit", seed=cfg.seed)
    e.scorer.kind, e.scorer.path = "bt", f"{root}/proxy_rm_{cfg.rl_proxy}/model"
    e.data.file = f"{root}/proxy_data/pairs/eval.jsonl"
    e.length_control.fit_on, e.length_control.install = f"{root}/proxy_data/pairs/train.jsonl", True
    st.run("length_fit", eval_rm.main, e)


def measure_run(
    cfg: OutcomeConfig, st: Stages, study: Study, name: str, rows: list[dict]
) -> list[tuple[int, list[dict]]]:
    """Every checkpoint of one trained run measured on the held-out prompts (cached per checkpoint)."""
    from rlcw.models import load_causal_lm

    proxy = run_proxy(cfg, name)
    m, names = cfg.measure, [*study.golds(), f"proxy_{proxy}"]  # what the analysis reads for an RL run
    run_dir = study.root / name
    out = []
    for step, path in checkpoints_of(run_dir):
        folder = study.root / "measure" / name / f"step_{step:06d}"
        key = {**sampling_key(cfg, rows), "samples": m.samples_per_prompt, "kl_batch_size": m.kl_batch_size}
        ids = study.identity()
        key.update(trained_at=_trained_at(run_dir), scorers={**{g: ids[g] for g in study.golds()}, proxy: ids[proxy]})

        def write(folder: Path, path=path) -> None:
            policy = load_causal_lm(str(path), cfg.model.dtype, merge_lora=True)
            recs = study.sample(policy, rows, m.samples_per_prompt, m.max_new_tokens, logps=True)
            del policy  # the sampler's log-probs are the policy side of the KL
            tok = study.tokenizer
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            add_kl(recs, study.start, pad_id=pad, batch_size=m.kl_batch_size)
            for r in recs:
                r.pop("completion_logps")
            atomic_write_jsonl(folder / "samples.jsonl", _scored(recs, study, names))

        st.cached(f"measure_{name}", folder, key, write)
        out.append((step, read_jsonl(folder / "samples.jsonl")))
    return out


def parse_aggregate(label: str) -> tuple[str, float]:
    """'mean' | 'wco' | 'uwo:<lambda>' -> (aggregate, lambda); anything else is an error naming the key."""
    from rlcw.rm.aggregate import AGGREGATES

    how, _, lam = str(label).partition(":")
    try:
        value = float(lam) if lam else 0.0
    except ValueError:
        value = -1.0
    ok = how in AGGREGATES and value >= 0 and (how == "uwo" or not lam)
    _check(ok, f"bad aggregate {label!r}", "ensemble_bon_aggregates", "mean, wco or uwo:<lambda >= 0>, e.g. uwo:1")
    return how, value


def ensemble_bon(
    cfg: OutcomeConfig, study: Study, pool: list[dict]
) -> tuple[analysis.Curve, analysis.AggregateChoice]:
    """Best-of-n of the ensemble proxy under every aggregate in `ensemble_bon_aggregates`, re-aggregated from the
    members' pool scores (no new scoring); the aggregate chosen by gold on the selection half, and its curve."""
    from rlcw.rm.aggregate import aggregate

    ens = monitor_proxy(cfg)
    members = pool_members(study, ens)
    curves = {}
    for label in cfg.ensemble_bon_aggregates:
        how, lam = parse_aggregate(label)
        name = f"proxy_{ens}@{label}"
        for r, v in zip(pool, aggregate(members, how, lam), strict=True):
            r["scores"][name] = float(v)
        curves[label] = analysis.bon_curve(f"best_of_n_{ens}@{label}", name, pool, cfg.best_of_n.sizes)
    choice = analysis.choose_aggregate(curves, cfg.measure.n_resamples, cfg.seed)
    return curves[choice.chosen], choice


def pool_members(study: Study, ens: str) -> list[list[float]]:
    """The ensemble proxy `ens`'s member scores of the pool, in pool order (written by the pool-scores step)."""
    return json.loads((study.root / "pool_scores" / f"proxy_{ens}" / "members.json").read_text())


def monitor_proxy(cfg: OutcomeConfig) -> str | None:
    """The ensemble proxy whose disagreement is measured on every checkpoint (`ens_proxy`, else the first)."""
    if not cfg.proxy_ensembles:
        return None
    return cfg.ens_proxy if cfg.ens_proxy in cfg.proxy_ensembles else next(iter(cfg.proxy_ensembles))


def _disagreement(members: list[list[float]]) -> float:
    from rlcw.rm.aggregate import member_summary

    return float(member_summary(members)["disagreement"])


def start_disagreement(cfg: OutcomeConfig, study: Study, pool: list[dict]) -> float | None:
    """The ensemble proxy's disagreement on the start's stories (the pool's first samples; its member scores are
    in pool order), or None without an ensemble proxy."""
    ens = monitor_proxy(cfg)
    if ens is None:
        return None
    members = pool_members(study, ens)
    start = [j for j, r in enumerate(pool) if r["sample_index"] < cfg.measure.samples_per_prompt]
    return _disagreement([[m[j] for j in start] for m in members])


def measured_disagreement(
    cfg: OutcomeConfig, st: Stages, study: Study, name: str, measured: list[tuple[int, list[dict]]], start: float
) -> list[tuple[int, float]]:
    """[(step, mean std across the ensemble proxy's members)] on each checkpoint's held-out samples after the
    start's (step 0, `start_disagreement`): how far from agreement a run drove the ensemble, whichever proxy it
    optimised. Each checkpoint's member scores are their own cached step (`ensemble_<proxy>/`)."""
    ens = monitor_proxy(cfg)
    out = [(0, start)]
    ident = study.identity()[ens]
    for step, recs in measured:
        folder = study.root / "measure" / name / f"step_{step:06d}" / f"ensemble_{ens}"
        done = json.loads((folder.parent / "done.json").read_text())["key"]

        def write(folder: Path, recs=recs) -> None:
            scorer = study.scorer(f"proxy_{ens}")
            scorer.score([r["prompt"] for r in recs], [r["story"] for r in recs])
            atomic_write_json(folder / "members.json", scorer.last_members)

        st.cached(f"measure_{name}", folder, {"samples": done, "scorer": ident}, write)
        out.append((step, _disagreement(json.loads((folder / "members.json").read_text()))))
    return out


def monitor_reads(
    cfg: OutcomeConfig, st: Stages, study: Study, summaries: list, measured: dict[str, list], pool: list[dict]
) -> list[MonitorRead]:
    """The lead-time table's rows: every RL run's logged monitor statistics and the measured ensemble
    disagreement, read against its gold peak (`rlcw.outcome.monitors`)."""
    rows, start = [], start_disagreement(cfg, study, pool)
    for s in summaries:
        name = s.curve.run
        if name not in measured:
            continue
        series = read_series(study.root / name / "metrics.jsonl")
        if start is not None:
            series[MEASURED] = measured_disagreement(cfg, st, study, name, measured[name], start)
        rows += lead_rows(s, series, cfg.monitor_rules)
    return rows


def arms_reading(
    cfg: OutcomeConfig,
    study: Study,
    start: list[dict],
    slope: list[dict],
    measured: dict[str, list],
    curves: list[analysis.Curve],
) -> tuple[list[str], dict[str, float]]:
    """The report's arms section (`rlcw.outcome.arms`): every trained run with seeds read over its seeds at
    `measure.matched_d` and at its peaks, by every gold: each checkpoint's measured records at its curve point's d;
    ([], {}) when no run has seeds."""
    from rlcw.outcome.arms import arms_section
    from rlcw.outcome.seeds import Baseline, Cells, SeedReading, arm_seed, cell_sums

    if not any(cfg.seeds.values()):
        return [], {}
    m, prompts = cfg.measure, sorted({r["prompt_id"] for r in start})
    cells = Cells.from_words([float(r["words"]) for r in slope], bins=m.residual_bins)
    readings = {}
    for gold in study.golds():
        base = Baseline.of(*cell_sums(slope, gold, prompts, cells), min_count=m.residual_min_count)
        runs: dict[str, list] = {}
        for c in curves:
            arm, seed = arm_of(cfg, c.run)
            if cfg.seeds.get(arm):  # the curve's points after the start are the measured checkpoints, in order
                ckpts = [(p.d, recs) for p, (_, recs) in zip(c.points[1:], measured[c.run], strict=True)]
                runs.setdefault(arm, []).append(arm_seed(arm, seed, start, ckpts, gold, prompts, cells, base))
        readings[gold] = SeedReading(runs, base, prompts, n_resamples=m.n_resamples, seed=cfg.seed)
    base_arm = "grpo" if cfg.seeds.get("grpo") else None
    note = f"Cells: {len(cells.edges) - 1} word bins (edges {', '.join(f'{e:g}' for e in cells.edges)}) x ended."
    return arms_section(readings, list(m.matched_d), base_arm, notes=[note, ""])


def add_slop(pool: list[dict], start: list[dict], measured: dict[str, list]) -> list[str]:
    """Every pool and measured story's slop score (`slop`) against ONE fingerprint: the phrases the start's
    stories and every checkpoint's, pooled, over-use against the bundled human stories (`rlcw.metrics.slop`)."""
    from rlcw.metrics.slop import SlopBaseline
    from rlcw.rewards.slop import load_human_texts

    checkpoints = [r for points in measured.values() for _, recs in points for r in recs]
    base = SlopBaseline(load_human_texts("bundled"))
    sources = [*start, *checkpoints]
    phrases = [p.text for p in base.fingerprint([r["story"] for r in sources], [r["prompt_id"] for r in sources])]
    scored = [*pool, *checkpoints]
    for r, v in zip(scored, base.scores([r["story"] for r in scored], phrases=phrases), strict=True):
        r["slop"] = v
    return phrases


def agreement_rows(cfg: OutcomeConfig, pool: list[dict], rm_rows: list[dict]) -> list[dict]:
    """Each proxy's agreement with the gold on pairs of the pool (start samples, held-out prompts), and the
    length-only baseline's ("the longer story wins") on the same pairs."""
    k, per = max(cfg.best_of_n.sizes), cfg.measure.agreement_pairs_per_prompt
    per = None if per is None or per >= k * (k - 1) // 2 else per

    def agree(scorer: str):
        return agreement_with(
            pool, scorer, "gold", k=k, per_prompt=per, seed=cfg.seed, n_resamples=cfg.measure.n_resamples
        )

    baseline = {"rm": "longer story wins", "role": "length-only baseline", "note": "", "agreement": agree("length")}
    return [rm_rows[0], *[{**r, "agreement": agree(r["rm"])} for r in rm_rows[1:]], baseline]


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


def study_setup(cfg: OutcomeConfig, rows: list[dict]) -> StudySetup:
    """What the report states about the gold, the prompts and the sampling."""
    given = cfg.gold.rm_path
    return StudySetup(
        policy=cfg.model.name,
        gold=f"the RM `{given}` (given by gold.rm_path)" if given else "a BT reward model trained here (`gold_rm/`)",
        gold_rewards="What it rewards is what its own training data rewarded; this study does not check it."
        if given
        else GOLD_REWARDS,
        prompts=len(rows),
        samples_per_prompt=cfg.measure.samples_per_prompt,
        pool=max(cfg.best_of_n.sizes),
        max_new_tokens=cfg.measure.max_new_tokens,
        rl_proxy=f"proxy_{cfg.rl_proxy}",
    )


def main(cfg: OutcomeConfig) -> dict:
    validate(cfg)
    with stage_run(cfg, "outcome") as run:
        root = str(run.path)
        wire(cfg, root)
        st, study = Stages(cfg.resume), Study(cfg, run.path)
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
        k = cfg.measure.samples_per_prompt
        start = [r for r in pool if r["sample_index"] < k]
        rest = [r for r in pool if r["sample_index"] >= k]  # the gold's length/ending slopes: not the start's stories
        measured = {name: measure_run(cfg, st, study, name, rows) for name in trained_runs(cfg)}
        setup = study_setup(cfg, rows)
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
        arms, arm_flat = arms_reading(cfg, study, start, rest or start, measured, rl)
        st.timings["analysis"] = time.time() - t0
        report, flat, plots = write_outcome_report(
            run.path, summaries, rm_rows, setup, st.timings, monitors=reads, aggregate_choice=choice, arms=arms
        )
        metrics = {**flat, **arm_flat, "wall_time_s": round(sum(st.timings.values()), 1)}
        metrics.update({f"time/{k}_s": round(v, 1) for k, v in st.timings.items()})
        metrics.update({f"agreement/{r['rm']}": r["agreement"].accuracy for r in rm_rows if r.get("agreement")})
        return run.write_summary("completed", metrics, {"report": report, **plots})
