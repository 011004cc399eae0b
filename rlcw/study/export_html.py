"""One self-contained HTML page per packet (a rater's sitting): works offline, no external
resources; the annotator presses a button to download `answers-<packet_id>.json`.

    write_packet_html(packet, "study/html/rater01-s1.html", study="demo", study_id="3f2a...")

The page is `templates/packet.html` (package data) with the packet's JSON embedded in a
`<script type="application/json">` block ("<" escaped, so story text cannot close the tag).
"""

from __future__ import annotations

import html
import json
from importlib.resources import files
from pathlib import Path

from rlcw.io import atomic_write_text
from rlcw.study.instructions import INTRO, dimensions

PUBLIC_FIELDS = ("item_id", "prompt", "story_a", "story_b")


def render_packet(packet: dict, study: str, study_id: str) -> str:
    data = {
        "study_id": study_id,
        "packet_id": packet["packet_id"],
        "rater_id": packet["rater_id"],
        "study": study,
        "instructions": INTRO,
        "dimensions": dimensions(),
        "items": [{k: item[k] for k in PUBLIC_FIELDS} for item in packet["items"]],
    }
    blob = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    template = files("rlcw.study").joinpath("templates/packet.html").read_text(encoding="utf-8")
    return template.replace("__TITLE__", html.escape(packet["packet_id"])).replace("__PACKET_JSON__", blob)


def write_packet_html(packet: dict, path: str | Path, study: str, study_id: str) -> Path:
    return atomic_write_text(path, render_packet(packet, study, study_id))
