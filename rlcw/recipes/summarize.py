"""Collect every run's summary.json under a folder into one table (CSV and markdown).

What: finds `**/summary.json` (the `rlcw.runs.SUMMARY_SCHEMA` every command writes), checks each
has the schema's keys, and writes one row per run: run, command, status, wall time, the sweep's
overrides (when `<folder>/sweep.json` from `rlcw sweep` is there) and every metric (union of
keys, blank where a run lacks one). `--command` keeps the rows of one command (a quickstart's folder also
holds its stages' summaries), `--metrics` the metric columns matching any of its shell-style patterns. Not here:
plots, statistics across seeds.

    rlcw summarize runs/sweeps/pairs-grid                  # writes runs/sweeps/pairs-grid/summary_table.{csv,md}, prints the markdown
    rlcw summarize runs --out results/all --json           # results/all.csv + .md, prints rows as JSON
    rlcw summarize runs/sweeps/quickstart-seeds --command quickstart --metrics "gate/*" "heldout/ended_short_delta*"
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import json
import math
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_text, read_json
from rlcw.runs import SUMMARY_SCHEMA

BASE_COLUMNS = ["run", "command", "status", "wall_time_s"]


def read_summary(path: Path) -> dict:
    data = read_json(path, "summary.json")
    if not isinstance(data, dict):
        raise RlcwError("summary.json must hold a JSON object", where=str(path))
    missing = [k for k in SUMMARY_SCHEMA if k not in data]
    if missing:
        raise RlcwError(
            f"summary.json lacks '{missing[0]}' (rlcw.runs.SUMMARY_SCHEMA)",
            where=str(path),
            hint="was it written by rlcw?",
        )
    if not isinstance(data["metrics"], dict):
        raise RlcwError("'metrics' must be an object", where=f"{path} field 'metrics'")
    return data


def find_summaries(root: Path) -> list[Path]:
    """summary.json files under root, skipping checkpoint folders (sorted by path)."""
    return sorted(p for p in root.rglob("summary.json") if "checkpoints" not in p.relative_to(root).parts)


def sweep_overrides(root: Path) -> dict[str, dict]:
    """run_name -> overrides from every sweep.json under root."""
    out: dict[str, dict] = {}
    for path in root.rglob("sweep.json"):
        try:
            for run in json.loads(path.read_text(encoding="utf-8")).get("runs", []):
                out[run["run_name"]] = run.get("overrides", {})
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise RlcwError(f"broken sweep.json: {exc}", where=str(path)) from None
    return out


def collect(root: str | Path) -> list[dict]:
    """One flat row per run under `root` (see the module docstring)."""
    root = Path(root)
    if not root.is_dir():
        raise RlcwError(
            "runs folder not found", where=str(root), hint="give the output_dir of the runs (e.g. runs/sweeps/NAME)"
        )
    paths = find_summaries(root)
    if not paths:
        raise RlcwError(
            "no summary.json under this folder",
            where=str(root),
            hint="every rlcw command writes <output_dir>/<run_name>/summary.json",
        )
    sweeps = sweep_overrides(root)
    rows = []
    for path in paths:
        s = read_summary(path)
        row = {
            "run": str(path.parent.relative_to(root)) or s["run_name"],
            "command": s["command"],
            "status": s["status"],
            "wall_time_s": s["wall_time_s"],
        }
        row.update({f"override:{k}": v for k, v in sweeps.get(s["run_name"], {}).items()})
        row.update(s["metrics"])
        rows.append(row)
    return rows


def select(rows: list[dict], command: str | None = None, metrics: list[str] | None = None) -> list[dict]:
    """The rows of `command` (all when None), each with the base and override columns and the metric columns that
    match any of the `metrics` patterns (fnmatch; all when None). A pattern that matches no column is an error."""
    if command is not None:
        kept = [r for r in rows if r["command"] == command]
        if not kept:
            found = sorted({r["command"] for r in rows})
            raise RlcwError(f"no run of command {command!r}", where="--command", hint=f"the runs' commands: {found}")
        rows = kept
    if metrics is None:
        return rows
    names = {k for r in rows for k in r if _is_metric(k)}
    for pattern in metrics:
        if not fnmatch.filter(names, pattern):
            some = ", ".join(sorted(names)[:8])
            raise RlcwError(f"no metric matches {pattern!r}", where="--metrics", hint=f"metrics include: {some}, ...")

    def keep(key: str) -> bool:
        return not _is_metric(key) or any(fnmatch.fnmatchcase(key, p) for p in metrics)

    return [{k: v for k, v in r.items() if keep(k)} for r in rows]


def _is_metric(key: str) -> bool:
    """A row's metric column (not a base column or a sweep override)."""
    return key not in BASE_COLUMNS and not key.startswith("override:")


def columns(rows: list[dict]) -> list[str]:
    """Base columns, then overrides, then metrics, each group sorted (a stable table)."""
    keys = {k for r in rows for k in r} - set(BASE_COLUMNS)
    overrides = sorted(k for k in keys if k.startswith("override:"))
    return BASE_COLUMNS + overrides + sorted(keys - set(overrides))


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def to_csv(rows: list[dict], cols: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({c: json.dumps(r[c]) if isinstance(r.get(c), (list, dict)) else r.get(c, "") for c in cols})
    return buf.getvalue()


def to_markdown(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c)).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlcw summarize", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir")
    parser.add_argument("--out", help="path prefix of the .csv and .md files (default RUNS_DIR/summary_table)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of the markdown table")
    parser.add_argument("--command", help="only the runs of this command (e.g. quickstart, not its stages)")
    parser.add_argument("--metrics", nargs="+", metavar="PATTERN", help="only metrics matching these (e.g. 'gate/*')")
    args = parser.parse_args(argv)
    rows = select(collect(args.runs_dir), args.command, args.metrics)
    cols = columns(rows)
    prefix = Path(args.out) if args.out else Path(args.runs_dir) / "summary_table"
    atomic_write_text(prefix.with_name(prefix.name + ".csv"), to_csv(rows, cols))
    markdown = to_markdown(rows, cols)
    atomic_write_text(prefix.with_name(prefix.name + ".md"), markdown)
    print(json.dumps(rows, indent=2, default=str) if args.json else markdown, end="" if not args.json else "\n")
    return 0
