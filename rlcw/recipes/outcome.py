"""Outcome study: does RL with a learned reward make better stories, or only a higher reward?

The over-optimisation setup of Gao et al. (2022) at small scale, run with rlcw's own commands:
- proxy RM (the RL reward): `build-pairs` corruption pairs -> `train-rm`;
- gold RM (evaluation only): `generate` the policy's own stories for TELL ME A STORY prompts
  (`data.tmas`, a user-given path) -> `build-pairs data.kind=human_vs_model` (the human story
  against the model's, cut to the same length) -> `train-rm`;
- both RMs' held-out accuracy on both pair sets and their agreement (`eval-rm`), and the proxy's
  length-control fit (`eval-rm length_control.fit_on`) used by the length-controlled run;
- runs against the proxy (`runs`): `grpo` (RM only), `grpo_lc` (length-controlled RM + prompt
  range + overlong penalties), `ppo` (the same reward as `grpo`), `dpo` (offline, on the proxy's
  pairs), `best_of_n` (the start model, n samples reranked by the proxy);
- every checkpoint (and the start model) sampled on held-out prompts and measured: proxy, gold,
  words against the prompt's range, repetition, diversity, KL to the start (rlcw.outcome.measure);
- judged win rate against the start model (Agents' Room side by side, both orders, invalid
  verdicts counted and excluded, bootstrap CI) at the first and last checkpoint of every run
  (`judge.every_checkpoint=true` for all of them, when a stronger judge server is configured);
- `report.md` with the curves, the table of final numbers and a conclusion drawn from them.

Stages already completed with the same config are reused (`resume=true`), so a killed study
continues where it stopped. Every stage is the real recipe with its own run folder.

    bash scripts/outcome_study.sh                                   # set-up + the CPU study (~60-90 min)
    rlcw outcome --config configs/outcome/cpu.yaml
    rlcw outcome --config configs/outcome/cpu.yaml runs=[grpo,best_of_n] grpo.train.max_steps=20
    # GPU cluster: a bigger policy, LitBench pairs for both RMs, a hosted judge, more steps
    rlcw outcome --config configs/outcome/cpu.yaml model.name=Qwen/Qwen2.5-1.5B-Instruct \\
        judge.client.kind=openai judge.client.base_url=http://judge:8000/v1 judge.every_checkpoint=true ...
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcw.config import assign, to_yaml
from rlcw.data.prompts import load_prompts
from rlcw.data.records import read_stories, write_stories
from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json, atomic_write_jsonl, read_table
from rlcw.outcome.judging import judge_against_start
from rlcw.outcome.measure import Measurer, MeasureSettings, checkpoints_of, paired_agreement, rm_agreement
from rlcw.outcome.report import StudySetup, write_outcome_report
from rlcw.recipes import build_pairs, eval_rm, prepare_model, train_rm
from rlcw.recipes import dpo as dpo_recipe
from rlcw.recipes import generate as generate_recipe
from rlcw.recipes import grpo as grpo_recipe
from rlcw.recipes import ppo as ppo_recipe
from rlcw.recipes.common import ModelConfig, stage_run
from rlcw.rewards.best_of_n import kl_best_of
from rlcw.rewards.length import range_fits_cap
from rlcw.runs import move_aside, resume_mode

RUNS = ("grpo", "grpo_lc", "ppo", "dpo", "best_of_n")


@dataclass
class StudyData:
    # TELL ME A STORY (folder, jsonl or hub id): human side of the gold pairs
    tmas: str = "../shared/data/tell-me-a-story"
    tmas_split: str = "train"
    gold_prompts: int | None = None  # TMAS prompts the model writes for (None = all of the split)
    prompts: str = "bundled"  # RL and held-out prompts (train / eval splits)
    eval_split: str = "eval"
    max_eval_prompts: int | None = None
    samples_per_prompt: int = 2  # held-out samples per prompt at each checkpoint


@dataclass
class JudgeSection:
    enabled: bool = True
    # false: first and last checkpoint of each run (CPU); true: all (a strong judge server)
    every_checkpoint: bool = False
    protocol: str = "agents_room"
    # verdict lines only (cheap for a local judge); agents_room = the full assessment
    template: str | None = "agents_room_brief"
    max_items: int | None = 6  # judged prompts per checkpoint (both orders each)
    client: dict[str, Any] = field(
        default_factory=lambda: {"kind": "local", "model": "smollm2-135m-instruct", "max_tokens": 40, "concurrency": 8}
    )


@dataclass
class OutcomeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: StudyData = field(default_factory=StudyData)
    runs: list[str] = field(default_factory=lambda: list(RUNS))
    proxy_pairs: build_pairs.BuildPairsConfig = field(default_factory=build_pairs.BuildPairsConfig)
    proxy_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)
    gold_generate: generate_recipe.GenerateConfig = field(default_factory=generate_recipe.GenerateConfig)
    gold_pairs: build_pairs.BuildPairsConfig = field(default_factory=build_pairs.BuildPairsConfig)
    gold_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)
    grpo: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    grpo_lc: grpo_recipe.GRPORecipeConfig = field(default_factory=grpo_recipe.GRPORecipeConfig)
    ppo: ppo_recipe.PPORecipeConfig = field(default_factory=ppo_recipe.PPORecipeConfig)
    dpo: dpo_recipe.DPORecipeConfig = field(default_factory=dpo_recipe.DPORecipeConfig)
    best_of_n: generate_recipe.GenerateConfig = field(default_factory=generate_recipe.GenerateConfig)
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    judge: JudgeSection = field(default_factory=JudgeSection)
    resume: bool = True  # reuse stages already completed with the same config
    output_dir: str = "runs"
    run_name: str = "outcome"
    seed: int = 0
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>


def wire(cfg: OutcomeConfig, root: str) -> None:
    """Point every stage at the shared model, seed and this study's folder, and chain their files.

    Every key set here is derived: setting one yourself (YAML or command line) to another value is an
    error naming it (`rlcw.config.assign`), never a silent reset."""

    def put(key: str, value) -> None:
        assign(cfg, key, value)

    for name in STAGE_NAMES:
        put(f"{name}.output_dir", root), put(f"{name}.run_name", name), put(f"{name}.seed", cfg.seed)
    base = ModelConfig(**vars(cfg.model))
    proxy = f"{root}/proxy_rm/model"
    proxy_files = (f"{root}/proxy_pairs/pairs/train.jsonl", f"{root}/proxy_pairs/pairs/eval.jsonl")
    put("proxy_rm.model", ModelConfig(name=cfg.model.name, dtype=cfg.model.dtype))
    put("proxy_rm.data.train_file", proxy_files[0]), put("proxy_rm.data.eval_file", proxy_files[1])
    put("gold_generate.model", base)
    put("gold_generate.data.format", "tmas"), put("gold_generate.data.source", cfg.data.tmas)
    put("gold_generate.data.split", cfg.data.tmas_split), put("gold_generate.data.max_prompts", cfg.data.gold_prompts)
    put("gold_pairs.data.kind", "human_vs_model")
    put("gold_pairs.data.stories", f"{root}/gold_generate/samples/stories.jsonl")
    put("gold_rm.model", ModelConfig(name=cfg.model.name, dtype=cfg.model.dtype))
    put("gold_rm.data.train_file", f"{root}/gold_pairs/pairs/train.jsonl")
    put("gold_rm.data.eval_file", f"{root}/gold_pairs/pairs/eval.jsonl")
    rm_files = [f"{root}/{p}/pairs/{s}.jsonl" for p in ("proxy_pairs", "gold_pairs") for s in ("train", "eval")]
    for rl in ("grpo", "grpo_lc", "ppo"):
        put(f"{rl}.model", base), put(f"{rl}.reward.rm_path", proxy), put(f"{rl}.data.prompts", cfg.data.prompts)
        put(f"{rl}.eval.every_steps", 0)  # the study measures every checkpoint itself
    for rl in ("grpo", "grpo_lc"):
        put(f"{rl}.data.no_overlap_with", rm_files)
    put("dpo.model", base), put("dpo.eval.every_steps", 0)
    put("dpo.data.train_file", proxy_files[0]), put("dpo.data.eval_file", proxy_files[1])
    put("best_of_n.model", base), put("best_of_n.best_of.rm_path", proxy)
    # the measurement's prompts and sampling, so best-of-1 is a plain sample of the start model
    put("best_of_n.data.format", "prompts"), put("best_of_n.data.prompts", f"{root}/eval_prompts.jsonl")
    put("best_of_n.data.split", None), put("best_of_n.data.max_prompts", None)
    m = cfg.measure
    put("best_of_n.sampling.max_new_tokens", m.max_new_tokens)
    put("best_of_n.sampling.temperature", m.temperature), put("best_of_n.sampling.top_p", m.top_p)


STAGE_NAMES = (
    "proxy_pairs",
    "proxy_rm",
    "gold_generate",
    "gold_pairs",
    "gold_rm",
    "grpo",
    "grpo_lc",
    "ppo",
    "dpo",
    "best_of_n",
)


def study_setup(cfg: OutcomeConfig) -> StudySetup:
    """What the report states about this study's setup."""
    return StudySetup(
        policy=cfg.model.name,
        samples_per_prompt=cfg.data.samples_per_prompt,
        temperature=cfg.measure.temperature,
        max_new_tokens=cfg.measure.max_new_tokens,
        judge_model=cfg.judge.client.get("model", "?") if cfg.judge.enabled else None,
        judge_protocol=cfg.judge.protocol if cfg.judge.enabled else None,
    )


class Stages:
    """Runs recipes in-process, reusing one whose summary says completed under the same config."""

    def __init__(self, root: Path, resume: bool):
        self.root, self.resume, self.timings, self.results = root, resume, {}, {}

    def run(self, name: str, fn, stage_cfg) -> dict:
        folder = Path(stage_cfg.output_dir) / stage_cfg.run_name
        summary, config = folder / "summary.json", folder / "config.yaml"
        if self.resume and summary.is_file() and config.is_file():
            done = json.loads(summary.read_text())
            same = config.read_text().split("\n", 2)[-1] == to_yaml(stage_cfg)
            if done.get("status") == "completed" and same:
                print(f"[outcome] {name}: completed before, reused", flush=True)
                self.results[name] = done
                self.timings.setdefault(name, float(done.get("wall_time_s") or 0.0))
                return done
        if folder.exists() and resume_mode(getattr(getattr(stage_cfg, "train", None), "resume", False)) == "false":
            # a stage run again under a new config starts clean: old checkpoints or metrics must not mix in
            aside = move_aside(folder)
            print(
                f"[outcome] {name}: config changed or run unfinished; the old folder is kept as {aside.name}",
                flush=True,
            )
        start = time.time()
        print(f"[outcome] {name} ...", flush=True)
        self.results[name] = fn(stage_cfg)
        self.timings[name] = time.time() - start
        print(f"[outcome] {name} done in {self.timings[name]:.0f}s", flush=True)
        return self.results[name]


def eval_prompts(cfg: OutcomeConfig) -> list[dict]:
    """Held-out prompts whose stated range the measurement cap can reach, each repeated per sample."""
    rows = [
        r
        for r in load_prompts(cfg.data.prompts, cfg.data.eval_split)
        if range_fits_cap(r.get("max_words"), cfg.measure.max_new_tokens)
    ][: cfg.data.max_eval_prompts or None]
    if not rows:
        raise RlcwError(
            "no held-out prompts fit the measurement cap",
            where=f"data.prompts={cfg.data.prompts}",
            hint="raise measure.max_new_tokens or add eval-split prompts with smaller word ranges",
        )
    return [{**r, "id": f"{r['id']}#{k}"} for r in rows for k in range(cfg.data.samples_per_prompt)]


def _eval_rm(
    stages: Stages, root: str, name: str, rm: str, pairs: str, cfg: OutcomeConfig, fit_on: str | None = None
) -> dict:
    e = eval_rm.EvalRMConfig(output_dir=root, run_name=name, seed=cfg.seed)
    e.scorer.kind, e.scorer.path, e.data.file = "bt", rm, pairs
    if fit_on:
        e.length_control.fit_on, e.length_control.install = fit_on, True  # the grpo_lc run reads it from the RM
    return stages.run(name, eval_rm.main, e)


def rm_section(stages: Stages, root: str, cfg: OutcomeConfig) -> dict:
    """Held-out accuracy of both RMs on both pair sets, their agreement, and the proxy's length-control fit."""
    out: dict[str, float] = {}
    scores = {}
    for rm in ("proxy", "gold"):
        for data in ("proxy", "gold"):
            name = f"eval_{rm}_rm_on_{data}_pairs"
            fit = f"{root}/proxy_pairs/pairs/train.jsonl" if (rm, data) == ("proxy", "proxy") else None
            res = _eval_rm(
                stages, root, name, f"{root}/{rm}_rm/model", f"{root}/{data}_pairs/pairs/eval.jsonl", cfg, fit
            )
            m = res["metrics"]
            for key in ("accuracy", "accuracy_ci_low", "accuracy_ci_high", "length_baseline/accuracy", "pairs"):
                if key in m:
                    out[f"{rm}_rm/{data}_pairs/{key.replace('/', '_')}"] = m[key]
            scores[(rm, data)] = [row for _, row in read_table(f"{root}/{name}/scores.jsonl")]
    for data in ("proxy", "gold"):
        agree = rm_agreement(scores[("proxy", data)], scores[("gold", data)])
        out[f"agreement/{data}_pairs"] = agree["agreement"]
    return out


def _load_scorers(root: str):
    from rlcw.rewards.bt import BTScorer

    # the proxy is measured raw (as trained); its length-control fit only shapes the grpo_lc reward
    return BTScorer(f"{root}/proxy_rm/model", length_control=False), BTScorer(
        f"{root}/gold_rm/model", length_control=False
    )


def measurement_key(cfg: OutcomeConfig, prompts: list[dict], root: Path) -> str:
    """What a cached measurement depends on besides the checkpoint: model, sampling, prompts, both RMs' training runs."""
    from dataclasses import asdict

    blob = json.dumps(
        {
            "model": asdict(cfg.model),
            "measure": asdict(cfg.measure),
            "prompts": [(p["id"], p["prompt"]) for p in prompts],
            "rms": [_trained_at(root / "proxy_rm"), _trained_at(root / "gold_rm")],
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _trained_at(run_dir: Path) -> float | None:
    summary = run_dir / "summary.json"
    return json.loads(summary.read_text()).get("started_at") if summary.is_file() else None


def measure_run(
    name: str,
    run_dir: Path,
    measurer: Measurer,
    start: tuple[list[dict], dict],
    out: Path,
    model_cfg: ModelConfig,
    key: str,
) -> list[dict]:
    """Measure every checkpoint of one trained run (step 0 = the start model); rows are cached in `<out>/<name>/`
    and reused only for the same training run (its start time) and the same measurement key."""
    from rlcw.models import load_causal_lm, load_tokenizer

    rows = [{"run": name, "step": 0, **start[1]}]
    tokenizer = load_tokenizer(model_cfg.name, padding_side="left")
    trained_at = _trained_at(run_dir)
    for step, path in checkpoints_of(run_dir):
        cached = out / name / f"step_{step:06d}.json"
        if cached.is_file():
            row = json.loads(cached.read_text())
            if row.get("trained_at") == trained_at and row.get("measurement_key") == key:
                rows.append(row)
                continue
        model = load_causal_lm(str(path), model_cfg.dtype)
        stories, metrics = measurer.measure(model, tokenizer, f"{name}@{step}")
        metrics.update({f"vs_start/{k}": v for k, v in paired_agreement(stories, start[0]).items()})
        write_stories(out / name / f"step_{step:06d}.jsonl", stories)
        row = {
            "run": name,
            "step": step,
            "checkpoint": str(path),
            "trained_at": trained_at,
            "measurement_key": key,
            **metrics,
        }
        atomic_write_json(cached, row)
        rows.append(row)
        del model
    return rows


def measure_best_of_n(bon_dir: Path, measurer: Measurer, start_stories: list[dict], out: Path) -> list[dict]:
    """One row per n from the best-of-n run's `samples/best_of_<n>.jsonl` (x = n; KL analytic); scored stories in `<out>/best_of_n/`."""
    rows = []
    for path in sorted(bon_dir.glob("samples/best_of_*.jsonl"), key=lambda p: int(p.stem.rsplit("_", 1)[1])):
        n = int(path.stem.rsplit("_", 1)[1])
        stories = read_stories(path)
        metrics = measurer.score(stories)
        metrics.update({"kl_seq": kl_best_of(n), "kl_token": float("nan")})
        metrics.update({f"vs_start/{k}": v for k, v in paired_agreement(stories, start_stories).items()})
        write_stories(out / "best_of_n" / f"step_{n:06d}.jsonl", stories)
        rows.append({"run": "best_of_n", "step": n, "n": n, "selected_from": str(path), **metrics})
    return rows


def validate(cfg: OutcomeConfig) -> None:
    """Every check of the study's own keys and of each stage's, before the run folder is written and before
    anything loads: wire() first (an override it would reset is an error), then each stage's validate()."""
    unknown = sorted(set(cfg.runs) - set(RUNS))
    if unknown:
        raise RlcwError(f"unknown run(s) {unknown}", where="runs", hint=f"choose from {', '.join(RUNS)}")
    wire(cfg, str(Path(cfg.output_dir) / cfg.run_name))
    for name, check in (
        ("proxy_pairs", build_pairs.validate),
        ("gold_pairs", build_pairs.validate),
        ("proxy_rm", train_rm.validate),
        ("gold_rm", train_rm.validate),
        ("gold_generate", generate_recipe.validate),
        ("best_of_n", generate_recipe.validate),
    ):
        try:
            check(getattr(cfg, name))
        except RlcwError as exc:  # name the study's key: proxy_rm.train.batch_size, not train.batch_size
            message = str(exc).split("\n  hint:")[0].removeprefix(f"{exc.where}: ")
            raise RlcwError(message, where=f"{name}.{exc.where}" if exc.where else name, hint=exc.hint) from None


def main(cfg: OutcomeConfig) -> dict:
    validate(cfg)
    with stage_run(cfg, "outcome") as run:
        root = str(run.path)
        wire(cfg, root)
        st = Stages(run.path, cfg.resume)
        st.run(
            "prepare_model",
            prepare_model.main,
            prepare_model.PrepareModelConfig(model=cfg.model, output_dir=root, run_name="prepare_model"),
        )
        st.run("proxy_pairs", build_pairs.main, cfg.proxy_pairs)
        st.run("proxy_rm", train_rm.main, cfg.proxy_rm)
        st.run("gold_generate", generate_recipe.main, cfg.gold_generate)
        st.run("gold_pairs", build_pairs.main, cfg.gold_pairs)
        st.run("gold_rm", train_rm.main, cfg.gold_rm)
        rm_metrics = rm_section(st, root, cfg)
        prompts = eval_prompts(cfg)
        atomic_write_jsonl(run.path / "eval_prompts.jsonl", prompts)
        trainers = {
            "grpo": grpo_recipe.main,
            "grpo_lc": grpo_recipe.main,
            "ppo": ppo_recipe.main,
            "dpo": dpo_recipe.main,
            "best_of_n": generate_recipe.main,
        }
        for name in cfg.runs:
            st.run(name, trainers[name], getattr(cfg, name))

        start_time = time.time()
        print("[outcome] measuring checkpoints ...", flush=True)
        measure_dir = run.path / "measure"
        proxy, gold = _load_scorers(root)
        measurer = Measurer(prompts, proxy, gold, cfg.measure, cfg.model.system_prompt)
        key = measurement_key(cfg, prompts, run.path)
        start = _measure_start(measurer, cfg.model, measure_dir, key)
        rows = []
        for name in cfg.runs:
            rows += (
                measure_best_of_n(Path(root) / name, measurer, start[0], measure_dir)
                if name == "best_of_n"
                else measure_run(name, Path(root) / name, measurer, start, measure_dir, cfg.model, key)
            )
        st.timings["measure"] = time.time() - start_time
        if cfg.judge.enabled:
            start_time = time.time()
            print("[outcome] judging against the start model ...", flush=True)
            j = cfg.judge
            judge_against_start(
                rows,
                start[0],
                measure_dir,
                protocol=j.protocol,
                template=j.template,
                max_items=j.max_items,
                client=dict(j.client),
                every_checkpoint=j.every_checkpoint,
                cache_dir=Path(root) / "judge_cache",
            )
            st.timings["judge"] = time.time() - start_time
        atomic_write_jsonl(run.path / "measurements.jsonl", rows)
        report, finals, plots = write_outcome_report(run.path, rows, rm_metrics, st.timings, study_setup(cfg))
        metrics = {**rm_metrics, **finals, "wall_time_s": round(sum(st.timings.values()), 1)}
        metrics.update({f"time/{k}_s": round(v, 1) for k, v in st.timings.items()})
        return run.write_summary(
            "completed", metrics, {"report": report, "measurements": run.path / "measurements.jsonl", **plots}
        )


def _measure_start(measurer: Measurer, model_cfg: ModelConfig, out: Path, key: str) -> tuple[list[dict], dict]:
    from rlcw.models import load_causal_lm, load_tokenizer

    cached, stories_file = out / "start.json", out / "start.jsonl"
    if cached.is_file() and stories_file.is_file():
        metrics = json.loads(cached.read_text())
        if metrics.pop("measurement_key", None) == key:
            return read_stories(stories_file), metrics
    model = load_causal_lm(model_cfg.name, model_cfg.dtype)
    stories, metrics = measurer.measure(model, load_tokenizer(model_cfg.name, padding_side="left"), "start")
    write_stories(stories_file, stories)
    atomic_write_json(cached, {**metrics, "measurement_key": key})
    return stories, metrics
