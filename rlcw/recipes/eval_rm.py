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
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlcw.config import check_at_least, check_choice
from rlcw.data.preferences import load_preferences
from rlcw.errors import RlcwError, location
from rlcw.io import atomic_write_json, atomic_write_jsonl, read_table
from rlcw.metrics import pairwise as pw
from rlcw.metrics.bootstrap import bootstrap_ci
from rlcw.metrics.ending import KEYS as ENDING_KEYS
from rlcw.metrics.ending import ending_prices
from rlcw.metrics.text import count_words
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RubricSection
from rlcw.report import save_figure
from rlcw.rewards.scorers import is_pairwise, load_scorer
from rlcw.rm.length_control import LENGTH_CONTROL_FILE, fit_length_fit, save_length_fit
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
class EvalRMConfig:
    scorer: ScorerSection = field(default_factory=ScorerSection)
    data: EvalDataSection = field(default_factory=EvalDataSection)
    length_control: LengthControlSection = field(default_factory=LengthControlSection)
    ending: EndingSection = field(default_factory=EndingSection)
    bootstrap_resamples: int = 1000  # bootstrap resamples of the accuracy intervals
    output_dir: str = "runs"  # parent folder of the run folder <output_dir>/<run_name>
    run_name: str = "eval_rm"  # name of the run folder under output_dir
    seed: int = 0  # random seed of the run
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>


def reference_stories(path: str, limit: int | None) -> tuple[list[str], list[str]]:
    """(prompts, stories) of a story-record file, or of both sides of a pair file."""
    prompts, stories = [], []
    for line, row in read_table(path):
        keys = (
            ("story",) if "story" in row else ("chosen", "rejected") if "chosen" in row and "rejected" in row else ()
        )
        if not keys:
            raise RlcwError(
                "neither a story record nor a preference pair",
                where=location(path, line, "story"),
                hint="give story records (prompt, story) or preference records (prompt, chosen, rejected)",
            )
        for key in keys:
            if not isinstance(row[key], str) or not row[key].strip():
                raise RlcwError("empty or non-text story", where=location(path, line, key))
            prompts.append(str(row.get("prompt") or ""))
            stories.append(row[key])
    return prompts[: limit or None], stories[: limit or None]


def fit_length_control(scorer, lc: LengthControlSection, run) -> dict:
    prompts, stories = reference_stories(lc.fit_on, lc.max_stories)
    raw = scorer.score(prompts, stories, raw=True)
    fit = fit_length_fit(raw, [count_words(s) for s in stories], lc.feature, source=str(lc.fit_on))
    path = save_length_fit(fit, run.path)  # never mutate an RM folder unless told to
    if lc.install:
        shutil.copyfile(path, scorer.rm_dir / LENGTH_CONTROL_FILE)
    scorer.length_fit = fit
    return {
        "length_control/slope": fit.slope,
        "length_control/intercept": fit.intercept,
        "length_control/r2": fit.r2,
        "length_control/n": float(fit.n),
    }


def accuracy_block(outcomes: list[float], split: dict[str, list[int]], prefix: str, resamples: int, seed: int) -> dict:
    """Accuracy, its bootstrap CI, and accuracy on chosen-longer / chosen-shorter pairs."""
    out = {f"{prefix}accuracy": pw.mean_of(outcomes)}
    out[f"{prefix}accuracy_ci_low"], out[f"{prefix}accuracy_ci_high"] = bootstrap_ci(
        outcomes, n_resamples=resamples, seed=seed
    )
    for name in ("chosen_longer", "chosen_shorter"):
        out[f"{prefix}accuracy_{name}"] = pw.mean_of(outcomes, split[name])
    return out


def scored_heads(scorer, prompts: list[str], stories: list[str]) -> dict[str, list[float]]:
    """Raw scores in one pass: "" = the scorer's head, and with several heads `head/<name>/` for each."""
    return scored_with_members(scorer, prompts, stories)[0]


def scored_with_members(scorer, prompts: list[str], stories: list[str]) -> tuple[dict[str, list[float]], list | None]:
    """`scored_heads` and, for an ensemble, the (k, n) member scores of the same pass (else None)."""
    from rlcw.rm.scoring import EnsembleScorer

    if isinstance(scorer, EnsembleScorer):
        scores, members = scorer.score_with_members(prompts, stories, raw=True)
        return {"": scores}, members
    heads = scorer.score_heads(prompts, stories)
    if len(heads) == 1:
        return {"": heads["score"]}, None
    return {"": heads[scorer.head]} | {f"head/{h}/": v for h, v in heads.items()}, None


def eval_pointwise(scorer, pairs, cw, rw, split, cfg) -> tuple[dict, list[dict]]:
    prompts = [p["prompt"] for p in pairs]
    c_heads, members_c = scored_with_members(scorer, prompts, [p["chosen"] for p in pairs])
    r_heads, members_r = scored_with_members(scorer, prompts, [p["rejected"] for p in pairs])
    chosen, rejected = c_heads.pop(""), r_heads.pop("")
    versions = {"": (chosen, rejected)}
    fit = getattr(scorer, "length_fit", None) if cfg.scorer.length_control else None
    if fit is not None:
        versions["length_controlled/"] = (fit.residuals(chosen, cw), fit.residuals(rejected, rw))
    versions.update({h: (c_heads[h], r_heads[h]) for h in c_heads})  # every head and their sum, a column each
    metrics: dict = {}
    for prefix, (c, r) in versions.items():
        metrics.update(accuracy_block(pw.pair_outcomes(c, r), split, prefix, cfg.bootstrap_resamples, cfg.seed))
        corr = pw.length_correlation(c + r, [float(w) for w in cw + rw])
        metrics[f"{prefix}score_length_pearson"], metrics[f"{prefix}score_length_spearman"] = (
            corr["pearson"],
            corr["spearman"],
        )
        metrics[f"{prefix}mean_margin"] = pw.mean_of([a - b for a, b in zip(c, r, strict=False)])
    if members_c is not None:
        metrics.update(ensemble_block(members_c, members_r))
    rows = [{"chosen_score": c, "rejected_score": r} for c, r in zip(chosen, rejected, strict=False)]
    if fit is not None:
        for row, c, r in zip(rows, *versions["length_controlled/"], strict=False):
            row.update(chosen_score_lc=c, rejected_score_lc=r)
    return metrics, rows


def ensemble_block(chosen: list[list[float]], rejected: list[list[float]]) -> dict:
    """An RM ensemble's members: each one's accuracy and how often they all agree (`rlcw.rm.aggregate`)."""
    from rlcw.rm.aggregate import agreement

    out = {
        f"ensemble/member_{j}/accuracy": pw.pairwise_accuracy(c, r)
        for j, (c, r) in enumerate(zip(chosen, rejected, strict=True))
    }
    out["ensemble/member_agreement"] = agreement(chosen, rejected)
    out["ensemble/members"] = float(len(chosen))
    return out


def eval_pairwise(scorer, pairs, cw, rw, split, cfg) -> tuple[dict, list[dict]]:
    prompts, chosen, rejected = (
        [p["prompt"] for p in pairs],
        [p["chosen"] for p in pairs],
        [p["rejected"] for p in pairs],
    )
    fwd = scorer.prefer_ordered(prompts, chosen, rejected)  # P(chosen better), chosen shown first
    bwd = scorer.prefer_ordered(prompts, rejected, chosen)  # P(rejected better), rejected shown first
    avg = pw.averaged_preference(fwd, bwd)  # the two-order rule: None unless both orders gave a verdict
    valid = [i for i, p in enumerate(avg) if p is not None]
    if not valid:
        raise RlcwError(
            "the scorer gave no valid verdict in both orders for any pair", hint="check the judge/GenRM output format"
        )
    pos = {i: j for j, i in enumerate(valid)}
    sub = {k: [pos[i] for i in idx if i in pos] for k, idx in split.items()}
    metrics = accuracy_block(pw.prob_outcomes([avg[i] for i in valid]), sub, "", cfg.bootstrap_resamples, cfg.seed)
    both = pw.two_order_metrics(fwd, bwd)  # the same accuracy train-rm reports (accuracy_block adds the CI)
    metrics.update({k: v for k, v in both.items() if k != "accuracy"})
    metrics["p_chosen_length_diff_spearman"] = pw.length_correlation(
        [avg[i] for i in valid], [float(cw[i] - rw[i]) for i in valid]
    )["spearman"]
    rows = [
        {"p_chosen_first": f, "p_rejected_first": b, "p_chosen": a} for f, b, a in zip(fwd, bwd, avg, strict=False)
    ]
    return metrics, rows


def _tie_block(c: list[float], r: list[float], prefix: str) -> dict:
    """Ties and the accuracy without them (a yes/no rubric ties often)."""
    n = len(c)
    tied = sum(a == b for a, b in zip(c, r, strict=True))
    won = sum(a > b for a, b in zip(c, r, strict=True))
    return {
        f"{prefix}ties": tied / n if n else None,
        f"{prefix}accuracy_strict": won / n if n else None,
        f"{prefix}accuracy_untied": won / (n - tied) if n > tied else None,
    }


def criterion_accuracy(values: list[list[float | None]], names: list[str], n: int) -> dict:
    """Per criterion: accuracy (ties half), ties and the pairs where both sides got a valid verdict;
    `values` holds the n chosen rows, then the n rejected rows."""
    out: dict = {}
    for j, name in enumerate(names):
        both = [(values[i][j], values[n + i][j]) for i in range(n) if None not in (values[i][j], values[n + i][j])]
        c, r = [a for a, _ in both], [b for _, b in both]
        out[f"rubric/{name}/accuracy"] = pw.mean_of(pw.pair_outcomes(c, r)) if both else None
        out[f"rubric/{name}/ties"] = _tie_block(c, r, "")["ties"]
        out[f"rubric/{name}/pairs"] = float(len(both))
    return out


def eval_rubric(scorer, pairs, cw, rw, split, cfg) -> tuple[dict, list[dict]]:
    """A rubric on pairs: one judge call for both sides; ties, per-criterion accuracy, invalid verdicts."""
    n = len(pairs)
    prompts = [p["prompt"] for p in pairs] * 2
    scores = scorer.score(prompts, [p["chosen"] for p in pairs] + [p["rejected"] for p in pairs])
    values, names = scorer.last_values, [c.name for c in scorer.criteria]
    chosen, rejected = scores[:n], scores[n:]
    valid = [i for i in range(n) if math.isfinite(chosen[i]) and math.isfinite(rejected[i])]
    if not valid:
        raise RlcwError(
            "the rubric judge gave no valid verdict for both sides of any pair",
            where="scorer.rubric",
            hint="check the judge's replies (verdict=text), or use scorer.rubric.verdict=logprobs",
        )
    pos = {i: j for j, i in enumerate(valid)}
    sub = {k: [pos[i] for i in idx if i in pos] for k, idx in split.items()}
    c, r = [chosen[i] for i in valid], [rejected[i] for i in valid]
    metrics = accuracy_block(pw.pair_outcomes(c, r), sub, "", cfg.bootstrap_resamples, cfg.seed)
    metrics.update(_tie_block(c, r, ""))
    cells = [v for row in values for v in row]
    metrics.update(
        {
            "pairs_scored": float(len(valid)),
            "pairs_tied": float(sum(a == b for a, b in zip(c, r, strict=True))),
            "pairs_no_verdict": float(n - len(valid)),
            "invalid_verdicts": float(sum(v is None for v in cells)),
            "invalid_verdict_share": sum(v is None for v in cells) / len(cells),
            "mean_margin": pw.mean_of([a - b for a, b in zip(c, r, strict=True)]),
            "judge/calls": float(scorer.client.stats["calls"]),  # uncached: scorer.rubric.client.cache_dir reuses
            "judge/cache_hits": float(scorer.client.stats["cache_hits"]),
        }
    )
    corr = pw.length_correlation(c + r, [float(cw[i]) for i in valid] + [float(rw[i]) for i in valid])
    metrics["score_length_pearson"], metrics["score_length_spearman"] = corr["pearson"], corr["spearman"]
    metrics.update(criterion_accuracy(values, names, n))

    def finite(v: float) -> float | None:
        return v if math.isfinite(v) else None

    rows = [
        {
            "chosen_score": finite(chosen[i]),
            "rejected_score": finite(rejected[i]),
            "chosen_rubric": dict(zip(names, values[i], strict=True)),
            "rejected_rubric": dict(zip(names, values[n + i], strict=True)),
        }
        for i in range(n)
    ]
    return metrics, rows


def load_samples(path: str) -> list[dict]:
    """Policy samples for the ending prices; a row without its fields is an error naming the row and key."""
    rows = []
    for line, row in read_table(path):
        for key, kind in (("story", str), ("finished", bool)):
            if not isinstance(row.get(key), kind):
                raise RlcwError(
                    f"ending samples need a {kind.__name__} '{key}' in every row, got {row.get(key)!r}",
                    where=location(path, line, key),
                    hint="give scored policy samples, e.g. a quickstart's heldout/start.jsonl",
                )
        rows.append({**row, "prompt": str(row.get("prompt") or ""), "prompt_index": row.get("prompt_id", line)})
    if not rows:
        raise RlcwError("no samples", where=path, hint="give scored policy samples, e.g. heldout/start.jsonl")
    return rows


def eval_ending(scorer, cfg: EvalRMConfig) -> dict:
    """What the RM pays for ending, ending short and words (`rlcw.metrics.ending`), per head (raw scores)."""
    rows = load_samples(cfg.ending.samples)
    prompts, stories = [r["prompt"] for r in rows], [r["story"] for r in rows]
    out = {"ending/samples": float(len(rows))}
    for prefix, scores in scored_heads(scorer, prompts, stories).items():
        recs = [{**r, "score": s, "words": count_words(r["story"])} for r, s in zip(rows, scores, strict=True)]
        prices = ending_prices(recs, cfg.ending.n_resamples, cfg.seed)
        out.update({f"{prefix}ending/{k}": v for k, v in prices.items()})
    return out


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
            metrics.update(fit_length_control(scorer, cfg.length_control, run))
        cw, rw = [count_words(p["chosen"]) for p in pairs], [count_words(p["rejected"]) for p in pairs]
        split = pw.length_direction(cw, rw)
        evaluate = eval_rubric if s.kind == "rubric" else eval_pairwise if pairwise else eval_pointwise
        try:
            scored, rows = evaluate(scorer, pairs, cw, rw, split, cfg)
        finally:
            if s.kind == "rubric":
                scorer.client.close()  # the judge cache (scorer.rubric.client.cache_dir) is written through
        metrics.update(scored)
        if cfg.ending.samples:
            if pairwise:
                raise RlcwError("ending prices apply to pointwise (bt) scorers", where="ending.samples")
            metrics.update(eval_ending(scorer, cfg))
        metrics.update(
            accuracy_block(
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
