"""The plots and human-readable report of a GRPO or RLOO run (`rlcw grpo` and `rlcw rloo` write both into the run
folder, rlcw.recipes.common.trl_stage).

    plots = grpo_plots(run_dir)                                   # plots/*.png from metrics.jsonl, probe.jsonl
    text = grpo_report(title="GRPO", run_name="grpo", model_name=..., rewards=reward_summary(specs), rm_path=...,
                       beta=0.0, loss_type="dapo", scale_rewards="group", metrics=..., history=..., stop_reason=None,
                       alerts=[], plots=plots, length_control=length_control_lines(reward_funcs))

Plots: reward per step (total and per reward), reward and words per prompt source, held-out RM
score, the reward-hacking monitors, the rollout importance-sampling weights (fast rollout with the
correction only), a rubric reward's per-criterion means (when one ran), each constrained cost against its limit with
its multiplier (when one ran) and the learning probe (when it ran).
"""

from __future__ import annotations

from pathlib import Path

from rlcw.measure.monitors import member_panels, plot_monitors
from rlcw.measure.probe import MIN_MOVE, plot_probe, read_probe
from rlcw.report import plot_lines, read_metrics, series, step_table
from rlcw.rewards.factory import innermost
from rlcw.rewards.rubric import RESERVED


def grpo_plots(run_dir: Path, warn: dict | None = None, stop: dict | None = None) -> list[Path]:
    """The run's plots under `run_dir/plots/`, from `metrics.jsonl` and `probe.jsonl` (monitor thresholds drawn)."""
    rows = read_metrics(run_dir / "metrics.jsonl")
    sources = sorted({k.split("/")[1] for r in rows for k in r if k.startswith("source/")})
    rewards = {k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean") and "/member_" not in k}
    reward_plot = plot_lines(
        [
            (
                "training reward per step: total and each term",
                {"total": series(rows, "reward"), **{k.split("/")[1]: series(rows, k) for k in sorted(rewards)}},
                "reward (mean over completions)",
            ),
            (
                "training reward per prompt source",
                {s: series(rows, f"source/{s}/reward") for s in sources},
                "reward (mean)",
            ),
            ("story length per prompt source", {s: series(rows, f"source/{s}/words") for s in sources}, "words"),
            (
                "held-out RM score, policy vs start",
                {"policy": series(rows, "eval/rm/score"), "baseline": series(rows, "eval/rm/baseline_score")},
                "RM score (mean)",
            ),
            *member_panels(rows),
        ],
        run_dir / "plots" / "reward.png",
        ncols=2,
    )
    plots = [reward_plot, plot_monitors(rows, run_dir / "plots" / "monitors.png", warn, stop)]
    if any("rollout_is/mean_weight" in r for r in rows):  # fast rollout with the importance-sampling correction
        keys = ("mean_abs_gap", "mean_weight", "clipped_share")
        units = {"mean_abs_gap": "|log pi - log mu| per token", "mean_weight": "IS weight", "clipped_share": "share"}
        panels = [(f"rollout IS: {k.replace('_', ' ')}", {k: series(rows, f"rollout_is/{k}")}, units[k]) for k in keys]
        plots.append(plot_lines(panels, run_dir / "plots" / "rollout_is.png"))
    rubric = sorted({k for r in rows for k in r if k.startswith("rubric/")})
    if rubric:  # rlcw.rewards.rubric: per-criterion batch means, invalid share, criteria without signal
        names = sorted({k.split("/")[1] for k in rubric})
        panels = [
            (
                f"rubric '{n}': mean P(yes) per criterion",
                {
                    k.split("/", 2)[2]: series(rows, k)
                    for k in rubric
                    if k.startswith(f"rubric/{n}/") and k.split("/", 2)[2] not in RESERVED
                },
            )
            for n in names
        ]
        panels += [(f"rubric '{n}': invalid share", {"invalid": series(rows, f"rubric/{n}/invalid")}) for n in names]
        panels += [
            (f"rubric '{n}': stories without verdict", {"no_verdict": series(rows, f"rubric/{n}/no_verdict")})
            for n in names
            if any(f"rubric/{n}/no_verdict" in r for r in rows)
        ]
        plots.append(plot_lines(panels, run_dir / "plots" / "rubric.png"))
    constrained = sorted({k.split("/")[1] for r in rows for k in r if k.startswith("constraint/")})
    if constrained:  # rlcw.rewards.constrained: the batch cost against its limit, and the price it set
        panels = []
        for n in constrained:
            cost = {"batch cost": series(rows, f"constraint/{n}/cost"), "limit": series(rows, f"constraint/{n}/limit")}
            panels.append((f"constraint '{n}': batch cost and limit", cost, "cost"))
            price = {"multiplier": series(rows, f"constraint/{n}/multiplier")}
            panels.append((f"constraint '{n}': multiplier", price, "reward units per unit of cost"))
        plots.append(plot_lines(panels, run_dir / "plots" / "constraints.png", ncols=2))
    probe = read_probe(run_dir / "probe.jsonl")
    if probe:
        plots.append(plot_probe(probe, run_dir / "plots" / "probe.png"))
    return plots


def reward_summary(specs: dict) -> str:
    """`name (type, weight w)` of every reward spec, comma-separated."""

    def one(name: str, s: dict) -> str:
        held = f", held under {s['constrain'].get('limit', 'start')}" if isinstance(s.get("constrain"), dict) else ""
        gated = f", gated {s['gate']}" if s.get("gate") else ""
        return f"{name} ({s.get('type')}, weight {s.get('weight', 1.0)}{held}{gated})"

    return ", ".join(one(name, s) for name, s in specs.items())


def length_control_lines(funcs: list) -> list[str]:
    """What each BT reward's `length_control` (auto | true | false) resolved to in this run (inside an anchor or a
    gate too)."""
    out = []
    for f in map(innermost, funcs):
        if type(f).__name__ == "BTScorer":
            fit = f.length_fit
            state = (
                f"on (residual of score ~ {fit.intercept:.3f} + {fit.slope:.3f} * {fit.feature}, fit on {fit.n} stories)"
                if fit is not None
                else "off (raw scores)"
            )
            out.append(f"- length control of `{f.__name__}`: {state}")
    return out


def grpo_report(
    *,
    title: str,
    run_name: str,
    model_name: str,
    rewards: str,
    rm_path: str | None,
    beta: float,
    loss_type: str,
    scale_rewards: str,
    metrics: dict,
    history: list[dict],
    stop_reason: str | None,
    alerts: list[dict],
    plots: list[Path],
    length_control: list[str] | None = None,
) -> str:
    """Markdown: run setup, early stop, learning probe verdict, plots, monitor alerts, held-out table; `title` names
    the algorithm in the heading (`# GRPO run <run_name>`)."""
    lines = [
        f"# {title} run `{run_name}`",
        "",
        f"- policy start: `{model_name}`",
        f"- rewards: {rewards}; default RM `{rm_path}`",
        f"- steps: {int(metrics['train/steps'])}; beta {beta}, loss {loss_type}, scale_rewards {scale_rewards}",
        *(length_control or []),
        "",
    ]
    if stop_reason:
        lines += [f"**Stopped early:** {stop_reason}", ""]
    if "probe/abs_logp_change" in metrics:
        size = metrics["probe/abs_logp_change"]
        verdict = "**the policy did not move**" if size < MIN_MOVE else "the policy moved"
        lines += [
            f"Learning probe: mean |log-prob change| on held-out texts {size:.4f} nats/token: {verdict} "
            f"(threshold {MIN_MOVE}).",
            "",
        ]
    lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    if alerts:
        lines += (
            ["## Monitor alerts", ""]
            + [f"- step {a['step']} ({a['level']}): {a['message']}" for a in alerts[:30]]
            + [""]
        )
    lines += step_table("Held-out evaluation", history)
    return "\n".join(lines) + "\n"
