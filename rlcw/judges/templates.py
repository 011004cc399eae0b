"""Judge prompt templates (versioned YAML files) and the 14 TTCW tests.

    tpl = load_template("litbench_writerly")             # built-in (rlcw/judges/templates/*.yaml)
    tpl = load_template("my_judge.yaml")                  # or your own file, same keys
    messages = tpl.render(prompt=p, story_a=a, story_b=b)

A template file holds `name`, `protocol` (agents_room | litbench | ttcw_baseline |
ttcw_original | ttcw_reference), `version` (part of every cache key: bump it when you change the text),
optional `system`, and `user` with `{placeholders}`. Only the placeholders listed in
PLACEHOLDERS are filled (story text with braces is safe).

The TTCW tests with their expert background text come from the user's copy of the released
`ttcw_all_tests.json` (Chakrabarty et al. 2024, BSD-3-Clause; rlcw ships none of its text):

    tests = load_ttcw_tests("ttcw_all_tests.json")   # TtcwTest(idx, dimension, question, background)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml

from rlcw.errors import RlcwError

TEMPLATE_DIR = Path(__file__).parent / "templates"
PLACEHOLDERS = ("prompt", "story", "story_a", "story_b", "dimension", "question", "background")
REQUIRED = {
    "agents_room": ("story_a", "story_b"),
    "litbench": ("story_a", "story_b"),
    "ttcw_baseline": ("story", "question"),
    "ttcw_original": ("story", "question", "background"),
    "ttcw_reference": ("story_a", "story_b"),
}
REQUIRED_ANY = {"ttcw_reference": ("question", "background")}  # at least one of these
LITBENCH_TEMPLATES = ("writerly", "minimal", "reddit_minimal", "reddit_verbose", "permuted")


class TtcwTest(NamedTuple):
    idx: int
    dimension: str
    question: str
    background: str = ""  # the expert background text (only from the user's tests file)


# The Torrance Test of Creative Writing (Chakrabarty et al. 2024, BSD-3-Clause), as listed in the
# reference-based TTCW paper's Table 3; questions paraphrased. (id, dimension, question)
TTCW_TESTS: tuple[TtcwTest, ...] = tuple(
    TtcwTest(*t)
    for t in (
        (1, "Fluency", "Does the ending feel natural and earned rather than arbitrary or abrupt?"),
        (2, "Fluency", "Do the story's elements work together as a unified, engaging and satisfying whole?"),
        (3, "Fluency", "Is scene balanced well against summary and exposition, without leaning too hard on either?"),
        (4, "Fluency", "Does the handling of time (compressing or stretching it) feel fitting and balanced?"),
        (5, "Fluency", "Does the story use idiom, metaphor or literary allusion in a sophisticated way?"),
        (6, "Flexibility", "Does the story balance interiority and exteriority in an emotionally flexible way?"),
        (7, "Flexibility", "Does the story take turns that are both surprising and fitting?"),
        (
            8,
            "Flexibility",
            "Does the story offer diverse perspectives, and are unlikeable characters' views shown convincingly and accurately?",
        ),
        (9, "Originality", "Is the story an original piece of writing, free of clichés?"),
        (10, "Originality", "Is the story original in its form or structure?"),
        (11, "Originality", "Would an average reader come away from this story with a unique and original idea?"),
        (
            12,
            "Elaboration",
            "Where the story relies on subtext, does the subtext enrich the setting rather than feel forced?",
        ),
        (13, "Elaboration", "Does the writer make the fictional world believable at the level of the senses?"),
        (
            14,
            "Elaboration",
            "Is every character developed with fitting complexity, none existing only for plot convenience?",
        ),
    )
)
ORIGINALITY_TESTS = tuple(t[0] for t in TTCW_TESTS if t[1] == "Originality")

_FIELD = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


@dataclass(frozen=True)
class Template:
    name: str
    protocol: str
    version: str
    user: str
    system: str | None = None
    source: str = ""

    def render(self, **fields: str) -> list[dict[str, str]]:
        """Chat messages with the placeholders filled (a missing required field is a bug -> KeyError)."""
        for key in REQUIRED[self.protocol]:
            if key not in fields:
                raise KeyError(f"template {self.name} needs '{key}'")

        def fill(text: str) -> str:
            return _FIELD.sub(lambda m: str(fields.get(m.group(1), m.group(0))), text)

        msgs = [{"role": "system", "content": fill(self.system)}] if self.system else []
        return msgs + [{"role": "user", "content": fill(self.user)}]


def builtin_templates() -> list[str]:
    return sorted(p.stem for p in TEMPLATE_DIR.glob("*.yaml"))


def _resolve(name: str) -> Path:
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    for candidate in (name, f"litbench_{name}"):
        if (TEMPLATE_DIR / f"{candidate}.yaml").is_file():
            return TEMPLATE_DIR / f"{candidate}.yaml"
    raise RlcwError(
        f"unknown judge template '{name}'",
        where="template",
        hint=f"built-in: {', '.join(builtin_templates())}; or give a path to a .yaml template file",
    )


def load_template(name: str, protocol: str | None = None) -> Template:
    """A built-in template by name (`writerly` = `litbench_writerly`) or a YAML file; checked against `protocol`."""
    path = _resolve(name)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
    except yaml.YAMLError as exc:
        raise RlcwError(f"cannot parse template YAML: {exc}", where=str(path)) from None
    if not isinstance(data, dict):
        raise RlcwError(
            "a template file must be a mapping", where=str(path), hint="keys: name, protocol, version, user"
        )
    for key in ("protocol", "version", "user"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise RlcwError(
                "missing or empty",
                where=f"{path} field '{key}'",
                hint="keys: name, protocol, version, user (system optional)",
            )
    if data["protocol"] not in REQUIRED:
        raise RlcwError(
            f"unknown protocol '{data['protocol']}'",
            where=f"{path} field 'protocol'",
            hint=f"use one of {', '.join(REQUIRED)}",
        )
    if protocol is not None and data["protocol"] != protocol:
        raise RlcwError(f"template is for protocol '{data['protocol']}', not '{protocol}'", where=str(path))
    missing = [k for k in REQUIRED[data["protocol"]] if "{" + k + "}" not in data["user"] + (data.get("system") or "")]
    text = data["user"] + (data.get("system") or "")
    if data["protocol"] in REQUIRED_ANY and not any("{" + k + "}" in text for k in REQUIRED_ANY[data["protocol"]]):
        missing.append(" or ".join(REQUIRED_ANY[data["protocol"]]))
    if missing:
        raise RlcwError(
            f"template lacks placeholder(s) {', '.join('{' + m + '}' for m in missing)}", where=f"{path} field 'user'"
        )
    return Template(
        name=str(data.get("name") or path.stem),
        protocol=data["protocol"],
        version=data["version"],
        user=data["user"],
        system=data.get("system"),
        source=str(path),
    )


# --- the user's TTCW tests file ------------------------------------------------------------

_TEST_FIELDS = {"ttcw_idx": int, "torrance_dimension": str, "question": str, "full_prompt": str}


def background_from_full_prompt(full_prompt: str) -> str:
    """The expert background of one test: `full_prompt` without its last two non-empty lines (the
    instruction line and the "Q) question" line), the rule of the original evaluation code."""
    lines = [line for line in full_prompt.strip().split("\n")]
    for _ in range(2):
        lines = "\n".join(lines[:-1]).strip().split("\n")
    return "\n".join(lines).strip()


def load_ttcw_tests(path: str | Path) -> list[TtcwTest]:
    """The 14 TTCW tests with background from a file in the released `ttcw_all_tests.json` layout:
    a JSON list of {"ttcw_idx", "torrance_dimension", "question", "full_prompt", ...}."""
    path = Path(path).expanduser()
    hint = 'a JSON list of {"ttcw_idx": 1, "torrance_dimension": ..., "question": ..., "full_prompt": ...}'
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise RlcwError(f"cannot read the TTCW tests file: {exc.strerror}", where=str(path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RlcwError(f"the TTCW tests file is not JSON: {exc}", where=str(path), hint=hint) from None
    if not isinstance(data, list) or not data:
        raise RlcwError("the TTCW tests file must be a non-empty JSON list", where=str(path), hint=hint)
    tests: dict[int, TtcwTest] = {}
    for i, item in enumerate(data):
        where = f"{path} item {i}"
        if not isinstance(item, dict):
            raise RlcwError("each test must be a JSON object", where=where, hint=hint)
        for key, kind in _TEST_FIELDS.items():
            value = item.get(key)
            if not isinstance(value, kind) or isinstance(value, bool) or (kind is str and not value.strip()):
                raise RlcwError(f"field '{key}' is missing or not a non-empty {kind.__name__}", where=where, hint=hint)
        idx = item["ttcw_idx"]
        if idx in tests:
            raise RlcwError(f"ttcw_idx {idx} appears twice", where=where)
        background = background_from_full_prompt(item["full_prompt"])
        if not background:
            raise RlcwError("full_prompt holds no background before its last two lines", where=where)
        tests[idx] = TtcwTest(idx, item["torrance_dimension"].strip(), item["question"].strip(), background)
    return [tests[k] for k in sorted(tests)]
