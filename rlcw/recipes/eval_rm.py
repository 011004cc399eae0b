"""Evaluate a reward model or judge on held-out preference pairs, next to the length-only baseline.

What: for any scorer (`scorer.kind`: bt RM folder, genrm RM folder, zero-shot judge; `auto` reads
the folder's rlcw_rm.json) on a pair file (local or hub id): pairwise accuracy with a bootstrap CI,
accuracy on pairs where the chosen story is longer / shorter, the length-only baseline (longer
wins) on the same pairs, and
- pointwise scorers (bt): Pearson/Spearman correlation of score with story length (words), raw and,
  when the RM folder holds a length-control fit, length-controlled (see `rlcw.rm.length_control`);
- pairwise scorers (genrm, judge): each pair is asked in both orders; accuracy uses
  P(chosen better) = (p(chosen first) + 1 - p(rejected first)) / 2, consistency = share of pairs whose
  verdict flips with the order, first-position rate, invalid verdicts counted (and excluded).
- rubric scorers (`scorer.kind=rubric`, `scorer.rubric.*` = the options of a `type: rubric` reward spec): both
  sides of every pair x every criterion go to the judge in one batched call; a pair is won when the chosen
  story's weighted mean verdict is higher, a tie (frequent with yes/no verdicts) counts half in `accuracy` and
  is reported (`ties`, `pairs_tied`, `accuracy_strict` = chosen strictly higher, `accuracy_untied`); per
  criterion `rubric/<name>/accuracy|ties|pairs`; a pair with a side without any valid verdict is left out
  (`pairs_no_verdict`), invalid verdicts are counted (`invalid_verdicts`, `invalid_verdict_share`).
A two-head RM (`rm.length_head=true`) is scored with `scorer.head` (default quality) and every head also
gets its own column (`head/<quality|length|sum>/...`: accuracy, chosen-longer/shorter accuracy, Pearson
and Spearman with words).
`ending.samples=FILE` (scored or unscored policy samples with `prompt`, `story`, `finished` and the
prompt's `min_words`/`max_words`, e.g. a quickstart's `heldout/start.jsonl`) adds what the RM pays for
ending, for ending short and per 10 words within ended stories, per head (`rlcw.metrics.ending`).
`length_control.fit_on=FILE` (story records, or pairs: both sides) first fits score ~ a + b f(words)
on that reference set and writes `rlcw_length_control.json` into the run folder; with
`length_control.install=true` also into the RM folder (then a scorer's length_control auto|true apply it).
An RM ensemble's folder (`rlcw.rm.ensemble`) is scored with its aggregate, and each member's accuracy and
how often all members agree are reported beside it.
Writes `<run>/eval.json`, `<run>/scores.jsonl` (per pair), `<run>/eval_rm.png`, report.md, summary.json.
Not here: training (`rlcw train-rm`), judging story files (`rlcw judge`).

    rlcw eval-rm scorer.path=runs/train_rm/model data.file=runs/build_pairs/pairs/eval.jsonl
    rlcw eval-rm --config configs/eval_rm/bt.yaml length_control.fit_on=runs/build_pairs/pairs/train.jsonl
    rlcw eval-rm scorer.path=runs/qs/train_rm/model ending.samples=runs/qs/heldout/start.jsonl
    rlcw eval-rm scorer.kind=judge scorer.judge_client.base_url=http://127.0.0.1:8000/v1 scorer.judge_client.model=m
    rlcw eval-rm scorer.kind=rubric scorer.rubric.criteria=ttcw:1,9,13 scorer.rubric.client.concurrency=8
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rlcw.config import check_at_least, check_choice
from rlcw.data.preferences import load_preferences
from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json, atomic_write_jsonl
from rlcw.metrics import pairwise as pw
from rlcw.metrics.bootstrap import small_sample_note
from rlcw.metrics.ending import KEYS as ENDING_KEYS
from rlcw.metrics.text import count_words
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RubricSection, RunKeys
from rlcw.report import save_figure
from rlcw.rewards.scorers import is_pairwise, load_scorer
from rlcw.rm.length_control import fit_length_control
from rlcw.rm.pair_eval import eval_ending, eval_pairwise, eval_pointwise, eval_rubric
from rlcw.runs import done_line


@dataclass
class ScorerSection:
    kind: str = "auto"  # auto | bt | genrm | judge | rubric
    path: str | None = "runs/train_rm/model"  # RM folder (bt, genrm)
    batch_size: int = 16  # items per scorer batch
    device: str | None = None  # torch device of the scorer (cpu, cuda, ...); None = the scorer's default
    length_control: bool = True  # bt: also report scores with the folder's length-control fit
    head: str = "quality"  # bt with a length head (rm.length_head=true): quality | length | sum
    judge_client: dict[str, Any] = field(default_factory=dict)  # judge: rlcw.judges.clients.base.ClientConfig keys
    # judge: LitBench prompt template (writerly | minimal | reddit_minimal | reddit_verbose | permuted)
    judge_template: str = "writerly"
    rubric: RubricSection = field(default_factory=RubricSection)  # kind=rubric: criteria and judge


@dataclass
class EvalDataSection:
    file: str = "runs/build_pairs/pairs/eval.jsonl"  # local pair file or hub id
    split: str = "test"  # hub split of data.file
    # record field names: prompt/chosen/rejected -> the column holding each
    columns: dict[str, str] = field(
        default_factory=lambda: {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"}
    )
    max_pairs: int | None = None  # first N pairs (None = all)


@dataclass
class LengthControlSection:
    fit_on: str | None = None  # reference stories (story records or pairs) -> fit, saved into this run's folder
    install: bool = False  # also write the fit into the RM folder (a scorer's length_control auto|true then uses it)
    feature: str = "log_words"  # words | log_words
    max_stories: int | None = None  # first N reference stories of fit_on (None = all)


@dataclass
class EndingSection:
    samples: str | None = None  # policy samples (prompt, story, finished, min_words, max_words) -> ending prices
    n_resamples: int = 1000  # bootstrap over prompts for their intervals


@dataclass
class EvalRMConfig(RunKeys):
    scorer: ScorerSection = field(default_factory=ScorerSection)
    data: EvalDataSection = field(default_factory=EvalDataSection)
    length_control: LengthControlSection = field(default_factory=LengthControlSection)
    ending: EndingSection = field(default_factory=EndingSection)
    bootstrap_resamples: int = 1000  # bootstrap resamples of the accuracy intervals
    run_name: str = "eval_rm"  # name of the run folder under output_dir


def validate(cfg: EvalRMConfig) -> None:
    """Every config check, before the run folder is written and before anything loads."""
    from rlcw.rewards.scorers import KINDS

    s = cfg.scorer
    if s.kind not in KINDS:
        raise RlcwError(f"unknown scorer kind '{s.kind}'", where="scorer.kind", hint=f"use one of {', '.join(KINDS)}")
    if s.kind == "rubric":
        from rlcw.rewards.rubric import check_rubric

        check_rubric(asdict(s.rubric), "scorer.rubric")
    elif s.kind != "judge" and not s.path:
        raise RlcwError(
            f"scorer.kind={s.kind} needs scorer.path", where="scorer.path", hint="e.g. scorer.path=runs/train_rm/model"
        )
    check_at_least("scorer.batch_size", s.batch_size, 1)
    check_at_least("bootstrap_resamples", cfg.bootstrap_resamples, 1)
    check_at_least("data.max_pairs", cfg.data.max_pairs, 1)
    check_choice("length_control.feature", cfg.length_control.feature, ("words", "log_words"))
    check_choice("scorer.head", s.head, ("quality", "length", "sum"))
    check_at_least("ending.n_resamples", cfg.ending.n_resamples, 1)
    if s.kind in ("genrm", "judge", "rubric") and (s.head != "quality" or cfg.ending.samples):
        raise RlcwError(
            "heads and ending prices apply to BT reward models",
            where="scorer.head" if s.head != "quality" else "ending.samples",
            hint="use scorer.kind=bt, or drop the key",
        )
    if cfg.length_control.fit_on and s.kind in ("genrm", "judge", "rubric"):
        raise RlcwError(
            "length control applies to BT reward models",
            where="length_control.fit_on",
            hint="use scorer.kind=bt, or drop length_control.fit_on",
        )


def main(cfg: EvalRMConfig) -> dict:
    validate(cfg)
    s = cfg.scorer
    with stage_run(cfg, "eval-rm") as run:
        pairs = load_preferences(cfg.data.file, cfg.data.split, cfg.data.columns, cfg.data.max_pairs)
        scorer = load_scorer(
            s.kind,
            s.path,
            batch_size=s.batch_size,
            device=s.device,
            length_control="auto" if s.length_control else False,  # true here: the fit when there is one
            head=s.head,
            judge_client=s.judge_client,
            judge_template=s.judge_template,
            rubric=asdict(s.rubric),
        )
        pairwise = is_pairwise(scorer)
        if hasattr(scorer, "progress"):
            scorer.progress = True
        metrics: dict = {}
        if cfg.length_control.fit_on:
            if pairwise:
                raise RlcwError("length control applies to pointwise (bt) scorers", where="length_control.fit_on")
            lc = cfg.length_control
            metrics.update(
                fit_length_control(
                    scorer, lc.fit_on, run.path, feature=lc.feature, max_stories=lc.max_stories, install=lc.install
                )
            )
        cw, rw = [count_words(p["chosen"]) for p in pairs], [count_words(p["rejected"]) for p in pairs]
        split = pw.length_direction(cw, rw)
        pointwise = partial(eval_pointwise, length_control=s.length_control)
        evaluate = eval_rubric if s.kind == "rubric" else eval_pairwise if pairwise else pointwise
        try:
            scored, rows = evaluate(scorer, pairs, cw, rw, split, resamples=cfg.bootstrap_resamples, seed=cfg.seed)
        finally:
            if s.kind == "rubric":
                scorer.client.close()  # the judge cache (scorer.rubric.client.cache_dir) is written through
        metrics.update(scored)
        if cfg.ending.samples:
            if pairwise:
                raise RlcwError("ending prices apply to pointwise (bt) scorers", where="ending.samples")
            metrics.update(eval_ending(scorer, cfg.ending.samples, cfg.ending.n_resamples, cfg.seed))
        metrics.update(
            pw.accuracy_block(
                pw.pair_outcomes([float(w) for w in cw], [float(w) for w in rw]),
                split,
                "length_baseline/",
                cfg.bootstrap_resamples,
                cfg.seed,
            )
        )
        metrics.update({"pairs": float(len(pairs)), **{f"pairs_{k}": float(len(v)) for k, v in split.items()}})
        per_pair = [
            {"index": i, "chosen_words": c, "rejected_words": r, **row}
            for i, (c, r, row) in enumerate(zip(cw, rw, rows, strict=False))
        ]
        info = {"kind": type(scorer).__name__, "pairwise": pairwise, "path": s.path, "data": cfg.data.file}
        info["small"] = small_sample_note(len(pairs), "pairs")
        if info["small"]:
            print(f"[rlcw] warning: {info['small']}", flush=True)
        if s.kind == "rubric":
            judge = scorer.client.cfg
            names = ", ".join(c.name for c in scorer.criteria)
            info["path"] = f"{names} ({s.rubric.verdict} verdicts of {judge.kind} {judge.model})"
            info["criteria"] = [asdict(c) for c in scorer.criteria]
        if getattr(scorer, "ensemble", None) is not None:
            info["aggregate"] = f"{scorer.aggregate}" + (
                f" (lambda {scorer.uwo_lambda})" if scorer.aggregate == "uwo" else ""
            )
        artifacts = {
            "eval": atomic_write_json(run.path / "eval.json", {"scorer": info, "metrics": metrics}),
            "scores": atomic_write_jsonl(run.path / "scores.jsonl", per_pair),
            "plot": plot_eval(metrics, per_pair, pairwise, run.path / "eval_rm.png"),
        }
        run.log(0, {k: v for k, v in metrics.items() if v is not None})
        keys = {"accuracy": "accuracy", "length-only baseline": "length_baseline_accuracy"}
        run.write_report(report(metrics, info), done_line(metrics, keys, more=2))
        return run.write_summary("completed", metrics, artifacts)


def plot_eval(metrics: dict, rows: list[dict], pairwise: bool, path: Path) -> Path:
    from rlcw.report import plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    groups = ["accuracy", "accuracy_chosen_longer", "accuracy_chosen_shorter"]
    series = (
        {"scorer": ""}
        | ({"length-controlled": "length_controlled/"} if "length_controlled/accuracy" in metrics else {})
        | {"longer wins": "length_baseline/"}
    )
    width = 0.8 / len(series)
    for k, (label, prefix) in enumerate(series.items()):
        vals = [metrics.get(prefix + g) or 0.0 for g in groups]
        xs = [i + k * width for i in range(len(groups))]
        ax.bar(xs, vals, width, label=label)
        lo, hi = metrics[prefix + "accuracy_ci_low"], metrics[prefix + "accuracy_ci_high"]
        ax.errorbar([xs[0]], [vals[0]], yerr=[[vals[0] - lo], [hi - vals[0]]], color="black", capsize=3)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(
        [i + width * (len(series) - 1) / 2 for i in range(len(groups))], ["all", "chosen longer", "chosen shorter"]
    )
    ax.set_ylim(0, 1)
    ax.set_title("pairwise accuracy (95% CI on all)")
    ax.legend(fontsize=8)
    if pairwise:
        ax2.scatter([r["chosen_words"] - r["rejected_words"] for r in rows], [r["p_chosen"] for r in rows], s=8)
        ax2.set_xlabel("chosen - rejected (words)")
        ax2.set_ylabel("P(chosen better)")
    else:
        words = [r["chosen_words"] for r in rows] + [r["rejected_words"] for r in rows]
        scores = [r["chosen_score"] for r in rows] + [r["rejected_score"] for r in rows]
        # a rubric's story without a valid verdict has no score: NaN is left out of the scatter
        ax2.scatter(words, [math.nan if v is None else v for v in scores], s=8, label="raw")
        if rows and "chosen_score_lc" in rows[0]:
            ax2.scatter(
                words,
                [r["chosen_score_lc"] for r in rows] + [r["rejected_score_lc"] for r in rows],
                s=8,
                label="length-controlled",
            )
            ax2.legend(fontsize=8)
        ax2.set_xlabel("story length (words)")
        ax2.set_ylabel("score")
    ax2.set_title("score vs length")
    fig.tight_layout()
    return save_figure(fig, path, dpi=100)


def _fmt(v, count: bool = False) -> str:
    if v is None:
        return "n/a"
    return str(int(v)) if count else f"{v:.3f}" if isinstance(v, float) else str(v)


def _fmt_ci(metrics: dict, key: str) -> str:
    """`value [lo, hi]` where the metrics hold an interval for key, else `_fmt`."""
    v, lo, hi = metrics.get(key), metrics.get(f"{key}_lo"), metrics.get(f"{key}_hi")
    if v is None or lo is None or hi is None:
        return _fmt(v)
    return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def report(metrics: dict, info: dict) -> str:
    lines = [
        f"# Reward-model evaluation: {info['kind']}",
        "",
        f"- scorer: `{info['path']}` ({'pairwise' if info['pairwise'] else 'pointwise'})",
        f"- pairs: `{info['data']}` ({_fmt(metrics['pairs'], True)}; chosen longer {_fmt(metrics['pairs_chosen_longer'], True)}, "
        f"shorter {_fmt(metrics['pairs_chosen_shorter'], True)}, equal {_fmt(metrics['pairs_equal_length'], True)})",
        "",
    ]
    if info.get("small"):
        lines += [f"**Warning: {info['small']}.**", ""]
    heads = [h for h in ("quality", "length", "sum") if f"head/{h}/accuracy" in metrics]
    cols = (
        {"scorer": ""}
        | ({"length-controlled": "length_controlled/"} if "length_controlled/accuracy" in metrics else {})
        | {f"{h} head" if h != "sum" else "sum of heads": f"head/{h}/" for h in heads}
        | {"longer wins": "length_baseline/"}
    )
    lines += ["| metric | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for key in (
        "accuracy",
        "accuracy_ci_low",
        "accuracy_ci_high",
        "accuracy_chosen_longer",
        "accuracy_chosen_shorter",
        "score_length_pearson",
        "score_length_spearman",
        "mean_margin",
        *[f"ending/{k}" for k in ENDING_KEYS],
        "ending/words_pearson",
        "ending/words_pearson_ended",
    ):
        if any(p + key in metrics for p in cols.values()):
            cells = [_fmt_ci(metrics, p + key) for p in cols.values()]
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
    extra = [
        k
        for k in metrics
        if k.startswith(
            (
                "order_",
                "first_",
                "invalid_",
                "pairs_scored",
                "pairs_tied",
                "pairs_no_verdict",
                "ties",
                "accuracy_strict",
                "accuracy_untied",
                "p_chosen",
                "length_control/",
                "ending/",
                "ensemble/",
                "judge/",
            )
        )
        and not k.startswith(tuple(f"ending/{e}" for e in (*ENDING_KEYS, "words_pearson", "words_pearson_ended")))
    ]
    counts = (
        "invalid_verdicts",
        "invalid_chosen_first",
        "invalid_rejected_first",
        "pairs_",
        "length_control/n",
        "ending/n_",
        "ending/samples",
        "ensemble/members",
        "judge/",
    )
    if info.get("aggregate"):
        lines += [f"- RM ensemble: `scorer` is the members' {info['aggregate']}; each member's accuracy below"]
    lines += [""] + [f"- {k}: {_fmt(metrics[k], k.startswith(counts))}" for k in extra]
    criteria = [c["name"] for c in info.get("criteria", [])]
    if criteria:
        lines += ["", "| criterion | accuracy | ties | pairs with both verdicts |", "|---|---|---|---|"]
        for c in criteria:
            cells = [_fmt(metrics[f"rubric/{c}/{k}"]) for k in ("accuracy", "ties")]
            lines.append(f"| {c} | {' | '.join(cells)} | {_fmt(metrics[f'rubric/{c}/pairs'], True)} |")
        lines += ["", "A tie (same weighted verdict for both stories) counts half in `accuracy`."]
    lines += [
        "",
        "A scorer that does not beat `longer wins` may be a length detector.",
        *(
            [
                "Ending prices (95% CI over prompts): `ended_minus_cut` is what the RM pays for a story that ends "
                "over one cut at the cap, `short_minus_inside` for an ending below the asked range over one inside "
                "it (> 0 pays for stopping early), `per_10_words_ended` per 10 words among ended stories."
            ]
            if "ending/samples" in metrics
            else []
        ),
        "",
        "![evaluation](eval_rm.png)",
        "",
    ]
    return "\n".join(lines)
