"""The outcome study's readings after its stages: the junk screen of the gold scores, best-of-n under the ensemble
proxy's aggregates, the monitors' lead-time rows, the seeds' arms, slop and the RM agreement table. Functions here
take the study's config or its sections (they are its stage definitions)."""

from __future__ import annotations

import json
from pathlib import Path

from rlcw.io import atomic_write_json
from rlcw.outcome import analysis
from rlcw.outcome.monitors import MEASURED, MonitorRead, lead_rows, read_series
from rlcw.outcome.pairs import agreement_with
from rlcw.pipelines.outcome_stages import arm_of, monitor_proxy, parse_aggregate
from rlcw.pipelines.outcome_steps import Study
from rlcw.pipelines.stages import Stages


def ensemble_bon(cfg, study: Study, pool: list[dict]) -> tuple[analysis.Curve, analysis.AggregateChoice]:
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


def _disagreement(members: list[list[float]]) -> float:
    from rlcw.rm.aggregate import member_summary

    return float(member_summary(members)["disagreement"])


def start_disagreement(cfg, study: Study, pool: list[dict]) -> float | None:
    """The ensemble proxy's disagreement on the start's stories (the pool's first samples; its member scores are
    in pool order), or None without an ensemble proxy."""
    ens = monitor_proxy(cfg)
    if ens is None:
        return None
    members = pool_members(study, ens)
    start = [j for j, r in enumerate(pool) if r["sample_index"] < cfg.measure.samples_per_prompt]
    return _disagreement([[m[j] for j in start] for m in members])


def measured_disagreement(
    cfg, st: Stages, study: Study, name: str, measured: list[tuple[int, list[dict]]], start: float
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
            members = scorer.score_members([r["prompt"] for r in recs], [r["story"] for r in recs])
            atomic_write_json(folder / "members.json", members)

        st.cached(f"measure_{name}", folder, {"samples": done, "scorer": ident}, write)
        out.append((step, _disagreement(json.loads((folder / "members.json").read_text()))))
    return out


def monitor_reads(
    cfg, st: Stages, study: Study, summaries: list, measured: dict[str, list], pool: list[dict]
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


def screen_golds(
    cfg, study: Study, pool: list[dict], measured: dict[str, list]
) -> tuple[list[dict], dict[str, list], dict[str, float] | None]:
    """The pool and every checkpoint's records with junk stories scored as each gold's floor, and the floors
    (`rlcw.outcome.screen`; the floor from the start's stories, the pool's first samples); unchanged, and no floor,
    when `measure.screen_junk` is off. The one place the gold readings' scores are screened."""
    from rlcw.outcome.screen import junk_floor, screen_junk

    if not cfg.measure.screen_junk:
        return pool, measured, None
    floor = junk_floor([r for r in pool if r["sample_index"] < cfg.measure.samples_per_prompt], study.golds())
    screened = {name: [(step, screen_junk(recs, floor)) for step, recs in points] for name, points in measured.items()}
    return screen_junk(pool, floor), screened, floor


def arms_reading(
    cfg,
    study: Study,
    start: list[dict],
    slope: list[dict],
    measured: dict[str, list],
    curves: list[analysis.Curve],
    floor: dict[str, float] | None = None,
) -> tuple[list[str], dict[str, float]]:
    """The report's arms section (`rlcw.outcome.arms`): every trained run with seeds read over its seeds at
    `measure.matched_d` and at its peaks, by every gold: each checkpoint's measured records at its curve point's d;
    then the junk share of every seeded run's checkpoints (`junk_section`); ([], {}) when no run has seeds.
    `floor`: the junk screen's floors (`screen_golds`; None: off), which the section states."""
    from rlcw.outcome.arms import arms_section, junk_section
    from rlcw.outcome.screen import screen_note
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
    lines, flat = arms_section(readings, list(m.matched_d), base_arm, notes=[note, "", screen_note(floor), ""])
    seeded = {c.run: measured[c.run] for c in curves if cfg.seeds.get(arm_of(cfg, c.run)[0])}
    junk_lines, junk_flat = junk_section(seeded, {run: arm_of(cfg, run)[0] for run in seeded}, floor is not None)
    return lines + junk_lines, flat | junk_flat


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


def agreement_rows(cfg, pool: list[dict], rm_rows: list[dict]) -> list[dict]:
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
