"""Judge prompt templates (versioned YAML files) and the 14 TTCW tests.

    tpl = load_template("litbench_writerly")             # built-in (rlcw/judges/templates/*.yaml)
    tpl = load_template("my_judge.yaml")                  # or your own file, same keys
    messages = tpl.render(prompt=p, story_a=a, story_b=b)

A template file holds `name`, `protocol` (agents_room | litbench | ttcw_baseline |
ttcw_reference), `version` (part of every cache key: bump it when you change the text),
optional `system`, and `user` with `{placeholders}`. Only the placeholders listed in
PLACEHOLDERS are filled (story text with braces is safe).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from rlcw.errors import RlcwError

TEMPLATE_DIR = Path(__file__).parent / "templates"
PLACEHOLDERS = ("prompt", "story", "story_a", "story_b", "dimension", "question")
REQUIRED = {
    "agents_room": ("story_a", "story_b"),
    "litbench": ("story_a", "story_b"),
    "ttcw_baseline": ("story", "question"),
    "ttcw_reference": ("story_a", "story_b", "question"),
}
LITBENCH_TEMPLATES = ("writerly", "minimal", "reddit_minimal", "reddit_verbose", "permuted")

# The Torrance Test of Creative Writing (Chakrabarty et al. 2024, BSD-3-Clause), as listed in the
# reference-based TTCW paper's Table 3; questions paraphrased. (id, dimension, question)
TTCW_TESTS: tuple[tuple[int, str, str], ...] = (
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
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
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
