"""A CSV for survey platforms (Qualtrics, Prolific-hosted forms, spreadsheets): one row per
item a rater sees, in presentation order, plus the answer columns to fill in.

    write_packets_csv(packets, "study/packets.csv", study_id)

Columns: study_id, packet_id, rater_id, sitting, position, item_id, prompt, story_a, story_b, then one empty
column per dimension (plot, creativity, development, language_use, overall: answer A, same or B)
and comment. `rlcw study-ingest` reads the filled-in file back (answers=...csv).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from rlcw.io import atomic_write_text
from rlcw.study import DIMENSIONS

COLUMNS = (
    "study_id",
    "packet_id",
    "rater_id",
    "sitting",
    "position",
    "item_id",
    "prompt",
    "story_a",
    "story_b",
    *DIMENSIONS,
    "comment",
)


def write_packets_csv(packets: list[dict], path: str | Path, study_id: str) -> Path:
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for packet in packets:
        for pos, item in enumerate(packet["items"], start=1):
            writer.writerow(
                {
                    "study_id": study_id,
                    "packet_id": packet["packet_id"],
                    "rater_id": packet["rater_id"],
                    "sitting": packet["sitting"],
                    "position": pos,
                    "item_id": item["item_id"],
                    "prompt": item["prompt"],
                    "story_a": item["story_a"],
                    "story_b": item["story_b"],
                }
            )
    return atomic_write_text(path, buf.getvalue())
