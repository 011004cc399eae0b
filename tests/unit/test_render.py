"""The RM contract: RMSpec checks, rlcw_rm.json round trip, rendering and truncation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.render import SPEC_FILE, RMSpec, encode_for_rm, load_spec, render_rm_text, save_spec

PROMPT = "Write a story about a lighthouse keeper."
STORY = "The keeper climbed the stairs. The lamp was dark. He struck a match."
LONG_STORY = " ".join(f"Word{i} went home." for i in range(150)) + " THE END."


# --- spec ---

def test_default_spec_checks():
    spec = RMSpec()
    assert spec.check() is spec


@pytest.mark.parametrize(
    "change, word",
    [({"type": "ppo"}, "ppo"), ({"input_template": "html"}, "html"), ({"truncation_side": "middle"}, "middle")],
)
def test_check_rejects_bad_values(change, word):
    with pytest.raises(RlcwError) as info:
        RMSpec(**change).check()
    assert word in str(info.value)


def test_save_and_load_spec_round_trip(tmp_path):
    spec = RMSpec(
        type="bt", base_model="some/base", input_template="plain", include_prompt=False, system_prompt="Judge.",
        max_length=256, truncation_side="right", pad_token="<pad>", extra={"note": "x", "n": 2},
    )
    path = save_spec(spec, tmp_path / "rm")
    assert path == tmp_path / "rm" / SPEC_FILE
    assert load_spec(tmp_path / "rm") == spec
    assert json.loads(path.read_text(encoding="utf-8"))["max_length"] == 256


def test_save_spec_refuses_a_bad_spec(tmp_path):
    with pytest.raises(RlcwError):
        save_spec(RMSpec(type="nope"), tmp_path)
    assert not (tmp_path / SPEC_FILE).exists()


def test_load_spec_ignores_unknown_keys_and_checks_values(tmp_path):
    data = {**dataclasses.asdict(RMSpec(max_length=64)), "future_field": 1}
    (tmp_path / SPEC_FILE).write_text(json.dumps(data), encoding="utf-8")
    assert load_spec(tmp_path) == RMSpec(max_length=64)
    (tmp_path / SPEC_FILE).write_text(json.dumps({"truncation_side": "up"}), encoding="utf-8")
    with pytest.raises(RlcwError, match="truncation_side"):
        load_spec(tmp_path)


def test_load_spec_missing_file(tmp_path):
    with pytest.raises(RlcwError) as info:
        load_spec(tmp_path)
    assert "rlcw_rm.json" in str(info.value)
    assert str(tmp_path) in str(info.value)


# --- rendering ---

def test_render_chat_with_prompt(tokenizer):
    text = render_rm_text(RMSpec(), tokenizer, PROMPT, STORY)
    assert f"<|im_start|>user\n{PROMPT}<|im_end|>" in text
    assert f"<|im_start|>assistant\n{STORY}<|im_end|>" in text
    assert text.index(PROMPT) < text.index(STORY)


def test_render_chat_without_prompt(tokenizer):
    text = render_rm_text(RMSpec(include_prompt=False), tokenizer, PROMPT, STORY)
    assert PROMPT not in text
    assert "<|im_start|>user" not in text
    assert f"<|im_start|>assistant\n{STORY}<|im_end|>" in text


def test_render_chat_with_system_prompt(tokenizer):
    text = render_rm_text(RMSpec(system_prompt="Judge the story."), tokenizer, PROMPT, STORY)
    assert text.startswith("<|im_start|>system\nJudge the story.<|im_end|>")
    assert text.count("<|im_start|>system") == 1
    assert PROMPT in text and STORY in text


def test_render_plain_and_story_templates(tokenizer):
    eos = tokenizer.eos_token
    plain = render_rm_text(RMSpec(input_template="plain"), tokenizer, f"  {PROMPT} ", f"\n{STORY}\n")
    assert plain == f"Prompt: {PROMPT}\n\nStory: {STORY}{eos}"
    assert render_rm_text(RMSpec(input_template="story"), tokenizer, PROMPT, STORY + "  ") == STORY + eos
    assert render_rm_text(RMSpec(input_template="plain", include_prompt=False), tokenizer, PROMPT, STORY) == STORY + eos


# --- encoding and truncation ---

def test_encode_short_text_is_not_truncated(tokenizer):
    spec = RMSpec(max_length=4096)
    [ids] = encode_for_rm(spec, tokenizer, [PROMPT], [STORY])
    assert tokenizer.decode(ids) == render_rm_text(spec, tokenizer, PROMPT, STORY)


@pytest.mark.parametrize("side", ["left", "right"])
def test_encode_truncates_on_the_configured_side(tokenizer, side):
    full_spec = RMSpec(max_length=100_000, truncation_side=side)
    [full] = encode_for_rm(full_spec, tokenizer, [PROMPT], [LONG_STORY])
    assert len(full) > 64
    spec = RMSpec(max_length=64, truncation_side=side)
    [ids] = encode_for_rm(spec, tokenizer, [PROMPT], [LONG_STORY])
    assert len(ids) == 64
    if side == "left":
        assert ids == full[-64:]
        assert tokenizer.decode(ids).rstrip().endswith("THE END.<|im_end|>")  # the story's ending survives
    else:
        assert ids == full[:64]
        assert PROMPT in tokenizer.decode(ids)  # the start (system + prompt) survives


def test_encode_batch_keeps_order(tokenizer):
    spec = RMSpec(max_length=4096)
    a, b = encode_for_rm(spec, tokenizer, ["P1", "P2"], ["Story one.", "Story two is longer than one."])
    assert "Story one." in tokenizer.decode(a) and "Story two" in tokenizer.decode(b)


def test_encode_mismatched_lengths(tokenizer):
    with pytest.raises(ValueError, match="2 prompts but 1 stories"):
        encode_for_rm(RMSpec(), tokenizer, ["a", "b"], ["s"])


def test_check_rejects_non_positive_max_length():
    with pytest.raises(RlcwError, match="max_length"):
        RMSpec(max_length=0).check()


def test_load_spec_broken_json_is_an_rlcw_error(tmp_path):
    (tmp_path / SPEC_FILE).write_text('{"type": "bt",', encoding="utf-8")
    with pytest.raises(RlcwError) as info:
        load_spec(tmp_path)
    assert SPEC_FILE in str(info.value)
