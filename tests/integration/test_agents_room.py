"""Agents' Room plan+write with the real embedded model through the CLI (tiny caps)."""

from __future__ import annotations

import subprocess
import sys

from rlcw.data.records import read_stories


def test_plan_write_with_the_embedded_model(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlcw",
            "generate",
            f"output_dir={tmp_path}",
            "run_name=ar",
            "generator=agents_room",
            "variant=plan_write",
            "data.max_prompts=1",
            "agents.planning_tokens=6",
            "agents.writing_tokens=8",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rec = read_stories(tmp_path / "ar" / "samples" / "stories.jsonl")[0]
    assert rec["system"] == "ar_plan_write" and rec["meta"]["agent_calls"] == 9
    assert rec["story"].count("\n") >= 4  # five writers joined by newlines (a writer may add its own)
    labels = [e["label"] for e in rec["meta"]["scratchpad"]]
    assert labels == [
        "Creative Writing Task",
        "Central Conflict",
        "Character Descriptions",
        "Setting",
        "Key Plot Points",
        "Exposition",
        "Rising Action",
        "Climax",
        "Falling Action",
        "Resolution",
    ]
