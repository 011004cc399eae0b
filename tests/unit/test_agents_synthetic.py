"""Back-translation helpers: teacher prompts, parsing the split answer, locating sections and fallbacks."""

from __future__ import annotations

from rlcw.agents.synthetic import (
    locate_sections,
    parse_split,
    proportional_starts,
    split_prompt,
    teacher_planning_prompt,
)

STORY = (
    "\tAnna woke early. She packed.\n\tThe train left at noon. Rain fell hard on it.\n\tAt the bridge the train stopped. "
    "Anna jumped down.\n\tPolice came. They asked questions.\n\tAnna went home. She slept."
)
GOOD = (
    "[Exposition] Anna woke early.\n[Rising Action] The train left at noon.\n[Climax] At the bridge the train stopped.\n"
    "[Falling Action] Police came.\n[Resolution] Anna went home."
)


def test_teacher_prompts_carry_the_gold_story():
    p = teacher_planning_prompt("conflict", "Write about Anna.", STORY)
    assert p.startswith("Using the Creative Writing Task and the User-Written Response below")
    assert "[User-Written Response] Anna woke early." in p and "central conflict" in p
    assert "[Climax]" in split_prompt(STORY) and split_prompt(STORY).endswith("She slept.")


def test_parse_split_reads_headers_in_several_layouts():
    assert parse_split(GOOD)["falling_action"] == "Police came."
    loose = parse_split(
        'Sure!\n**Rising Action:** "The train left at noon."\nclimax - At the bridge the train stopped.'
    )
    assert loose == {"rising_action": "The train left at noon.", "climax": "At the bridge the train stopped."}


def test_exact_split():
    sections, method, found = locate_sections(STORY, parse_split(GOOD))
    assert (method, found) == ("exact", 5)
    assert sections["exposition"] == "Anna woke early. She packed."
    assert sections["climax"] == "At the bridge the train stopped. Anna jumped down."
    assert sections["resolution"] == "Anna went home. She slept."


def test_fuzzy_fallback_fills_only_the_missing_boundary():
    answer = GOOD.replace("The train left at noon.", "The train left at noon!")  # not verbatim, ratio 22*2/46 = 0.96
    sections, method, found = locate_sections(STORY, parse_split(answer))
    assert (method, found) == ("fuzzy", 4)
    assert sections["rising_action"] == "The train left at noon. Rain fell hard on it."


def test_bad_teacher_falls_back_to_proportional_split():
    answer = "[Exposition] Zebras dance.\n[Rising Action] Nothing here.\n[Climax] Not in it.\n[Falling Action] Nope.\n[Resolution] The end."
    sections, method, found = locate_sections(STORY, parse_split(answer))
    assert (method, found) == ("proportional", 0)
    # lines of 5, 9, 8, 5, 5 words: each boundary is the line start closest to k/5 of 32 words -> one line per section
    assert (
        sections["rising_action"] == "The train left at noon. Rain fell hard on it."
        and sections["falling_action"] == "Police came. They asked questions."
    )
    out_of_order = GOOD.replace("[Climax] At the bridge the train stopped.", "[Climax] Anna went home.")
    assert locate_sections(STORY, parse_split(out_of_order), fallback="proportional")[1] == "proportional"


def test_proportional_starts_on_unbalanced_lines():
    story = "a b c d e f g h\ni\nj\nk\nl m n o p q r s"  # 8, 1, 1, 1, 8 words: 5 lines -> one per part
    assert proportional_starts(story) == [story.index("i"), story.index("j"), story.index("k"), story.index("l")]
