"""Surface metrics of story files, one row per system (the Agents' Room paper's Table 2).

Reads story-record jsonl files (`rlcw.data.records`; a bad record is an error naming file, line
and field), groups the records of all files by `system`, and prints a markdown table of the
systems side by side, or JSON (`--json`: system -> metrics). Metric definitions and their
calibration against the paper: `rlcw.metrics.surface`. Not here: judging quality (`rlcw judge`).

    rlcw surface runs/gen_e2e/samples/stories.jsonl runs/gen_pw/samples/stories.jsonl
    rlcw surface a.jsonl b.jsonl --json --out table.json
    rlcw surface a.jsonl --bertscore roberta-large      # optional extra: needs `pip install bert-score`
    rlcw surface --tmas ../shared/data/tell-me-a-story --tmas-split validation a.jsonl   # + the human stories
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlcw.data.records import read_stories
from rlcw.errors import RlcwError
from rlcw.io import atomic_write_text
from rlcw.metrics.surface import markdown_table, system_metrics


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlcw surface", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="story-record jsonl files")
    p.add_argument("--json", action="store_true", help="print JSON (system -> metrics) instead of markdown")
    p.add_argument("--out", help="also write the output to this file")
    p.add_argument(
        "--bertscore", metavar="MODEL", help="add BERTScore F1 with this model (needs the bert_score package)"
    )
    p.add_argument(
        "--tmas", metavar="SOURCE", help="add TELL ME A STORY human stories (folder, file or hub id) as system 'human'"
    )
    p.add_argument("--tmas-split", action="append", help="split(s) of --tmas (repeatable; default validation)")
    p.add_argument("--same-prompts", action="store_true", help="keep only prompts (record ids) every system has")
    return p


def group_by_system(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["system"], []).append(r)
    return out


def restrict_to_shared_ids(groups: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Only the record ids every system has (inter-story repetition depends on the set compared)."""
    shared = set.intersection(*(set(r["id"] for r in rs) for rs in groups.values()))
    if not shared:
        raise RlcwError("the systems share no record id", hint="drop --same-prompts or generate on the same prompts")
    return {name: [r for r in rs if r["id"] in shared] for name, rs in groups.items()}


def surface_table(
    records: list[dict], bertscore_model: str | None = None, same_prompts: bool = False
) -> dict[str, dict[str, float]]:
    """system -> Table 2 metrics, systems in first-seen order."""
    groups = group_by_system(records)
    if same_prompts:
        groups = restrict_to_shared_ids(groups)
    return {name: system_metrics(rs, bertscore_model) for name, rs in groups.items()}


def cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not args.files and not args.tmas:
        raise RlcwError("no story files given", hint="rlcw surface FILE [FILE ...] [--json]")
    records: list[dict] = []
    if args.tmas:
        from rlcw.data.tmas import load_tmas

        humans = load_tmas(args.tmas, args.tmas_split or ["validation"])
        records += [{k: v for k, v in r.items() if k != "reference"} for r in humans]  # a story is its own reference
    for f in args.files:
        records += read_stories(Path(f))
    table = surface_table(records, args.bertscore, args.same_prompts)
    text = json.dumps(table, indent=2) + "\n" if args.json else markdown_table(table)
    if args.out:
        atomic_write_text(args.out, text)
    print(text, end="")
    return 0
