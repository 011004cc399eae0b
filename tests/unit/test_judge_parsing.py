"""Strict judge-reply parsing: every expected value below was worked out by hand from the policy
in rlcw/judges/parsing.py (tolerate formatting; invalid on conflict, hedge, unknown label, nothing)."""

from __future__ import annotations

import pytest

from rlcw.judges.parsing import parse_likert, parse_preference, parse_side_by_side, parse_yes_no

# (reply, expected value or None, expected reason prefix when invalid)
PREFERENCE_CASES = [
    ("Reasoning: B builds tension.\nPreferred: B", "B", None),  # the paper's format
    ("**Preferred:** **A**", "A", None),  # markdown bold
    ("preferred :   b", "B", None),  # case and spacing
    ("Preferred: [A]", "A", None),  # brackets
    ("Preferred: Response B", "B", None),  # "Response B"
    ("Preferred: Story A.", "A", None),  # "Story A" + full stop
    ("2. Preferred: A (it would get more upvotes)", "A", None),  # numbered + parenthesis
    ('```json\n{"reasoning": "vivid", "preferred": "B"}\n```', "B", None),  # JSON in a fence
    ("Preferred: A\n...\nPreferred: A", "A", None),  # identical repeat counts once
    ("Preferred: A\nPreferred: B", None, "conflicting"),  # two different verdicts
    ("Preferred: [A or B]", None, "hedge"),  # template echoed
    ("Preferred: A/B", None, "hedge"),  # slash hedge
    ("Preferred: both are good", None, "hedge"),  # "both"
    ("Preferred: C", None, "unknown label"),  # unknown label
    ("Preferred: Tie", None, "unknown label"),  # no tie label in LitBench
    ("I think the first one is better.", None, "no verdict"),  # no verdict
    ("", None, "no verdict"),  # empty reply
    ("Preferred: a story with more tension", None, "no verdict"),  # lowercase prose, not a label
    ('{"preferred": "A"}\nPreferred: B', None, "conflicting"),  # JSON and text disagree
    ("Reasoning: ... Preferred:", None, "no verdict"),  # key without value
]


@pytest.mark.parametrize("reply,value,reason", PREFERENCE_CASES)
def test_preference(reply, value, reason):
    p = parse_preference(reply)
    assert p.value == value
    assert p.raw == reply
    if reason is None:
        assert p.valid and p.reason is None
    else:
        assert not p.valid and p.reason.startswith(reason)


LIKERT_CASES = [
    ("A: earned ending ... Therefore: [[A»B]]", 2, None),
    ("`[[A>>B]]`", 2, None),  # ASCII double arrow
    ("[[B≫A]]", -2, None),  # unicode much-greater
    ("[[ B > A ]]", -1, None),  # spacing
    ("[A=B]", 0, None),  # single brackets
    ("**[[A>B]]** and again [[A>B]]", 1, None),  # identical repeat
    ('{"verdict": "B>A"}', -1, None),  # JSON, bare label
    ("[[A»B]] or maybe [[A>B]]", None, "conflicting"),
    ("Options: [[A»B]], [[A>B]], [[A=B]], [[B>A]], [[B»A]]", None, "conflicting"),  # instruction echoed
    ("[[A<B]]", None, "unknown label"),  # not one of the five labels
    ("[[A>A]]", None, "unknown label"),
    ("Story A is slightly better.", None, "no verdict"),
]


@pytest.mark.parametrize("reply,value,reason", LIKERT_CASES)
def test_likert(reply, value, reason):
    p = parse_likert(reply)
    assert p.value == value
    assert (p.reason is None) if reason is None else p.reason.startswith(reason)


YES_NO_CASES = [
    ("The ending lands.\nAnswer: Yes", "Yes", None),
    ("answer: **NO**.", "No", None),
    ("No", "No", None),
    ('{"answer": "yes"}', "Yes", None),
    ("Answer: Yes, the ending is earned.", "Yes", None),
    ("Answer: Yes and no", None, "hedge"),
    ("Yes and no, it depends.", None, "hedge"),
    ("Answer: Yes/No", None, "hedge"),
    ("Answer: Partially", None, "unknown label"),
    ("Answer: Yes\nAnswer: No", None, "conflicting"),
    ("The story is fine.", None, "no verdict"),
]


@pytest.mark.parametrize("reply,value,reason", YES_NO_CASES)
def test_yes_no(reply, value, reason):
    p = parse_yes_no(reply)
    assert p.value == value
    assert (p.reason is None) if reason is None else p.reason.startswith(reason)


# Replies written for the original TTCW prompt (Chakrabarty et al.: "Start your answer with Yes or No.
# You can optionally then provide a short explanation"), hand-written in the shapes real judges use.
ORIGINAL_STYLE_CASES = [
    ("Yes", "Yes", None),  # the bare answer
    ("No.", "No", None),
    ("Yes.\n\nThe ending resolves the quarrel the opening sets up.", "Yes", None),
    ("No\n\nExplanation:\nThe closing scene arrives without any build-up.", "No", None),
    ("Yes, the story balances scene and summary well; both are used with care.", "Yes", None),  # "both" later
    ("No, the turns are neither surprising nor fitting.", "No", None),  # "neither" later is prose
    ("**Yes**, the sensory detail is vivid throughout.", "Yes", None),  # markdown
    ("**No.** The metaphors feel forced.", "No", None),
    ('"Yes." The world feels tangible.', "Yes", None),  # quoted
    ("> No - the characters exist to move the plot.", "No", None),  # blockquote, spaced dash
    ("  YES: every character has a history.", "Yes", None),  # case, leading space
    ("No\u2014the form is a plain linear account.", "No", None),  # em dash
    ("Yes. The ending is earned.\nAnswer: Yes", "Yes", None),  # agreeing answer line
    ("Yes. The answer is Yes because the ending is earned.", "Yes", None),
    # must stay invalid
    ("Yes, the ending lands.\n\nAnswer: No", None, "conflicting"),  # leading answer contradicted
    ("No. On reflection the answer is Yes.", None, "conflicting"),
    ("Yes and no: the ending is earned but abrupt.", None, "hedge"),
    ("Yes/No. It depends on the reader.", None, "hedge"),
    ("Yes, and no, it is hard to say.", None, "hedge"),
    ("No one could call this ending earned.", None, "no verdict"),  # "No" starts a sentence, not a verdict
    ("No-one in the story is unlikeable.", None, "no verdict"),
    ("Partially. The ending is earned but rushed.", None, "no verdict"),
    ("Mostly yes, though the middle drags.", None, "no verdict"),
    ("Content Blocked", None, "no verdict"),  # a refusal is no verdict
    ("Yesterday's events drive the plot.", None, "no verdict"),  # "Yes" inside a word
]


@pytest.mark.parametrize("reply,value,reason", ORIGINAL_STYLE_CASES)
def test_yes_no_original_style(reply, value, reason):
    p = parse_yes_no(reply)
    assert p.value == value, p.reason
    assert (p.reason is None) if reason is None else p.reason.startswith(reason)


def test_every_invalid_reply_of_the_corpus_stays_invalid_as_yes_no():
    """No invalid reply of any protocol's corpus becomes a Yes/No verdict (non-yes/no replies included)."""
    invalid = [r for cases in (PREFERENCE_CASES, LIKERT_CASES, YES_NO_CASES) for r, v, _ in cases if v is None]
    invalid += [r for r, v, _ in ORIGINAL_STYLE_CASES if v is None]
    for reply in invalid + [r for cases in (PREFERENCE_CASES, LIKERT_CASES) for r, _, _ in cases]:
        assert not parse_yes_no(reply).valid, reply


def _values(reply: str) -> dict:
    return {k: v.value for k, v in parse_side_by_side(reply).items()}


def test_side_by_side_paper_example_runs_together():
    assert _values("Plot:ACreativity:BDevelopment:SameLanguage Use:AOverall:A") == {
        "plot": "A",
        "creativity": "B",
        "development": "Same",
        "language_use": "A",
        "overall": "A",
    }


def test_side_by_side_keeps_dimensions_that_parse():
    reply = (
        "Plot: Story A has a clearer arc and a better ending than B.\n"  # prose heading before the closing line
        "Based on my assessment, the better story for each dimension is:\n"
        "**Plot:** A\nCreativity: About the same\nDevelopment: Story B\nLanguage Use: [A or B or Same]\nOverall: C\n"
    )
    parsed = parse_side_by_side(reply)
    assert {k: v.value for k, v in parsed.items()} == {
        "plot": "A",
        "creativity": "Same",
        "development": "B",
        "language_use": None,
        "overall": None,
    }
    assert parsed["language_use"].reason.startswith("hedge")
    assert parsed["overall"].reason.startswith("unknown label")
    assert parsed["overall"].raw == reply


def test_side_by_side_json_and_conflicts():
    reply = '{"plot": "A", "creativity": "B", "development": "Same", "language_use": "B", "overall": "A"}\nOverall: B'
    parsed = parse_side_by_side(reply)
    assert parsed["overall"].value is None and parsed["overall"].reason.startswith("conflicting")
    assert parsed["language_use"].value == "B" and parsed["plot"].value == "A"


def test_side_by_side_nothing_and_subwords():
    parsed = parse_side_by_side("The subplot: A is fine. I liked both.")
    assert all(p.value is None and p.reason == "no verdict" for p in parsed.values())
