"""Read human-study answers back, validate them against the key, and unblind them.

    answers = load_answers(["answers-rater01-s1.json", "filled.csv", "labelstudio_export.json"])
    judgements, report = validate_and_unblind(answers, read_key("key.json"))

Answer files: the HTML page's download (`{"format": "rlcw-study-answers/1", ...}`), the survey
CSV filled in (columns of `export_csv.COLUMNS`), or Label Studio's JSON export of the tasks. A
label is A, B or same (also "A is better", "Story B", "About the same", "tie"; any case).

Validation collects every problem and raises one error listing them (file and entry each):
an item answered outside its packet or by another rater, the same
rater answering an item twice, items or dimensions missing from a returned packet, unknown labels,
and failed attention checks (every dimension must carry the expected label; with
`drop_failed_raters=True` such raters' answers are dropped and reported instead).
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.study import DIMENSIONS

FORMAT = "rlcw-study-answers/1"
_LABELS = {
    "a": "A",
    "a is better": "A",
    "story a": "A",
    "response a": "A",
    "b": "B",
    "b is better": "B",
    "story b": "B",
    "response b": "B",
    "same": "same",
    "about the same": "same",
    "tie": "same",
    "=": "same",
}


def normalise_label(value) -> str | None:
    """'A', 'B' or 'same'; None for anything else (reported as an unknown label)."""
    return _LABELS.get(str(value).strip().lower()) if value is not None else None


def _answer(where, packet_id, rater_id, item_id, labels, comment="", study_id=None) -> dict:
    return {
        "where": where,
        "study_id": study_id,
        "packet_id": packet_id,
        "rater_id": rater_id,
        "item_id": item_id,
        "labels": labels,
        "comment": comment or "",
    }


def _from_page(path: Path, data: dict) -> list[dict]:
    if not isinstance(data.get("answers"), list):
        raise RlcwError(
            "answers file has no 'answers' list", where=str(path), hint="use the file the study page downloaded"
        )
    return [
        _answer(
            f"{path} answer {k}",
            data.get("packet_id"),
            data.get("rater_id"),
            a.get("item_id"),
            {d: a[d] for d in DIMENSIONS if d in a},
            a.get("comment"),
            data.get("study_id"),
        )
        for k, a in enumerate(data["answers"], start=1)
    ]


def _from_labelstudio(path: Path, data: list) -> list[dict]:
    out = []
    for k, task in enumerate(data, start=1):
        task_data = task.get("data") or {}
        for ann in task.get("annotations") or []:
            if ann.get("was_cancelled"):
                continue
            labels, comment = {}, ""
            for res in ann.get("result") or []:
                value = res.get("value") or {}
                if res.get("from_name") in DIMENSIONS and value.get("choices"):
                    labels[res["from_name"]] = value["choices"][0]
                elif res.get("from_name") == "comment" and value.get("text"):
                    comment = " ".join(value["text"])
            out.append(
                _answer(
                    f"{path} task {k}",
                    task_data.get("packet_id"),
                    task_data.get("rater_id"),
                    task_data.get("item_id"),
                    labels,
                    comment,
                    task_data.get("study_id"),
                )
            )
    return out


def _from_csv(path: Path, text: str) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    need = {"rater_id", "item_id"}
    if rows and not need <= set(rows[0]):
        raise RlcwError(
            f"CSV lacks column(s) {', '.join(sorted(need - set(rows[0])))}",
            where=f"{path}:1",
            hint="fill in the packets.csv written by study-export",
        )
    return [
        _answer(
            f"{path}:{k + 1}",
            r.get("packet_id") or None,
            r["rater_id"],
            r["item_id"],
            {d: r[d] for d in DIMENSIONS if (r.get(d) or "").strip()},
            r.get("comment"),
            r.get("study_id") or None,
        )
        for k, r in enumerate(rows, start=1)
    ]


def _from_json(path: Path, text: str) -> list[dict]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RlcwError(f"broken JSON ({exc.msg})", where=f"{path}:{exc.lineno}") from None
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return _from_page(path, data)
    if isinstance(data, list):
        return _from_labelstudio(path, data)
    raise RlcwError(
        "not an answers file",
        where=str(path),
        hint=f"expected the study page's download (format {FORMAT}), a filled CSV or a Label Studio export",
    )


def load_answers(paths: list[str | Path]) -> list[dict]:
    """Answers from every file (a folder means every *.json / *.csv in it)."""
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(x for x in p.iterdir() if x.suffix in (".json", ".csv")) if p.is_dir() else [p]
    out: list[dict] = []
    for path in files:
        if not path.is_file():
            raise RlcwError(
                "answers file not found",
                where=str(path),
                hint="pass the downloaded answers-*.json files or their folder",
            )
        text = path.read_text(encoding="utf-8-sig")  # a BOM is not data
        found = _from_csv(path, text) if path.suffix == ".csv" else _from_json(path, text)
        out += [{**answer, "file": str(path)} for answer in found]
    if not out:
        raise RlcwError("no answers found", where=", ".join(map(str, paths)), hint="check the answers files")
    return out


def _check(answer: dict, key: dict, problems: list[str]) -> dict[str, str] | None:
    """The answer's normalised labels, or None after recording why it is unusable."""
    where, item_id, packet_id = answer["where"], answer["item_id"], answer["packet_id"]
    if item_id not in key["items"]:
        problems.append(f"{where}: unknown item id {item_id!r} (not in the key)")
        return None
    if packet_id is not None:
        packet = key["packets"].get(packet_id)
        if packet is None:
            problems.append(f"{where}: unknown packet id {packet_id!r}")
            return None
        if item_id not in packet["item_ids"]:
            problems.append(f"{where}: item {item_id!r} is not part of packet {packet_id!r}")
        if answer["rater_id"] != packet["rater_id"]:
            problems.append(
                f"{where}: packet {packet_id!r} belongs to {packet['rater_id']!r}, not {answer['rater_id']!r}"
            )
    labels = {}
    for dim in DIMENSIONS:
        if dim not in answer["labels"]:
            problems.append(f"{where}: item {item_id!r} has no answer for {dim!r}")
            continue
        label = normalise_label(answer["labels"][dim])
        if label is None:
            problems.append(f"{where}: unknown label {answer['labels'][dim]!r} for {dim!r} (use A, B or same)")
        labels[dim] = label
    return labels


def check_study_id(answers: list[dict], key: dict) -> None:
    """Refuse answers that belong to another study than the key's (one error naming both ids)."""
    expected = key.get("study_id")
    if expected is None:  # a key written before study ids existed
        return
    wrong = [a for a in answers if a.get("study_id") != expected]
    if not wrong:
        return
    found = sorted({str(a.get("study_id")) for a in wrong})
    files = sorted({a.get("file") or a["where"] for a in wrong})
    raise RlcwError(
        f"{len(wrong)} answer(s) belong to study_id {', '.join(found)}, but the key is for study_id {expected!r}"
        f" (study {key.get('study')!r})",
        where=", ".join(files[:5]) + (" ..." if len(files) > 5 else ""),
        hint="pass the key.json written with these packets (each export draws a new study_id); answers without "
        "a study_id come from an edited file or an old packet",
    )


def validate_and_unblind(answers: list[dict], key: dict, drop_failed_raters: bool = False) -> tuple[list[dict], dict]:
    """(judgements, report). A judgement: rater_id, item_id, prompt, kind, A/B sides (system,
    record_id, rm_score) and labels {dimension: A|B|same}. Raises one RlcwError listing every problem."""
    check_study_id(answers, key)
    problems: list[str] = []
    seen: dict[tuple, str] = {}
    answered: dict[str, set] = defaultdict(set)
    failed: dict[str, list[str]] = defaultdict(list)
    kept = []
    for ans in answers:
        entry = key["items"].get(ans["item_id"])
        # a check item may recur in a rater's sittings, so checks are told apart by packet too
        pair = (ans["rater_id"], ans["item_id"], ans["packet_id"] if entry and entry["kind"] == "attention" else None)
        if pair in seen:
            problems.append(
                f"{ans['where']}: rater {pair[0]!r} answered item {pair[1]!r} twice (first at {seen[pair]})"
            )
            continue
        seen[pair] = ans["where"]
        labels = _check(ans, key, problems)
        if labels is None:
            continue
        if ans["packet_id"] is not None:
            answered[ans["packet_id"]].add(ans["item_id"])
        if entry["kind"] == "attention":
            if any(v != entry["expected"] for v in labels.values()):
                failed[ans["rater_id"]].append(ans["where"])
            continue
        kept.append(
            {
                "rater_id": ans["rater_id"],
                "item_id": ans["item_id"],
                "prompt": entry["prompt"],
                "kind": entry["kind"],
                "A": entry["A"],
                "B": entry["B"],
                "labels": labels,
                "comment": ans["comment"],
            }
        )
    for packet_id, items in answered.items():
        missing = [i for i in key["packets"][packet_id]["item_ids"] if i not in items]
        if missing:
            problems.append(f"packet {packet_id!r}: {len(missing)} item(s) not answered: {', '.join(missing)}")
    if failed and not drop_failed_raters:
        problems += [f"{w}: rater {r!r} failed an attention check" for r, ws in failed.items() for w in ws]
    if problems:
        shown = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        hint = "fix or remove the offending answers"
        if failed and not drop_failed_raters:
            hint += "; set drop_failed_raters=true to drop raters who failed attention checks"
        raise RlcwError(f"{len(problems)} problem(s) in the answers:\n  {shown}", where="study answers", hint=hint)
    kept = [j for j in kept if j["rater_id"] not in failed]
    report = {
        "answers": len(answers),
        "judgements": len(kept),
        "raters": len({j["rater_id"] for j in kept}),
        "dropped_raters": sorted(failed),
        "packets_returned": len(answered),
        "packets_not_returned": sorted(set(key["packets"]) - set(answered)),
        "items_unrated": sum(
            1 for i, e in key["items"].items() if e["kind"] != "attention" and i not in {j["item_id"] for j in kept}
        ),
    }
    return kept, report
