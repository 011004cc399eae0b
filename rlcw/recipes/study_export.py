"""`rlcw study-export`: blinded human-study packets (offline HTML, survey CSV, Label Studio).

    rlcw study-export --config configs/study_export/policy_vs_base.yaml
    rlcw study-export data.mode=rm_best_worst data.stories=[runs/samples/stories.jsonl] data.rm_dir=runs/train_rm/model
    rlcw study-export data.mode=systems data.stories=[runs/tuned/samples/stories.jsonl,runs/base/samples/stories.jsonl]

Pairs (`data.mode`):
- `rm_best_worst`: per prompt, the reward model's best vs worst of the n samples in the story
  files (LitBench's human study); the systems are called `rm_best` and `rm_worst`.
- `systems`: two systems on the same prompts (policy vs base); `data.systems` picks two when the
  files hold more.
- `all_pairs`: every pair of systems per prompt (Agents' Room).
Pairs are blinded (A/B sides, item ids and order from `secrets`, never from `seed`), assigned in a Latin square (nobody sees a prompt
twice, at most `design.per_sitting` items per sitting, `design.raters_per_item` raters per item),
and written as one offline HTML page per sitting, a CSV and Label Studio tasks, each carrying the
study's random `study_id`. Identities live only in `<run>/private/key.json` (mode 0600, with the
study_id and a SHA-256 checksum): send `<run>/packets/`, keep `private/`.
Sample-size guidance is printed and saved. It does not recruit raters or host anything;
`rlcw study-ingest` reads the answers back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcw.data.records import read_stories
from rlcw.errors import RlcwError
from rlcw.io import atomic_write_text
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys
from rlcw.study.packets import FORMATS, export_packet
from rlcw.study.power import guidance
from rlcw.study.selection import all_system_pairs, best_worst_pairs, system_pairs

MODES = ("rm_best_worst", "systems", "all_pairs")


@dataclass
class StudyDataSection:
    mode: str = "systems"  # rm_best_worst | systems | all_pairs
    stories: list[str] = field(default_factory=list)  # story-record files (jsonl)
    systems: list[str] = field(default_factory=list)  # mode=systems: the two systems (empty = the two in the files)
    # BT reward-model folder: required for rm_best_worst; elsewhere adds RM scores to the key
    rm_dir: str | None = None
    rm_batch_size: int = 8  # stories per RM scoring batch
    max_pairs: int | None = None  # keep the first N pairs (prompt order)


@dataclass
class StudyDesignSection:
    raters_per_item: int = 1  # >= 2 gives Fleiss' kappa
    per_sitting: int = 5  # Agents' Room: at most five pairs in one sitting
    attention_checks: int = 0  # check items; one goes into every sitting when > 0
    formats: list[str] = field(default_factory=lambda: list(FORMATS))  # packets written: html | csv | labelstudio


@dataclass
class GuidanceSection:
    # target win rates of the sample-size table (vs 0.5)
    win_rates: list[float] = field(default_factory=lambda: [0.55, 0.6, 0.65, 0.7])
    alpha: float = 0.05  # two-sided significance level of the sample-size table
    power: float = 0.8  # statistical power of the sample-size table


@dataclass
class StudyExportConfig(RunKeys):
    data: StudyDataSection = field(default_factory=StudyDataSection)
    design: StudyDesignSection = field(default_factory=StudyDesignSection)
    guidance: GuidanceSection = field(default_factory=GuidanceSection)
    study: str = "rlcw-study"  # a name shown to raters and stored with the answers
    run_name: str = "study_export"  # name of the run folder under output_dir


def load_records(paths: list[str]) -> list[dict]:
    if not paths:
        raise RlcwError(
            "no story files given",
            where="data.stories",
            hint="data.stories=[path/to/stories.jsonl,...] (story records from `rlcw generate`)",
        )
    return [rec for path in paths for rec in read_stories(path)]


def score_records(records: list[dict], rm_dir: str, batch_size: int) -> list[float]:
    from rlcw.rm.scoring import load_rm

    scorer = load_rm(rm_dir, batch_size=batch_size)
    return scorer.score([r["prompt"] for r in records], [r["story"] for r in records])


def select_pairs(records: list[dict], data: StudyDataSection) -> list[dict]:
    if data.mode not in MODES:
        raise RlcwError(f"unknown mode {data.mode!r}", where="data.mode", hint=f"choose one of {', '.join(MODES)}")
    if data.mode == "rm_best_worst":
        if not data.rm_dir:
            raise RlcwError(
                "rm_best_worst needs a reward model", where="data.rm_dir", hint="data.rm_dir=runs/train_rm/model"
            )
        pairs = best_worst_pairs(records, score_records(records, data.rm_dir, data.rm_batch_size))
    elif data.mode == "all_pairs":
        pairs = all_system_pairs(records)
    else:
        systems = list(data.systems) or sorted({r["system"] for r in records})
        if len(systems) != 2:
            raise RlcwError(
                f"mode=systems compares two systems, found {systems}",
                where="data.systems",
                hint="data.systems=[tuned,base] or use data.mode=all_pairs",
            )
        pairs = system_pairs(
            [r for r in records if r["system"] == systems[0]],
            [r for r in records if r["system"] == systems[1]],
            where="data.stories",
        )
    if data.rm_dir and data.mode != "rm_best_worst":
        sides = [p[k] for p in pairs for k in ("first", "second")]
        for rec, score in zip(sides, score_records(sides, data.rm_dir, data.rm_batch_size), strict=False):
            rec["meta"] = {**(rec.get("meta") or {}), "rm_score": float(score)}
    pairs = pairs[: data.max_pairs or None]
    if not pairs:
        raise RlcwError(
            "no pairs to export",
            where="data.stories",
            hint="rm_best_worst needs >= 2 samples per prompt; systems need shared prompts",
        )
    return pairs


def main(cfg: StudyExportConfig) -> dict:
    with stage_run(cfg, "study-export") as run:
        pairs = select_pairs(load_records(cfg.data.stories), cfg.data)
        d = cfg.design
        try:
            result = export_packet(
                pairs,
                run.path,
                study=cfg.study,
                raters_per_item=d.raters_per_item,
                per_sitting=d.per_sitting,
                attention_checks=d.attention_checks,
                formats=tuple(d.formats),
            )
        except ValueError as exc:
            raise RlcwError(str(exc), where="design", hint="see `rlcw study-export --help`") from None
        g = cfg.guidance
        text = guidance(tuple(g.win_rates), g.alpha, g.power, n_pairs=len(pairs), raters_per_item=d.raters_per_item)
        print(text)
        artifacts = {**result["artifacts"], "guidance": atomic_write_text(run.path / "guidance.txt", text + "\n")}
        counts = result["counts"]
        run.write_report(
            f"# Study export: {cfg.study}\n\nmode `{cfg.data.mode}`; {counts['pairs']} pairs, {counts['raters']} raters, "
            f"{counts['packets']} packets (at most {counts['max_items_per_sitting']} items per sitting), "
            f"{counts['attention_checks']} attention checks.\n\nSend `packets/` to raters; keep `private/key.json` private.\n\n"
            f"```\n{text}\n```\n"
        )
        metrics = {k: float(v) for k, v in counts.items()}
        run.log(0, metrics)
        return run.write_summary("completed", metrics, artifacts)
