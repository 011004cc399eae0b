"""`rlcw study-ingest`: validate human-study answers, unblind them, and analyse them.

    rlcw study-ingest key=runs/study_export/private/key.json answers=[answers/]
    rlcw study-ingest --config configs/study_ingest/default.yaml judges=[runs/judge/verdicts.jsonl]

`answers` lists files or folders: the HTML pages' downloads (answers-*.json), the survey CSV filled
in, or a Label Studio JSON export. The key's checksum is checked first (a tampered key is an
error), then every answer (unknown ids, duplicates, missing items or dimensions, unknown labels,
failed attention checks: one error listing all; `drop_failed_raters=true` drops those raters).
Writes `judgements.jsonl` (unblinded), `results.json` (per dimension: win rates with bootstrap
CIs, Bradley-Terry strengths with CIs, Fleiss' kappa, label counts; agreement with the RM and
with each judge verdict file), `report.md` and a plot of the strengths. Judge verdict files are
described in `rlcw.study.verdicts`. It does not re-run any model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json, atomic_write_jsonl
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys
from rlcw.report import save_figure
from rlcw.study.analysis import analyse
from rlcw.study.blinding import read_key
from rlcw.study.ingest import load_answers, validate_and_unblind
from rlcw.study.verdicts import read_verdicts


@dataclass
class StudyIngestConfig(RunKeys):
    key: str = ""  # key.json written by study-export
    answers: list[str] = field(default_factory=list)  # answers files or folders
    judges: list[str] = field(default_factory=list)  # judge verdict jsonl files (name = file stem)
    drop_failed_raters: bool = False  # drop raters who failed an attention check (false = error)
    n_bootstrap: int = 200  # bootstrap resamples of the confidence intervals
    alpha: float = 0.05  # confidence intervals at 1 - alpha
    run_name: str = "study_ingest"  # name of the run folder under output_dir


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def render_report(results: dict, report: dict) -> str:
    lines = [
        f"# Study ingest\n\n{report['judgements']} judgements from {report['raters']} raters "
        f"({report['packets_returned']} packets returned, {len(report['packets_not_returned'])} not returned, "
        f"{report['items_unrated']} items unrated; dropped raters: {', '.join(report['dropped_raters']) or 'none'}).\n"
    ]
    for dim, res in results["dimensions"].items():
        lines.append(
            f"## {dim}\n\nFleiss' kappa: {_fmt(res['fleiss']['kappa'])} "
            f"({res['fleiss']['items']} items x {res['fleiss']['raters_per_item']} raters)\n"
        )
        lines.append("| system | win rate | 95% CI | n | BT strength | BT CI |\n|---|---|---|---|---|---|")
        for system, w in res["win_rates"].items():
            bt = res["bradley_terry"][system]
            lines.append(
                f"| {system} | {w['win_rate']:.3f} | {w['ci_low']:.3f} to {w['ci_high']:.3f} | {w['n']} | "
                f"{bt['strength']:.3f} | {bt['ci_low']:.3f} to {bt['ci_high']:.3f} |"
            )
        lines.append("")
    rm = results["rm"]
    lines.append(
        f"RM agreement (overall, human ties left out): {_fmt(rm['agreement'])} (n={rm['n']}); "
        f"RM-preferred story chosen: {_fmt(rm['rm_preferred_rate'])}\n"
    )
    for name, j in results["judges"].items():
        lines.append(f"Judge `{name}` agreement (overall): {_fmt(j['agreement'])} (n={j['n']})\n")
    lines.append("\n![Bradley-Terry strengths](bt_strengths.png)\n")
    return "\n".join(lines)


def plot_strengths(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bt = results["dimensions"]["overall"]["bradley_terry"]
    systems = sorted(bt, key=lambda s: bt[s]["strength"])
    fig, ax = plt.subplots(figsize=(6, 0.5 * len(systems) + 1.5))
    for y, s in enumerate(systems):
        ax.errorbar(
            bt[s]["strength"],
            y,
            xerr=[[bt[s]["strength"] - bt[s]["ci_low"]], [bt[s]["ci_high"] - bt[s]["strength"]]],
            fmt="o",
        )
    ax.set_yticks(range(len(systems)), systems)
    ax.set_xlabel("Bradley-Terry log-strength (overall, 95% CI)")
    fig.tight_layout()
    return save_figure(fig, path)


def main(cfg: StudyIngestConfig) -> dict:
    if not cfg.key:
        raise RlcwError("no key file given", where="key", hint="key=runs/study_export/private/key.json")
    if not cfg.answers:
        raise RlcwError("no answers given", where="answers", hint="answers=[folder/with/answers-*.json]")
    with stage_run(cfg, "study-ingest") as run:
        key = read_key(cfg.key)
        judgements, report = validate_and_unblind(load_answers(cfg.answers), key, cfg.drop_failed_raters)
        if not judgements:
            raise RlcwError(
                "no usable judgements left", where="answers", hint="check drop_failed_raters and the answers files"
            )
        verdicts, invalid = {}, {}
        for path in cfg.judges:
            verdicts[Path(path).stem], invalid[Path(path).stem] = read_verdicts(path)
        results = analyse(judgements, verdicts, n_bootstrap=cfg.n_bootstrap, alpha=cfg.alpha, seed=cfg.seed)
        for name in results["judges"]:
            results["judges"][name]["invalid_verdicts"] = invalid[name]
        results["validation"] = report
        artifacts = {
            "judgements": atomic_write_jsonl(run.path / "judgements.jsonl", judgements),
            "results": atomic_write_json(run.path / "results.json", results),
            "plot": plot_strengths(results, run.path / "bt_strengths.png"),
        }
        run.write_report(render_report(results, report))
        overall = results["dimensions"]["overall"]
        metrics = {
            "judgements": float(report["judgements"]),
            "raters": float(report["raters"]),
            **{f"win_rate/{s}": w["win_rate"] for s, w in overall["win_rates"].items()},
            **{f"bt/{s}": b["strength"] for s, b in overall["bradley_terry"].items()},
        }
        if overall["fleiss"]["kappa"] is not None:
            metrics["fleiss_kappa"] = overall["fleiss"]["kappa"]
        if results["rm"]["agreement"] is not None:
            metrics["rm_agreement"] = results["rm"]["agreement"]
        for name, j in results["judges"].items():
            if j["agreement"] is not None:
                metrics[f"judge_agreement/{name}"] = j["agreement"]
        run.log(0, metrics)
        return run.write_summary("completed", metrics, artifacts)
