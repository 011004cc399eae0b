"""Judge story files of several systems on the same prompts with an LLM judge.

    rlcw judge --config configs/judge/litbench.yaml data.stories=[runs/base.jsonl,runs/tuned.jsonl]
    rlcw judge --config configs/judge/agents_room.yaml client.base_url=http://127.0.0.1:8000/v1
    rlcw judge --config configs/judge/ttcw_reference.yaml data.references=refs.jsonl

Protocols (`protocol=`): `agents_room` (side by side on Plot, Creativity, Development, Language
Use, Overall: A | B | Same), `litbench` (reasoning then `Preferred: A|B`; templates writerly,
minimal, reddit_minimal, reddit_verbose, permuted), `ttcw_baseline` (14 tests, Yes/No on the
story alone), `ttcw_reference` (5-level Likert against a reference story, both orders),
`ttcw_original` (the 14 tests as Chakrabarty et al. ran them: expert background per test from
your copy of the released tests file, `ttcw_tests=ttcw_all_tests.json`, reply starting Yes/No),
`ttcw_hybrid` (originality tests by the baseline, the rest against the reference; with
`ttcw_tests=PATH` the originality tests use the original prompt and the reference template the
same background). `ttcw_test_ids=[1,9]` runs a subset.

`verdict=logprobs` (client.kind=local, or a server returning logprobs) reads pairwise verdicts
from the label probabilities instead of generated text: never invalid, probabilities and margin
kept per row. Every pairwise report shows order consistency and position bias (share of
verdicts for the story shown first).

`client.kind=replay client.replies=<old run>/verdicts.jsonl` re-parses and re-aggregates stored
replies (matched by request key, else id) with no model call.
Pairwise protocols judge every pair of systems on every shared prompt in both orders
(`data.baseline=NAME`: only pairs with that system). Stories are matched by prompt text.

Writes `<run>/verdicts.jsonl` (raw replies kept), `rankings.json` (BT strengths with bootstrap
CIs, win rates, length-controlled win rates, order consistency, invalid counts), `rankings.png`,
`report.md` and `summary.json`. Replies are cached (`client.cache_dir`, default `<run>/cache`):
re-running an interrupted or finished run makes no new calls for what it already has.
Not here: agreement with human scores (`rlcw agreement`), human studies (`rlcw study-export`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from rlcw.config import check_at_least
from rlcw.data.bundled import resolve_data_path
from rlcw.data.records import read_stories
from rlcw.errors import RlcwError, location
from rlcw.io import atomic_write_json, atomic_write_jsonl
from rlcw.judges.aggregate import invalid_counts, order_consistency, summarize_judgments
from rlcw.judges.cache import CACHE_FILE, ReplyCache
from rlcw.judges.clients.base import ClientConfig
from rlcw.judges.clients.factory import describe_client, make_client
from rlcw.judges.position import logprob_summary, position_bias
from rlcw.judges.protocols import (
    DEFAULT_TEMPLATE,
    PAIRWISE_DIMENSIONS,
    PROTOCOLS,
    VERDICTS,
    YES_NO_METHODS,
    Pair,
    judge_side_by_side,
    judge_ttcw,
    pair_outcomes,
    ttcw_story_scores,
)
from rlcw.judges.report import DEFINITIONS, pairwise_table, plot_strengths
from rlcw.judges.templates import load_template, load_ttcw_tests
from rlcw.metrics.bootstrap import small_sample_note
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys
from rlcw.runs import done_line


@dataclass
class JudgeDataConfig:
    stories: list[str] = field(
        default_factory=list
    )  # story-record jsonl files ('bundled' = rlcw's human stories); systems = records' `system`
    references: str | None = None  # TTCW: story records whose `story` is the reference (else the records' `reference`)
    baseline: str | None = None  # pairwise: judge only pairs that include this system (default: all pairs)
    max_prompts: int | None = None  # judge the first N prompts (None = all)


@dataclass
class JudgeConfig(RunKeys):
    protocol: str = "litbench"  # agents_room | litbench | ttcw_baseline | ttcw_original | ttcw_reference | ttcw_hybrid
    # built-in name (e.g. writerly, reddit_verbose) or a YAML file; None = protocol default
    template: str | None = None
    # ttcw_hybrid: template for the originality tests (default ttcw_original with ttcw_tests, else ttcw_baseline)
    baseline_template: str | None = None
    ttcw_tests: str | None = None  # your ttcw_all_tests.json (background per test); needed by ttcw_original
    ttcw_test_ids: list[int] = field(default_factory=list)  # TTCW test ids to run ([] = all 14)
    verdict: str = "text"  # text (parse the reply) | logprobs (label probabilities; pairwise protocols)
    data: JudgeDataConfig = field(default_factory=JudgeDataConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    n_bootstrap: int = 200  # bootstrap resamples of the confidence intervals
    run_name: str = "judge"  # name of the run folder under output_dir


# --- inputs --------------------------------------------------------------------------------


def load_systems(paths: list[str]) -> tuple[dict[str, dict[str, dict]], dict[str, tuple[str, str]]]:
    """({system: {prompt text: record}}, {prompt text: (prompt_id, prompt)}) in first-seen order."""
    if not paths:
        raise RlcwError("no story files given", where="data.stories", hint="data.stories=[a.jsonl,b.jsonl]")
    systems: dict[str, dict[str, dict]] = {}
    prompts: dict[str, tuple[str, str]] = {}
    for path in map(str, (resolve_data_path(p, "stories.jsonl") for p in paths)):
        for line, rec in enumerate(read_stories(path), start=1):
            key = " ".join(rec["prompt"].split())
            own = systems.setdefault(rec["system"], {})
            if key in own:
                raise RlcwError(
                    f"system '{rec['system']}' has a second story for the same prompt",
                    where=location(path, line, "prompt"),
                    hint="keep one story per system and prompt",
                )
            own[key] = rec
            prompts.setdefault(key, (str(rec["id"]), rec["prompt"]))
    return systems, prompts


def load_references(path: str | None, systems: dict[str, dict[str, dict]], keys: list[str]) -> dict[str, str]:
    """prompt key -> reference story (from a file of story records, or the records' `reference` field)."""
    refs: dict[str, str] = {}
    if path:
        for rec in read_stories(path):
            refs[" ".join(rec["prompt"].split())] = rec["story"]
    else:
        for own in systems.values():
            for key, rec in own.items():
                if rec.get("reference"):
                    refs.setdefault(key, rec["reference"])
    missing = [k for k in keys if k not in refs]
    if missing:
        raise RlcwError(
            f"no reference story for {len(missing)} prompt(s), e.g. {missing[0][:80]!r}",
            where=path or "data.stories",
            hint="give data.references=FILE (story records) or a `reference` field per record",
        )
    return refs


def build_pairs(
    systems: dict[str, dict[str, dict]], prompts: dict[str, tuple[str, str]], keys: list[str], baseline: str | None
) -> list[Pair]:
    names = list(systems)
    if baseline is not None and baseline not in systems:
        raise RlcwError(
            f"unknown baseline system '{baseline}'", where="data.baseline", hint=f"systems: {', '.join(names)}"
        )
    if len(names) < 2:
        raise RlcwError(
            f"pairwise protocols need at least two systems, found {names}",
            where="data.stories",
            hint="give story files of two or more systems (the records' `system` field)",
        )
    pairs = []
    for x, y in combinations(names, 2):
        if baseline is not None and baseline not in (x, y):
            continue
        for key in keys:
            if key in systems[x] and key in systems[y]:
                pairs.append(
                    Pair(prompts[key][0], prompts[key][1], x, systems[x][key]["story"], y, systems[y][key]["story"])
                )
    if not pairs:
        raise RlcwError(
            "no prompt is shared by two systems",
            where="data.stories",
            hint="stories are matched by identical prompt text",
        )
    return pairs


# --- protocols -----------------------------------------------------------------------------


def run_pairwise(cfg: JudgeConfig, client, pairs: list[Pair]) -> tuple[list[dict], dict, dict]:
    template = load_template(cfg.template or DEFAULT_TEMPLATE[cfg.protocol], cfg.protocol)
    rows = judge_side_by_side(client, template, pairs, verdict=cfg.verdict)
    results, panels = {}, {}
    for dim in PAIRWISE_DIMENSIONS[cfg.protocol]:
        summary = summarize_judgments(
            [j for j in pair_outcomes(rows, dim)], n_bootstrap=cfg.n_bootstrap, seed=cfg.seed
        )
        summary["invalid"] = invalid_counts(rows, dim)
        summary["order_consistency"], summary["order_pairs"] = order_consistency(rows, dim)
        summary["position_bias"] = position_bias(rows, dim)
        if cfg.verdict == "logprobs":
            summary["logprobs"] = logprob_summary(rows, dim)
        results[dim], panels[dim] = summary, summary["bradley_terry"]
    return rows, results, panels


def ttcw_comparisons(scores: list[dict]) -> list[tuple[str, str, float, int, int]]:
    """Per prompt, every two systems whose stories have no invalid test: higher score wins, equal = tie."""
    by_prompt: dict[str, list[dict]] = {}
    for s in scores:
        if s["invalid_tests"] == 0:
            by_prompt.setdefault(s["prompt_id"], []).append(s)
    out = []
    for group in by_prompt.values():
        for a, b in combinations(group, 2):
            y = 1.0 if a["score"] > b["score"] else 0.0 if a["score"] < b["score"] else 0.5
            out.append((a["system"], b["system"], y, a["words"], b["words"]))
    return out


def run_ttcw(cfg: JudgeConfig, client, systems, prompts, keys) -> tuple[list[dict], dict, dict]:
    stories = [dict(rec, prompt_id=prompts[k][0]) for own in systems.values() for k, rec in own.items() if k in keys]
    refs = None
    if cfg.protocol not in YES_NO_METHODS:
        by_key = load_references(cfg.data.references, systems, keys)
        refs = {prompts[k][0]: by_key[k] for k in keys}
    tests = load_ttcw_tests(cfg.ttcw_tests) if cfg.ttcw_tests else None
    yes_no = cfg.protocol in YES_NO_METHODS
    main_tpl = load_template(cfg.template or DEFAULT_TEMPLATE[cfg.protocol if yes_no else "ttcw_reference"])
    default_base = "ttcw_original" if tests else "ttcw_baseline"
    base_tpl = main_tpl if yes_no else load_template(cfg.baseline_template or default_base)
    ref_tpl = None if yes_no else main_tpl
    if yes_no and main_tpl.protocol not in YES_NO_METHODS or not yes_no and main_tpl.protocol != "ttcw_reference":
        raise RlcwError(f"template '{main_tpl.name}' is for protocol {main_tpl.protocol}", where="template")
    if base_tpl.protocol not in YES_NO_METHODS:
        raise RlcwError(f"template '{base_tpl.name}' is for protocol {base_tpl.protocol}", where="baseline_template")
    if tests and ref_tpl is not None and "{background}" not in ref_tpl.user + (ref_tpl.system or ""):
        raise RlcwError(
            f"template '{ref_tpl.name}' has no {{background}} placeholder for the tests file's background",
            where="template",
        )
    try:
        rows = judge_ttcw(
            client,
            cfg.protocol,
            stories,
            refs,
            test_ids=cfg.ttcw_test_ids or None,
            tests=tests,
            baseline_template=base_tpl,
            reference_template=ref_tpl,
        )
    except ValueError as exc:
        raise RlcwError(str(exc), where="ttcw_test_ids" if "unknown" in str(exc) else "ttcw_tests") from None
    scores = ttcw_story_scores(rows)
    words = {(s["system"], s["prompt_id"]): len(s["story"].split()) for s in stories}
    for s in scores:
        s["words"] = words[(s["system"], s["prompt_id"])]
    summary = summarize_judgments(ttcw_comparisons(scores), n_bootstrap=cfg.n_bootstrap, seed=cfg.seed)
    summary["invalid"] = {
        "replies": len(rows),
        "invalid_replies": sum(1 for r in rows if not r["verdict"]["valid"]),
        "stories": len(scores),
        "stories_with_invalid_tests": sum(1 for s in scores if s["invalid_tests"]),
    }
    summary["mean_score"] = {sys: _mean([s["score"] for s in scores if s["system"] == sys]) for sys in systems}
    summary["scores"] = scores
    return rows, {"creativity": summary}, {"TTCW score": summary["bradley_terry"]}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# --- report --------------------------------------------------------------------------------


def summary_metrics(cfg: JudgeConfig, results: dict, stats: dict) -> dict[str, float]:
    dim = "overall" if cfg.protocol == "agents_room" else "preferred" if cfg.protocol == "litbench" else "creativity"
    res = results[dim]
    inv = res["invalid"]
    out = {"calls": float(stats["calls"]), "cache_hits": float(stats["cache_hits"])}
    if "replayed" in stats:
        out["replayed"] = float(stats["replayed"])
    if "judgments" in inv:
        out.update(
            judgments=float(inv["judgments"]),
            invalid=float(inv["invalid"]),
            invalid_share=float(inv["invalid_share"]),
            order_consistency=float(res["order_consistency"]),
        )
        if res.get("position_bias") is not None:
            out["position_bias"] = float(res["position_bias"])
    else:
        out.update(
            judgments=float(inv["replies"]),
            invalid=float(inv["invalid_replies"]),
            invalid_share=inv["invalid_replies"] / max(1, inv["replies"]),
        )
        out.update({f"mean_score/{s}": float(v) for s, v in res["mean_score"].items()})
    out.update({f"win_rate/{s}": float(v) for s, v in res["win_rate"].items()})
    out.update({f"bt/{s}": float(v["strength"]) for s, v in res["bradley_terry"].items()})
    return out


def write_report(
    run,
    cfg: JudgeConfig,
    results: dict,
    stats: dict,
    plot: Path,
    headline: str | None = None,
    small: str | None = None,
) -> None:
    """report.md; `small` is the small-sample warning (rlcw.metrics.bootstrap.small_sample_note) or None."""
    lines = [
        f"# rlcw judge: {cfg.protocol}",
        "",
        f"Judge: `{describe_client(cfg.client)}`",
        "",
        *([f"**Warning: {small}.**", ""] if small else []),
        f"Calls made {stats['calls']}, cache hits {stats['cache_hits']}, retries {stats['retries']}.",
        "",
        f"![rankings]({plot.name})",
        "",
    ]
    for dim, res in results.items():
        if "judgments" in res["invalid"]:
            lines.append(pairwise_table(dim, res, res["invalid"], (res["order_consistency"], res["order_pairs"])))
            bias = res.get("position_bias")
            lines.append(
                f"Position bias ({dim}): {'n/a' if bias is None else f'{bias:.1%}'} of valid verdicts prefer the "
                "story shown first (50% = none)."
            )
            if "logprobs" in res:
                lp = res["logprobs"]
                rates = ", ".join(
                    f"{sys} {lp['averaged_win_rate'][sys]:.3f} (mean P {lp['mean_p_better'][sys]:.3f})"
                    for sys in lp["averaged_win_rate"]
                )
                lines.append(
                    f"Logprob verdicts ({dim}): mean probability margin {lp['mean_margin']:.3f}; with both orders "
                    f"averaged over {lp['pairs_both_orders']} pairs, win rate {rates or 'n/a'}."
                )
        else:
            inv = res["invalid"]
            lines += [
                f"### TTCW ({cfg.protocol})",
                "",
                f"replies {inv['replies']}, **invalid {inv['invalid_replies']}**; stories {inv['stories']}, "
                f"with an invalid test {inv['stories_with_invalid_tests']} (left out of the rankings)",
                "",
                "| system | mean tests passed |",
                "|---|---|",
            ]
            lines += [f"| {s} | {v:.2f} |" for s, v in res["mean_score"].items()]
            lines.append(pairwise_table("rankings from per-prompt scores (higher score wins, equal = tie)", res))
    run.write_report("\n".join(lines + ["", DEFINITIONS, ""]), headline)


def validate(cfg: JudgeConfig) -> None:
    """Config errors found before any folder is made or model loaded."""
    if cfg.protocol not in PROTOCOLS:
        raise RlcwError(
            f"unknown protocol '{cfg.protocol}'", where="protocol", hint=f"use one of {', '.join(PROTOCOLS)}"
        )
    if not cfg.data.stories:
        raise RlcwError("no story files given", where="data.stories", hint="data.stories=[a.jsonl,b.jsonl]")
    if cfg.verdict not in VERDICTS:
        raise RlcwError(f"unknown verdict '{cfg.verdict}'", where="verdict", hint=f"use one of {', '.join(VERDICTS)}")
    if cfg.verdict == "logprobs" and cfg.protocol not in PAIRWISE_DIMENSIONS:
        raise RlcwError(
            "verdict=logprobs is for the pairwise protocols", where="verdict", hint="agents_room or litbench"
        )
    if cfg.verdict == "logprobs" and cfg.client.kind not in ("local", "openai"):
        raise RlcwError(
            f"verdict=logprobs needs client.kind=local or openai, not {cfg.client.kind}",
            where="client.kind",
            hint="replay re-reads text replies: use verdict=text",
        )
    if cfg.protocol == "ttcw_original" and not cfg.ttcw_tests:
        raise RlcwError(
            "the original TTCW prompt needs each test's expert background",
            where="ttcw_tests",
            hint="ttcw_tests=PATH to your copy of ttcw_all_tests.json (Chakrabarty et al. 2024; rlcw ships none)",
        )
    if cfg.client.kind == "replay" and not cfg.client.replies:
        raise RlcwError("a replay judge needs stored replies", where="client.replies", hint="client.replies=FILE")
    key, path = {"scripted": ("script", cfg.client.script), "replay": ("replies", cfg.client.replies)}.get(
        cfg.client.kind, (None, None)
    )
    if isinstance(path, str) and not Path(path).expanduser().is_file():
        raise RlcwError(
            f"file not found: {path}",
            where=f"client.{key}",
            hint="a relative path is read from the current folder (the shipped ones are under configs/judge/ of the "
            "clone: run from its root, or give the full path)",
        )
    c = cfg.client
    for key, value, low in (
        ("timeout_s", c.timeout_s, 1e-3),
        ("concurrency", c.concurrency, 1),
        ("max_retries", c.max_retries, 0),
    ):
        check_at_least(f"client.{key}", value, low)
    check_at_least("client.retry_base_s", c.retry_base_s, 0)
    check_at_least("client.retry_max_s", c.retry_max_s, 0)


def check_server(client: ClientConfig, cache_dir: Path) -> None:
    """One cheap request (GET <base_url>/models, the client's own timeout) to an OpenAI-compatible judge
    server, before the run folder is written: unreachable or timing out is an error naming client.base_url.
    Any HTTP answer counts as reachable (the key is not sent). Skipped when the reply cache holds replies
    (a re-run may need no call)."""
    if client.kind != "openai" or (cache_dir.is_dir() and any(cache_dir.iterdir())):
        return
    import httpx

    url = client.base_url.rstrip("/") + "/models"
    try:
        httpx.get(url, timeout=client.timeout_s)
    except httpx.TimeoutException:
        raise RlcwError(
            f"the judge server did not answer within client.timeout_s={client.timeout_s} s",
            where=f"client.base_url={client.base_url}",
            hint="start it (or wait until it has loaded), or raise client.timeout_s",
        ) from None
    except httpx.HTTPError as exc:
        raise RlcwError(
            f"cannot reach the judge server: {exc}",
            where=f"client.base_url={client.base_url}",
            hint="start an OpenAI-compatible server there (e.g. `vllm serve MODEL`), or fix client.base_url",
        ) from None


def drop_empty_cache(folder: Path) -> None:
    """Remove a reply cache this run opened that holds no reply yet: a user error before the first reply then
    leaves a run folder of start files only, which `stage_run` removes."""
    if not (folder / CACHE_FILE).is_file():
        return
    cache = ReplyCache(folder)
    empty = len(cache) == 0
    cache.close()
    if empty:
        shutil.rmtree(folder, ignore_errors=True)


def main(cfg: JudgeConfig) -> dict:
    validate(cfg)
    systems, prompts = load_systems(cfg.data.stories)  # story files only: before the run folder
    keys = list(prompts)[: cfg.data.max_prompts or None]
    pairs = build_pairs(systems, prompts, keys, cfg.data.baseline) if cfg.protocol in PAIRWISE_DIMENSIONS else None
    check_server(cfg.client, Path(cfg.client.cache_dir or Path(cfg.output_dir) / cfg.run_name / "cache"))
    with stage_run(cfg, "judge") as run:
        client_cfg = cfg.client
        if client_cfg.cache_dir is None:
            from dataclasses import replace

            client_cfg = replace(client_cfg, cache_dir=str(run.path / "cache"))
        try:
            client = make_client(client_cfg)
            try:
                if pairs is not None:
                    rows, results, panels = run_pairwise(cfg, client, pairs)
                else:
                    rows, results, panels = run_ttcw(cfg, client, systems, prompts, keys)
            finally:
                client.close()
        except RlcwError:
            if cfg.client.cache_dir is None:
                drop_empty_cache(run.path / "cache")
            raise
        verdicts = atomic_write_jsonl(run.path / "verdicts.jsonl", rows)
        rankings = atomic_write_json(run.path / "rankings.json", results)
        plot = plot_strengths(panels, run.path / "rankings.png")
        metrics = summary_metrics(cfg, results, client.stats)
        small = small_sample_note(len(keys), "prompts", "win rates and rankings")
        if small:
            print(f"[rlcw] warning: {small}", flush=True)
        write_report(run, cfg, results, client.stats, plot, done_line(metrics, {}, more=5), small)
        # summary.json only, no metrics.jsonl row: re-running the same judge in its folder is how an
        # interrupted evaluation continues from <run>/cache, so the folder must not count as another run's
        return run.write_summary(
            "completed",
            metrics,
            {"verdicts": verdicts, "rankings": rankings, "plot": plot, "report": run.path / "report.md"},
        )
