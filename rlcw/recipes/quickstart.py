"""The whole loop on one machine, with a report: the product's main job at small scale.

prepare-model -> build-pairs -> train-rm (BT, LoRA) -> grpo (RM + length terms, monitors, LoRA) ->
export (merged, logits checked) -> generate before/after on held-out prompts -> report.md
with PNG plots (RM accuracy; reward and length per GRPO step) and samples side by side.
Each stage is the real recipe with its own run folder under `<output_dir>/<run_name>/`;
override any of them by prefix, e.g. `grpo.train.max_steps=20 train_rm.train.max_steps=40`.

    scripts/quickstart.sh                       # set-up + this, on the embedded model
    rlcw quickstart --config configs/quickstart/cpu.yaml
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rlcw.config import assign
from rlcw.data.records import read_stories
from rlcw.recipes import build_pairs, export, generate, grpo, prepare_model, train_rm
from rlcw.recipes.common import ModelConfig, stage_run
from rlcw.report import plot_lines, read_metrics, series, side_by_side
from rlcw.rl.monitors import plot_monitors


@dataclass
class Gates:
    """What makes a quickstart 'with meaning' (checked and shown in the report)."""

    min_rm_accuracy: float = 0.8
    min_grpo_steps: int = 10


@dataclass
class QuickstartConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    build_pairs: build_pairs.BuildPairsConfig = field(default_factory=build_pairs.BuildPairsConfig)
    train_rm: train_rm.TrainRMConfig = field(default_factory=train_rm.TrainRMConfig)
    grpo: grpo.GRPORecipeConfig = field(default_factory=grpo.GRPORecipeConfig)
    generate: generate.GenerateConfig = field(default_factory=generate.GenerateConfig)
    export: export.ExportConfig = field(default_factory=export.ExportConfig)
    gates: Gates = field(default_factory=Gates)
    output_dir: str = "runs"
    run_name: str = "quickstart"
    seed: int = 0
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>


def wire(cfg: QuickstartConfig, root: str) -> None:
    """Point every stage at the shared model, seed and this run's folder, and chain their files.

    Every key set here is derived: setting one yourself (YAML or command line) to another value is an
    error naming it (`rlcw.config.assign`), never a silent reset."""

    def put(key: str, value) -> None:
        assign(cfg, key, value)

    for name in ("build_pairs", "train_rm", "grpo", "generate", "export"):
        put(f"{name}.output_dir", root), put(f"{name}.run_name", name), put(f"{name}.seed", cfg.seed)
        put(f"{name}.overwrite", True)  # a re-run of the quickstart starts each stage fresh
    pairs = [f"{root}/build_pairs/pairs/train.jsonl", f"{root}/build_pairs/pairs/eval.jsonl"]
    put("train_rm.model", ModelConfig(name=cfg.model.name, dtype=cfg.model.dtype))
    put("train_rm.data.train_file", pairs[0]), put("train_rm.data.eval_file", pairs[1])
    put("grpo.model", cfg.model)
    put("grpo.reward.rm_path", f"{root}/train_rm/model")
    put("grpo.data.no_overlap_with", pairs)
    put("export.model", ModelConfig(**{**vars(cfg.model), "name": f"{root}/grpo/checkpoints/final"}))
    put("generate.model", cfg.model)


def main(cfg: QuickstartConfig) -> dict:
    with stage_run(cfg, "quickstart") as run:
        root = str(run.path)
        wire(cfg, root)
        timings: dict[str, float] = {}
        results: dict[str, dict] = {}

        def stage(name: str, fn, stage_cfg):
            start = time.time()
            print(f"[quickstart] {name} ...", flush=True)
            results[name] = fn(stage_cfg)
            timings[name] = time.time() - start
            print(f"[quickstart] {name} done in {timings[name]:.0f}s", flush=True)

        stage(
            "prepare_model",
            prepare_model.main,
            prepare_model.PrepareModelConfig(
                model=cfg.model, output_dir=root, run_name="prepare_model", overwrite=True
            ),
        )
        stage("build_pairs", build_pairs.main, cfg.build_pairs)
        stage("train_rm", train_rm.main, cfg.train_rm)
        stage("grpo", grpo.main, cfg.grpo)
        stage("export", export.main, cfg.export)
        before_cfg = _generate_cfg(cfg.generate, cfg.model.name, "generate_before", "base")
        after_cfg = _generate_cfg(cfg.generate, results["export"]["artifacts"]["model"], "generate_after", "tuned")
        stage("generate_before", generate.main, before_cfg)
        stage("generate_after", generate.main, after_cfg)
        metrics, checks = _gate(cfg, results)
        plots = _plots(run.path)
        run.write_report(_report(cfg, run.path, timings, metrics, checks, plots))
        status = "completed" if all(ok for _, ok, _ in checks) else "failed"
        metrics.update({f"time/{k}_s": round(v, 1) for k, v in timings.items()})
        artifacts = {
            "report": run.path / "report.md",
            "model": results["export"]["artifacts"]["model"],
            **{p.stem: p for p in plots},
        }
        return run.write_summary(
            status,
            metrics,
            artifacts,
            error=None if status == "completed" else "quality gates not met (see report.md)",
        )


def _generate_cfg(
    base: generate.GenerateConfig, model_name: str, run_name: str, system: str
) -> generate.GenerateConfig:
    import copy

    out = copy.deepcopy(base)
    out.model = ModelConfig(**{**vars(base.model), "name": model_name})
    out.run_name, out.system = run_name, system
    return out


def _gate(cfg: QuickstartConfig, results: dict) -> tuple[dict, list[tuple[str, bool, str]]]:
    rm = results["train_rm"]["metrics"]
    steps = int(results["grpo"]["metrics"].get("train/steps", 0))
    acc = rm.get("eval/accuracy", 0.0)
    metrics = {
        "rm/accuracy": acc,
        "rm/length_baseline_accuracy": rm.get("eval/length_baseline_accuracy"),
        "grpo/steps": steps,
        "export/max_logit_diff": results["export"]["metrics"]["max_logit_diff"],
        **{f"grpo/{k}": v for k, v in results["grpo"]["metrics"].items() if k.startswith("eval/")},
    }
    grpo_error = results["grpo"].get("error")
    checks = [
        (
            "RM held-out accuracy on length-matched pairs",
            acc >= cfg.gates.min_rm_accuracy,
            f"{acc:.3f} (needs >= {cfg.gates.min_rm_accuracy})",
        ),
        ("GRPO steps", steps >= cfg.gates.min_grpo_steps, f"{steps} (needs >= {cfg.gates.min_grpo_steps})"),
        (
            "GRPO reward-hacking monitors in range",
            not grpo_error,
            grpo_error or f"{int(results['grpo']['metrics'].get('monitor/alerts', 0))} warning(s), no stop",
        ),
    ]
    return metrics, checks


def _plots(root) -> list:
    rm_rows = read_metrics(root / "train_rm" / "metrics.jsonl")
    g_rows = read_metrics(root / "grpo" / "metrics.jsonl")
    rm_key = next((k for r in g_rows for k in r if k.startswith("rewards/rm") and k.endswith("/mean")), "reward")
    rm_plot = plot_lines(
        [
            ("RM held-out accuracy", {"eval accuracy": series(rm_rows, "eval_accuracy")}),
            ("RM training loss", {"loss": series(rm_rows, "loss")}),
        ],
        root / "plots" / "rm_accuracy.png",
    )
    grpo_plot = plot_lines(
        [
            (
                "GRPO reward per step",
                {
                    "total": series(g_rows, "reward"),
                    "RM": series(g_rows, rm_key),
                    "length term": series(g_rows, "rewards/length_range/mean"),
                },
            ),
            (
                "completion length (tokens)",
                {
                    "mean": series(g_rows, "completions/mean_length"),
                    "clipped share x100": _scaled(series(g_rows, "completions/clipped_ratio"), 100),
                },
            ),
            (
                "held-out eval",
                {
                    "RM score": series(g_rows, "eval/rm/score"),
                    "words / 10": _scaled(series(g_rows, "eval/length/mean_words"), 0.1),
                },
            ),
        ],
        root / "plots" / "grpo_reward_length.png",
    )
    monitors = plot_monitors(g_rows, root / "plots" / "grpo_monitors.png")
    return [rm_plot, grpo_plot, monitors]


def _scaled(xy: tuple[list, list], factor: float) -> tuple[list, list]:
    return xy[0], [v * factor for v in xy[1]]


def _report(cfg, root, timings: dict, metrics: dict, checks: list, plots: list) -> str:
    total = sum(timings.values())
    before = read_stories(root / "generate_before" / "samples" / "stories.jsonl")
    after = read_stories(root / "generate_after" / "samples" / "stories.jsonl")
    lines = [
        "# rlcw quickstart report",
        "",
        f"Model: `{cfg.model.name}`. Total stage time {total:.0f} s.",
        "",
        "## Checks",
        "",
    ]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {name}: {detail}" for name, ok, detail in checks]
    lines += ["", "## Stage times", "", "| stage | seconds | share |", "|---|---|---|"]
    lines += [f"| {k} | {v:.0f} | {100 * v / total:.0f}% |" for k, v in timings.items()]
    lines += ["", "## Key metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in metrics.items()]
    lines += ["", "## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots]
    lines += [
        "",
        "## Samples before / after GRPO (held-out prompts, same sampling seed)",
        "",
        side_by_side(before, after, ("base model", "after GRPO (exported)")),
        "",
    ]
    lines += [
        "Stage folders: "
        + ", ".join(f"`{k}/`" for k in timings)
        + " (each with config.yaml, metrics.jsonl, summary.json)."
    ]
    return "\n".join(lines) + "\n"
