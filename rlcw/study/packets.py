"""Blind, assign and write a whole study packet: what `rlcw study-export` and the "study"
evaluator both call.

    artifacts = export_packet(pairs, "runs/study_export", study="demo", seed=0)

Layout under `out_dir`:
    packets/html/<packet_id>.html     one offline page per rater sitting (send these)
    packets/packets.csv               the same items for survey platforms
    packets/labelstudio/              tasks.json + config.xml
    packets/instructions.txt          the rater instructions (Agents' Room rubric)
    key.json                          identities + packet assignment + SHA-256 (keep private)
"""

from __future__ import annotations

from pathlib import Path

from rlcw.io import atomic_write_text
from rlcw.study.blinding import blind, new_study_id, write_key
from rlcw.study.export_csv import write_packets_csv
from rlcw.study.export_html import write_packet_html
from rlcw.study.instructions import text as instructions_text
from rlcw.study.labelstudio import write_labelstudio
from rlcw.study.latin import assign

FORMATS = ("html", "csv", "labelstudio")


def export_packet(
    pairs: list[dict],
    out_dir: str | Path,
    *,
    study: str,
    key_path: str | Path | None = None,
    raters_per_item: int = 1,
    per_sitting: int = 5,
    attention_checks: int = 0,
    formats: tuple[str, ...] = FORMATS,
) -> dict:
    """Write the packet (key to `key_path`, default `<out_dir>/private/key.json`); returns
    {"counts": {...}, "artifacts": {name: path}, "study_id": str}."""
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown export format(s) {sorted(unknown)}; choose from {FORMATS}")
    if not pairs:
        raise ValueError("no pairs to export")
    out = Path(out_dir)
    study_id = new_study_id()
    items, key = blind(pairs, attention_checks=attention_checks)
    packets = assign(items, raters_per_item=raters_per_item, per_sitting=per_sitting)
    key_path = Path(key_path) if key_path is not None else out / "private" / "key.json"
    artifacts: dict[str, Path] = {
        "key": write_key(key_path, key, packets, {"study": study, "study_id": study_id}),
        "instructions": atomic_write_text(out / "packets" / "instructions.txt", instructions_text() + "\n"),
    }
    if "html" in formats:
        for packet in packets:
            write_packet_html(packet, out / "packets" / "html" / f"{packet['packet_id']}.html", study, study_id)
        artifacts["html"] = out / "packets" / "html"
    if "csv" in formats:
        artifacts["csv"] = write_packets_csv(packets, out / "packets" / "packets.csv", study_id)
    if "labelstudio" in formats:
        ls = write_labelstudio(packets, out / "packets" / "labelstudio", study_id)
        artifacts["labelstudio_tasks"], artifacts["labelstudio_config"] = ls["tasks"], ls["config"]
    counts = {
        "pairs": len(pairs),
        "items": len(items),
        "attention_checks": attention_checks,
        "packets": len(packets),
        "raters": len({p["rater_id"] for p in packets}),
        "max_items_per_sitting": max(len(p["items"]) for p in packets),
    }
    return {"counts": counts, "artifacts": artifacts, "study_id": study_id}
