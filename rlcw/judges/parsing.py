"""Strict parsers for judge replies: a verdict is read, never guessed.

    parse_preference("Reasoning: ...\\nPreferred: B")      -> Parsed(value="B")          (LitBench)
    parse_side_by_side("Plot: A\\nCreativity: Same ...")   -> {"plot": Parsed("A"), ...}  (Agents' Room)
    parse_likert("... Therefore: [[A»B]]")                 -> Parsed(value=2)            (TTCW reference-based)
    parse_yes_no("... Answer: No")                         -> Parsed(value="No")         (TTCW baseline)
    parse_yes_no("Yes, the ending is earned. ...")         -> Parsed(value="Yes")        (TTCW original)

Policy (the same for every protocol):
- tolerated: markdown emphasis and code marks, case, spacing, brackets and quotes around a
  label, "Story A" / "Response A", JSON replies (``{"preferred": "A"}``, also inside ``` fences);
  for the Likert labels both `[[A>>B]]` and the paper's `[[A»B]]` (and `≫`).
- a verdict repeated identically counts once;
- invalid (value None, `reason` says why, `raw` keeps the reply): two different verdicts
  ("conflicting"), a hedge ("A or B", "yes and no", "both", "either"), an unknown label ("C",
  "tie" where the labels are A/B), no verdict at all.
- Agents' Room: each dimension is parsed on its own; the ones that parse are kept. If the reply
  contains the closing line "... for each dimension is", only the text after its last
  occurrence is read (the assessment before it may use the dimension names as headings). A
  dimension value that is long prose ("Plot: Story A has a clearer arc ...") is not a verdict;
  a short one that is not a label is an unknown label.
- Key lines (`Preferred:`, `Answer:`) may continue after the label ("Preferred: A (more vivid)"),
  unless the continuation names the other label ("A or B") - then it is a hedge.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

AR_DIMENSIONS = ("plot", "creativity", "development", "language_use", "overall")
LIKERT_LABELS = {"[[A»B]]": 2, "[[A>B]]": 1, "[[A=B]]": 0, "[[B>A]]": -1, "[[B»A]]": -2}


@dataclass
class Parsed:
    value: str | int | None  # the label ("A", "B", "Same", "Yes", "No") or Likert score; None = invalid
    reason: str | None = None  # why it is invalid (None when valid)
    raw: str = ""

    @property
    def valid(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict:
        return {"value": self.value, "valid": self.valid, "reason": self.reason}


# --- shared pieces -------------------------------------------------------------------------

_MARKDOWN = re.compile(r"[*`~#]+|(?<!\w)_+|_+(?!\w)")
_STRIP = " \t\"'[](){}<>.,;:!?*_`-\u2013\u2014"
_HEDGE_WORDS = re.compile(r"\b(either|both|neither|maybe|unsure|unclear|cannot decide|can't decide|depends)\b")


def _clean(text: str) -> str:
    """Drop markdown emphasis/code/heading marks (keeps underscores inside words like language_use)."""
    return _MARKDOWN.sub("", text)


def _norm(value: str) -> str:
    value = " ".join(value.split()).strip(_STRIP).lower()
    return re.sub(r"^(story|response)\s+", "", value)


def _json_objects(text: str) -> list[dict]:
    """Every JSON object in the text (code fences allowed), outermost first."""
    out, decoder, i = [], json.JSONDecoder(), 0
    body = re.sub(r"```(?:json)?", "", text)
    while (i := body.find("{", i)) != -1:
        try:
            obj, end = decoder.raw_decode(body, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(obj, dict):
            out.append(obj)
        i = end
    return out


def _json_values(text: str, keys: tuple[str, ...]) -> list[str]:
    """String values of the given keys (case/space-insensitive) in any JSON object of the reply."""
    found = []
    for obj in _json_objects(text):
        for key, value in obj.items():
            if re.sub(r"[\s\-]+", "_", str(key).strip().lower()) in keys and isinstance(value, (str, int, float)):
                found.append(str(value))
    return found


def _classify(value: str, labels: dict[str, str], *, leading: bool) -> tuple[str, str]:
    """("ok", label) | ("hedge", text) | ("unknown", text) | ("prose", text) for one candidate value."""
    v = _norm(value)
    if not v:  # "Preferred:" with nothing after it
        return "prose", v
    if v in labels:
        return "ok", labels[v]
    if _HEDGE_WORDS.search(v) or _joins_labels(v, labels):
        return "hedge", v
    if leading:  # "A (the one with more upvotes)" / "Yes, the ending is earned."
        original = re.sub(r"^(?i:story|response)\s+", "", " ".join(value.split()).strip(_STRIP))
        m = re.match(r"^(\w+)(?=$|[\s.,;:!()\"'\-\u2013\u2014])", original)
        # "a" in lower case starts prose ("a story with ..."); the A/B labels are capitals there
        if m and m.group(1).lower() in labels and not (labels is _AB and m.group(1).islower()):
            return "ok", labels[m.group(1).lower()]
    if len(v.split()) > 3:
        return "prose", v
    return "unknown", v


def _joins_labels(v: str, labels: dict[str, str]) -> bool:
    """True for "a or b", "yes and no", "a/b", "a vs b or same": two different labels joined."""
    for m in re.finditer(r"\b(\w+)\s*(?:or|and|/|&|vs\.?|versus)\s*(?:story\s+|response\s+)?(\w+)\b", v):
        first, second = labels.get(m.group(1)), labels.get(m.group(2))
        if first and second and first != second:
            return True
    return False


def _decide(candidates: list[tuple[str, str]], raw: str) -> Parsed:
    """Combine all candidates of one verdict slot by the policy above."""
    kinds = [k for k, _ in candidates if k != "prose"]
    if not kinds:
        return Parsed(None, "no verdict", raw)
    hedges = [v for k, v in candidates if k == "hedge"]
    if hedges:
        return Parsed(None, f"hedge: {hedges[0]!r}", raw)
    unknown = [v for k, v in candidates if k == "unknown"]
    if unknown:
        return Parsed(None, f"unknown label: {unknown[0]!r}", raw)
    labels = sorted({v for k, v in candidates if k == "ok"}, key=str)
    if len(labels) > 1:
        return Parsed(None, f"conflicting verdicts: {', '.join(map(str, labels))}", raw)
    return Parsed(labels[0], None, raw)


def _key_values(text: str, key_pattern: str) -> list[str]:
    """Values after `key:` / `"key":` / `key =` up to the end of the line."""
    pattern = re.compile(rf"(?im)\b(?:{key_pattern})[\"']?\s*[:=]\s*(.*)$")
    return [m.group(1) for m in pattern.finditer(_clean(text))]


# --- LitBench: Preferred: A|B --------------------------------------------------------------

_AB = {"a": "A", "b": "B"}


def parse_preference(text: str) -> Parsed:
    """LitBench verdict `Preferred: A|B` (or JSON {"preferred": ...})."""
    values = _key_values(text, r"preferred|preference|final verdict|verdict")
    values += _json_values(text, ("preferred", "preference", "verdict"))
    return _decide([_classify(v, _AB, leading=True) for v in values], text)


# --- TTCW baseline: Answer: Yes|No ---------------------------------------------------------

_YES_NO = {"yes": "Yes", "no": "No"}


# a verdict word is followed by the end, a newline, punctuation or a spaced dash ("Yes, ...", "No.",
# "Yes - ..."), never by a word ("No one ...", "No doubt ...") or a hyphen ("No-one")
_YN_FOLLOW = r"(?=\s*$|\s*\n|\s*[.,;:!)\]\"'\u201d\u2019]|\s+[-\u2013\u2014]|[\u2013\u2014])"
_LEADING_YN = re.compile(r"(?i)^(yes|no)" + _YN_FOLLOW)
_LEADING_YN_HEDGE = re.compile(r"(?i)^(yes|no)\W{0,3}(?:and|or|/|&)\W{0,3}(yes|no)\b")
_ANSWER_IS = re.compile(
    r"(?i)\b(?:final answer|answer|verdict)\s+(?:is|would be)\s*:?\s*[\"'\u201c]*(yes|no)" + _YN_FOLLOW
)
_LEAD_STRIP = " \t\r\n\"'\u201c\u201d\u2018\u2019>([{"


def _leading_yes_no(text: str) -> tuple[str, str] | None:
    """The verdict a reply starts with (after markdown, quotes, whitespace), as the original TTCW prompt asks."""
    head = _clean(text).lstrip(_LEAD_STRIP)
    if m := _LEADING_YN_HEDGE.match(head):
        return "hedge", m.group(0).lower()
    if m := _LEADING_YN.match(head):
        return "ok", _YES_NO[m.group(1).lower()]
    return None


def parse_yes_no(text: str) -> Parsed:
    """TTCW Yes/No verdict: the reply's first word (the original prompt: "Start your answer with Yes or
    No"), an `Answer: Yes|No` line, "the answer is No", or JSON; every one found must agree."""
    values = _key_values(text, r"final answer|answer|verdict")
    values += _json_values(text, ("answer", "final_answer", "verdict"))
    candidates = [_classify(v, _YES_NO, leading=True) for v in values]
    candidates += [("ok", _YES_NO[m.group(1).lower()]) for m in _ANSWER_IS.finditer(_clean(text))]
    lead = _leading_yes_no(text)
    if lead is not None:
        candidates.append(lead)
    elif not values and re.search(r"\byes\s*(?:and|or|/)\s*no\b|\bno\s*(?:and|or|/)\s*yes\b", _clean(text).lower()):
        return Parsed(None, "hedge: 'yes and no'", text)
    return _decide(candidates, text)


# --- TTCW reference-based: five-level Likert labels ----------------------------------------

_LIKERT = re.compile(r"\[\[?\s*(?:story\s*)?([ab])\s*(»|>>|≫|>|=|<<|«|≪|<)\s*(?:story\s*)?([ab])\s*\]\]?", re.I)
_LIKERT_BARE = re.compile(
    r"^\s*\[*\s*(?:story\s*)?([ab])\s*(»|>>|≫|>|=|<<|«|≪|<)\s*(?:story\s*)?([ab])\s*\]*\s*$", re.I
)
_STRONG = {"»", ">>", "≫"}


def _likert_value(first: str, op: str, second: str) -> tuple[str, str | int]:
    first, second = first.upper(), second.upper()
    if first == second:
        return "unknown", f"{first}{op}{second}"
    if op == "=":
        return "ok", 0
    if op in _STRONG | {">"}:
        size = 2 if op in _STRONG else 1
        return "ok", size if first == "A" else -size
    return "unknown", f"{first}{op}{second}"  # "A<B": not one of the five labels


def parse_likert(text: str) -> Parsed:
    """TTCW reference-based label -> +2 (A much better) ... -2 (B much better)."""
    clean = _clean(text)
    candidates = [_likert_value(*m.groups()) for m in _LIKERT.finditer(clean)]
    for value in _json_values(text, ("verdict", "label", "answer", "final_verdict")):
        m = _LIKERT_BARE.match(value)
        candidates.append(_likert_value(*m.groups()) if m else ("unknown", _norm(value)))
    return _decide(candidates, text)


# --- Agents' Room side-by-side: five dimensions, A | B | Same ------------------------------

_SAME = {
    "a": "A",
    "b": "B",
    "same": "Same",
    "the same": "Same",
    "about the same": "Same",
    "a is better": "A",
    "b is better": "B",
}
# a key starts a word, or follows a label run together with it ("Plot:ACreativity:A...", the paper's example)
_DIM_KEY = re.compile(
    r"(?:(?<![A-Za-z])|(?<=[AB])|(?<=Same))((?i:plot|creativity|development|language[\s_\-]*use|overall))[\"']?\s*[:=]\s*"
)
_CLOSING = re.compile(r"(?i)for each dimension is")


def _dim(name: str) -> str:
    return re.sub(r"[\s_\-]+", "_", name.lower())


def parse_side_by_side(text: str) -> dict[str, Parsed]:
    """Agents' Room verdicts per dimension (plot, creativity, development, language_use, overall)."""
    clean = _clean(text)
    closing = list(_CLOSING.finditer(clean))
    body = clean[closing[-1].end() :] if closing else clean
    candidates: dict[str, list[tuple[str, str]]] = {d: [] for d in AR_DIMENSIONS}
    keys = list(_DIM_KEY.finditer(body))
    for k, m in enumerate(keys):
        stop = keys[k + 1].start() if k + 1 < len(keys) else len(body)
        value = body[m.end() : stop].split("\n", 1)[0]
        candidates[_dim(m.group(1))].append(_classify(value, _SAME, leading=False))
    for obj in _json_objects(text):
        for key, value in obj.items():
            if _dim(str(key)) in candidates and isinstance(value, str):
                candidates[_dim(str(key))].append(_classify(value, _SAME, leading=False))
    return {d: _decide(candidates[d], text) for d in AR_DIMENSIONS}
