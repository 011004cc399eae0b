"""`rlcw agreement FILE`: how well judge scores agree with human scores, per group and overall.

    rlcw agreement scores.csv                  # a table
    rlcw agreement scores.csv --json           # per-group values + mean_spearman, mean_kendall, mean_pairwise_accuracy
    rlcw agreement scores.csv --tie-rule strict

FILE is a CSV with the header `group,item,human_score,judge_score` (extra columns are ignored):
one row per rated item, e.g. group = a plot / prompt, item = the system whose story was rated.
Per group it reports Spearman (average ranks) and Kendall tau-b as scipy computes them (an
undefined value, e.g. a group with constant scores, counts as 0), and pairwise accuracy under a
stated tie rule (`half`: human-tied pairs skipped, a judge tie is half right; `strict`: a judge
tie is wrong; `exact`: all pairs, ties must match). Means are unweighted over groups. It also
reports Agents' Room's system-level (per-item-name means) and item-level (pooled rows)
Spearman correlations. Definitions: `rlcw.metrics.agreement`. It does not run any judge.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from rlcw.errors import RlcwError, location
from rlcw.io import read_table
from rlcw.metrics.agreement import TIE_RULES, group_agreement
from rlcw.metrics.bootstrap import small_sample_note

COLUMNS = ("group", "item", "human_score", "judge_score")


def _number(value, path: Path, row: int, column: str) -> float:
    where = location(path, row + 1, column)  # +1: the header is line 1
    if value is None or str(value).strip() == "":
        raise RlcwError("missing value", where=where, hint="every row needs group,item,human_score,judge_score")
    try:
        number = float(value)
    except ValueError:
        raise RlcwError(
            f"not a number: {value!r}", where=where, hint="scores must be numbers, e.g. 3 or 0.75"
        ) from None
    if not math.isfinite(number):
        raise RlcwError(f"not a finite number: {value!r}", where=where, hint="drop the row or give a real score")
    return number


def read_scores(path: str | Path) -> list[tuple[str, str, float, float]]:
    """Rows (group, item, human, judge) of an agreement CSV; errors name the line and column."""
    path = Path(path)
    if path.suffix.lower() != ".csv":
        raise RlcwError("expected a .csv file", where=str(path), hint="header: " + ",".join(COLUMNS))
    table = read_table(path)
    missing = [c for c in COLUMNS if c not in table[0][1]] if table else list(COLUMNS)
    if missing:
        raise RlcwError(
            f"missing column(s) {', '.join(missing)}",
            where=location(path, 1),
            hint="the header must be: " + ",".join(COLUMNS),
        )
    rows, seen = [], {}
    for row, rec in table:
        if None in rec:
            raise RlcwError(
                "more fields than the header has",
                where=location(path, row + 1),
                hint="quote text that contains commas",
            )
        for key in ("group", "item"):
            if rec[key] is None or not str(rec[key]).strip():
                raise RlcwError(
                    "missing value", where=location(path, row + 1, key), hint="every row needs a group and an item"
                )
        group, item = rec["group"].strip(), rec["item"].strip()
        if (group, item) in seen:
            raise RlcwError(
                f"item {item!r} appears twice in group {group!r} (first on line {seen[(group, item)]})",
                where=location(path, row + 1, "item"),
                hint="one row per item and group",
            )
        seen[(group, item)] = row + 1
        rows.append(
            (
                group,
                item,
                _number(rec["human_score"], path, row, "human_score"),
                _number(rec["judge_score"], path, row, "judge_score"),
            )
        )
    return rows


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_table(result: dict) -> str:
    lines = [f"{'group':<24} {'n':>4} {'spearman':>9} {'kendall':>9} {'pair_acc':>9}"]
    for name, g in result["groups"].items():
        lines.append(
            f"{name[:24]:<24} {g['n_items']:>4} {_fmt(g['spearman']):>9} {_fmt(g['kendall']):>9} "
            f"{_fmt(g['pairwise_accuracy']):>9}"
        )
    lines.append(
        f"{'mean (unweighted)':<24} {result['n_groups']:>4} {_fmt(result['mean_spearman']):>9} "
        f"{_fmt(result['mean_kendall']):>9} {_fmt(result['mean_pairwise_accuracy']):>9}"
    )
    for key in ("system_level", "item_level"):
        c = result[key]
        lines.append(f"{key.replace('_', '-')} Spearman: {_fmt(c['spearman'])} (p={_fmt(c['p_value'])}, N={c['n']})")
    lines.append(f"tie rule: {result['tie_rule']}; undefined correlations (constant groups) count as 0")
    if small := small_sample_note(result["item_level"]["n"], "rated items", "correlations"):
        lines.append(f"warning: {small}")
    return "\n".join(lines)


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlcw agreement", description=__doc__.split("\n")[0])
    parser.add_argument("file", help="CSV with header " + ",".join(COLUMNS))
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--tie-rule", choices=TIE_RULES, default="half", help="pairwise-accuracy tie rule (default half)"
    )
    args = parser.parse_args(argv)
    result = group_agreement(read_scores(args.file), tie_rule=args.tie_rule)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0
