"""Curate preference pairs from upvoted stories, the LitBench way (paper section 3.2).

What: reads raw posts (euclaise/WritingPrompts_preferences layout) or LitBench pair rows from a hub
id or a local jsonl/csv/parquet file (`rlcw.data.litbench`), applies the rules in
`rlcw.data.curate` (date cut-offs, >= 10 upvotes, >= 50 words, <= 2048 tokens of the target RM's
tokenizer, de-duplication, no story or prompt shared with the test split, pairs with an upvote gap
>= 25% whose better story was posted later, length-difference symmetrisation) and writes
`<run>/pairs/train.jsonl` and `<run>/pairs/test.jsonl` (preference records; upvotes, timestamps,
word counts, post id and content hashes in `meta`), `report.md` (counts after every rule, drops by
named reason, chosen-longer share before/after balancing), `length_balance.png` and summary.json.
The test split is curated first; train then excludes its stories and prompts.
Not here: downloading Reddit text (LitBench-Test on the hub holds comment ids only: rehydrate it
into the pair layout first), training (`rlcw train-rm data.train_file=<run>/pairs/train.jsonl`).

    rlcw curate --config configs/curate/litbench.yaml           # the paper's settings (hub ids)
    rlcw curate --config configs/curate/local.yaml train.source=raw.jsonl
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rlcw.data.curate import Rules, SplitResult, chosen_longer_share, curate_split, split_hashes
from rlcw.data.litbench import Post, parse_date, read_posts
from rlcw.data.records import write_preferences
from rlcw.errors import RlcwError
from rlcw.io import TABLE_SUFFIXES, read_table
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys
from rlcw.report import save_figure
from rlcw.runs import done_line


@dataclass
class SourceSection:
    source: str | None = None  # local .jsonl/.csv/.parquet/.json or a hub dataset id; None = none
    split: str = "train"  # hub split
    layout: str = "auto"  # auto | posts | pairs
    regroup_pairs: bool = False  # pairs layout: re-pair all stories of one prompt instead of keeping each row's pair
    max_rows: int | None = None  # first N rows read from the source (None = all)


@dataclass
class RulesSection:
    min_upvotes: int = 10  # stories with fewer upvotes are dropped
    min_words: int = 50  # stories with fewer words are dropped
    max_tokens: int | None = 2048  # None = no token filter
    tokenizer: str | None = "smollm2-135m-instruct"  # the target RM's tokenizer: alias, hub id or folder
    min_gap: float = 0.25  # (higher - lower) / higher upvotes
    max_pairs_per_post: int | None = None  # at most N pairs per post, drawn under the seed (None = all)
    bins: int = 100  # length-balancing histogram bins over the word difference (even, >= 2)
    balance: bool = True  # balance pairs so chosen is longer in half of the unequal-length pairs
    train_before: str | None = "2023-01-01"  # ISO date: train keeps stories posted strictly before
    test_from: str | None = "2023-01-02"  # ISO date: test keeps stories posted at or after


@dataclass
class CurateConfig(RunKeys):
    train: SourceSection = field(default_factory=lambda: SourceSection(source="euclaise/WritingPrompts_preferences"))
    test: SourceSection = field(default_factory=SourceSection)  # source None: test comes from train.source (by date)
    rules: RulesSection = field(default_factory=RulesSection)
    run_name: str = "curate"  # name of the run folder under output_dir


def load_rows(src: SourceSection) -> tuple[list[tuple[int, dict]], str]:
    """(row number, row) pairs and a name for messages, from a local file or a hub id."""
    path = Path(str(src.source)).expanduser()
    if path.suffix.lower() in TABLE_SUFFIXES or path.exists():
        rows, where = read_table(path), str(path)
    else:
        from datasets import load_dataset

        try:
            ds = load_dataset(src.source, split=src.split)
        except Exception as exc:
            raise RlcwError(
                f"cannot load hub dataset '{src.source}' (split '{src.split}'): {exc}",
                hint="check the id and your network, or pass a local .jsonl/.csv/.parquet file",
            ) from None
        rows, where = list(enumerate(ds, start=1)), f"{src.source}[{src.split}]"
    return rows[: src.max_rows or None], where


def build_token_counter(rules: RulesSection):
    if rules.max_tokens is None or rules.tokenizer is None:
        return None
    from rlcw.models import load_tokenizer

    tok = load_tokenizer(rules.tokenizer)
    return lambda texts: [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]] if texts else []


def build_rules(r: RulesSection) -> Rules:
    if r.bins < 2 or r.bins % 2:
        raise RlcwError(f"rules.bins must be an even number >= 2, got {r.bins}", where="rules.bins")
    if not 0 <= r.min_gap < 1:
        raise RlcwError(f"rules.min_gap must be in [0, 1), got {r.min_gap}", where="rules.min_gap")
    return Rules(r.min_upvotes, r.min_words, r.max_tokens, r.min_gap, r.max_pairs_per_post, r.bins, r.balance)


def read_source(src: SourceSection) -> tuple[list[Post], Counter, dict]:
    rows, where = load_rows(src)
    drops: Counter = Counter()
    examples: dict[str, list[str]] = {}
    posts, layout = read_posts(rows, where, src.layout, drops, src.regroup_pairs, examples)
    for reason, named in sorted(examples.items()):
        print(f"[rlcw] curate: {drops[reason]} row(s) dropped as {reason}, first: {', '.join(named)}", flush=True)
    info = {"source": where, "layout": layout, "rows": len(rows), "posts": len(posts), "first_dropped": examples}
    return posts, drops, info


def validate(cfg: CurateConfig) -> None:
    """Every config check, before the run folder is written and before any data loads."""
    if not cfg.train.source:
        raise RlcwError(
            "train.source is not set", where="train.source", hint="a hub id or a local .jsonl/.csv/.parquet file"
        )
    for key in ("train_before", "test_from"):
        if getattr(cfg.rules, key):
            parse_date(getattr(cfg.rules, key), f"rules.{key}")


def main(cfg: CurateConfig) -> dict:
    validate(cfg)
    r = cfg.rules
    with stage_run(cfg, "curate") as run:
        rules, count_tokens = build_rules(r), build_token_counter(r)
        before = parse_date(r.train_before, "rules.train_before") if r.train_before else None
        start = parse_date(r.test_from, "rules.test_from") if r.test_from else None
        train_posts, train_drops, train_info = read_source(cfg.train)
        results: dict[str, SplitResult] = {}
        infos = {"train": train_info}
        if cfg.test.source or start is not None:
            if not cfg.test.source and before is not None and start < before:
                raise RlcwError(
                    "rules.test_from is before rules.train_before: train and test would share dates",
                    where="rules.test_from",
                )
            if not cfg.test.source and before is None:
                raise RlcwError(
                    "test comes from train.source but rules.train_before is not set",
                    where="rules.train_before",
                    hint="set both cut-offs, e.g. rules.train_before=2023-01-01 rules.test_from=2023-01-02",
                )
            # a shared source's malformed rows are reported once, under train
            test_posts, test_drops, infos["test"] = (
                read_source(cfg.test) if cfg.test.source else (train_posts, Counter(), train_info)
            )
            results["test"] = curate_split(test_posts, rules, count_tokens, cfg.seed, "curate/test", start=start)
            results["test"].drops.update(test_drops)
        ex_stories, ex_prompts = split_hashes(results["test"].pairs) if "test" in results else (set(), set())
        results["train"] = curate_split(
            train_posts,
            rules,
            count_tokens,
            cfg.seed,
            "curate/train",
            end=before,
            exclude_stories=ex_stories,
            exclude_prompts=ex_prompts,
        )
        results["train"].drops.update(train_drops)
        if not results["train"].pairs:
            # the report (counts after each rule, drops by reason) is what tells the user which rule to relax
            text = report(results, infos, cfg).replace(
                "![length differences before/after balancing](length_balance.png)", ""
            )
            run.write_report(
                text + "\n**No training pairs survived curation**: relax the rule where the count falls to 0.\n"
            )
            raise RlcwError(
                "no training pairs survived curation", hint="see the counts in " + str(run.path / "report.md")
            )
        artifacts = {
            name: write_preferences(run.path / "pairs" / f"{name}.jsonl", res.pairs)
            for name, res in results.items()
            if res.pairs
        }
        artifacts["plot"] = plot_balance(results, run.path / "length_balance.png")
        metrics = summarize(results, infos)
        run.log(0, metrics)
        run.write_report(
            report(results, infos, cfg), done_line(metrics, {"train pairs": "train/pairs", "test pairs": "test/pairs"})
        )
        return run.write_summary("completed", metrics, artifacts)


def summarize(results: dict[str, SplitResult], infos: dict) -> dict:
    out: dict = {}
    for name, res in results.items():
        out[f"{name}/rows"] = infos[name]["rows"]
        out.update({f"{name}/after/{k}": v for k, v in res.counts.items()})
        out.update({f"{name}/dropped/{k}": v for k, v in sorted(res.drops.items()) if v})
        out[f"{name}/pairs"] = len(res.pairs)
        for when, diffs in (("before", res.diffs_before), ("after", res.diffs_after)):
            share = chosen_longer_share(diffs)
            if share is not None:
                out[f"{name}/chosen_longer_share_{when}"] = round(share, 4)
    return out


def plot_balance(results: dict[str, SplitResult], path: Path) -> Path:
    from rlcw.report import plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 3.2 * len(results)), squeeze=False)
    for row, name in zip(axes, sorted(results, key=lambda n: n != "train"), strict=False):
        res = results[name]
        top = max((abs(d) for d in res.diffs_before), default=1) or 1
        for ax, when, diffs in ((row[0], "before", res.diffs_before), (row[1], "after", res.diffs_after)):
            ax.hist(diffs, bins=100, range=(-top, top), color="tab:blue" if when == "before" else "tab:green")
            share = chosen_longer_share(diffs)
            ax.axvline(0, color="black", lw=0.8)
            ax.set_title(
                f"{name}, {when} balancing: {len(diffs)} pairs, chosen longer {share:.1%}"
                if share is not None
                else f"{name}, {when}: {len(diffs)} pairs"
            )
            ax.set_xlabel("chosen - rejected (words)")
    fig.tight_layout()
    return save_figure(fig, path, dpi=100)


STEP_TEXT = {
    "stories": "stories read (parseable)",
    "date_window": "in the split's date window",
    "min_upvotes": "upvotes >= min",
    "min_words": "words >= min",
    "max_tokens": "tokens <= max",
    "duplicates": "after removing duplicate stories",
    "split_overlap": "after removing stories/prompts of the test split",
    "candidate_pairs": "candidate pairs (same post)",
    "upvote_gap": "upvote gap >= min_gap",
    "later_is_better": "higher-voted story posted later",
    "per_post_cap": "after the per-post cap",
    "length_balance": "after length balancing",
}


def report(results: dict[str, SplitResult], infos: dict, cfg: CurateConfig) -> str:
    names = sorted(results, key=lambda n: n != "train")  # train first
    r = cfg.rules
    tok = f"`{r.tokenizer}`" if r.tokenizer and r.max_tokens is not None else "off"
    lines = ["# Curation (LitBench rules)", ""]
    lines += [
        f"- {n}: `{infos[n]['source']}` ({infos[n]['layout']} layout, {infos[n]['rows']} rows, {infos[n]['posts']} posts)"
        for n in names
    ]
    lines += [
        f"- rules: upvotes >= {r.min_upvotes}, words >= {r.min_words}, tokens <= {r.max_tokens} ({tok}), "
        f"gap >= {r.min_gap:.0%}, later is better, cap/post {r.max_pairs_per_post}, {r.bins} bins, "
        f"train before {r.train_before}, test from {r.test_from}, seed {cfg.seed}",
        "",
    ]
    lines += ["| step | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for step, text in STEP_TEXT.items():
        lines.append(f"| {text} | " + " | ".join(str(results[n].counts.get(step, "")) for n in names) + " |")
    lines += ["", "Dropped, by reason:", "", "| reason | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for reason in sorted({k for n in names for k, v in results[n].drops.items() if v}):
        lines.append(f"| {reason} | " + " | ".join(str(results[n].drops.get(reason, 0)) for n in names) + " |")
    own = [n for n in names if n == "train" or infos.get(n) is not infos.get("train")]  # a shared source once
    named = [(n, why, rows) for n in own for why, rows in sorted(infos.get(n, {}).get("first_dropped", {}).items())]
    if named:
        lines += ["", "First rows dropped, by reason (file:line):", ""]
        lines += [f"- {n} {reason}: {', '.join(rows)}" for n, reason, rows in named]
    lines += ["", "Chosen story longer (pairs of unequal length; the paper found 65.25% before balancing):", ""]
    for n in names:
        b, a = chosen_longer_share(results[n].diffs_before), chosen_longer_share(results[n].diffs_after)
        fmt = lambda x: "n/a" if x is None else f"{x:.2%}"  # noqa: E731
        lines.append(f"- {n}: {fmt(b)} before, {fmt(a)} after ({len(results[n].pairs)} pairs)")
    lines += ["", "![length differences before/after balancing](length_balance.png)", ""]
    return "\n".join(lines)
