"""Label Studio export: tasks (JSON) and a labeling config (XML).

    write_labelstudio(packets, "study/labelstudio", study_id)   # tasks.json + config.xml

Import `tasks.json` into a project whose labeling interface is `config.xml`. Each task's data
holds study_id, packet_id, rater_id, item_id, prompt, story_a, story_b; each dimension is a required single
choice A / same / B (control names = rlcw's dimension keys), plus an optional comment. Label
Studio's JSON export of the project is read back by `rlcw study-ingest` (answers=export.json).
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import quoteattr

from rlcw.io import atomic_write_json, atomic_write_text
from rlcw.study.instructions import RUBRIC, text


def labeling_config() -> str:
    lines = [
        "<View>",
        f"  <Header value={quoteattr('Which story is better?')}/>",
        f'  <Text name="instructions" value={quoteattr(text())}/>',
        '  <Header value="Writing prompt"/>',
        '  <Text name="prompt" value="$prompt"/>',
        '  <View style="display: grid; grid-template-columns: 1fr 1fr; column-gap: 1em">',
        '    <View><Header value="Story A"/><Text name="story_a" value="$story_a"/></View>',
        '    <View><Header value="Story B"/><Text name="story_b" value="$story_b"/></View>',
        "  </View>",
    ]
    for key, title, help_text in RUBRIC:
        lines += [
            f"  <Header value={quoteattr(f'{title}: {help_text}')}/>",
            f'  <Choices name="{key}" toName="story_a" choice="single" required="true" showInline="true">',
            '    <Choice value="A" alias="A"/>',
            '    <Choice value="About the same" alias="same"/>',
            '    <Choice value="B" alias="B"/>',
            "  </Choices>",
        ]
    lines += ['  <TextArea name="comment" toName="story_a" placeholder="Comment (optional)"/>', "</View>"]
    return "\n".join(lines) + "\n"


def tasks(packets: list[dict], study_id: str) -> list[dict]:
    return [
        {
            "data": {
                "study_id": study_id,
                "packet_id": p["packet_id"],
                "rater_id": p["rater_id"],
                "item_id": it["item_id"],
                "prompt": it["prompt"],
                "story_a": it["story_a"],
                "story_b": it["story_b"],
            }
        }
        for p in packets
        for it in p["items"]
    ]


def write_labelstudio(packets: list[dict], folder: str | Path, study_id: str) -> dict[str, Path]:
    folder = Path(folder)
    return {
        "tasks": atomic_write_json(folder / "tasks.json", tasks(packets, study_id)),
        "config": atomic_write_text(folder / "config.xml", labeling_config()),
    }
