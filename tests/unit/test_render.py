"""The RM contract: RMSpec checks, rlcw_rm.json round trip, rendering and truncation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rlcw.errors import RlcwError
from rlcw.rm.render import SPEC_FILE, RMSpec, encode_for_rm, load_spec, render_rm_text, save_spec

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
        type="bt",
        base_model="some/base",
        input_template="plain",
        include_prompt=False,
        system_prompt="Judge.",
        max_length=256,
        truncation_side="right",
        pad_token="<pad>",
        extra={"note": "x", "n": 2},
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
    assert (
        render_rm_text(RMSpec(input_template="plain", include_prompt=False), tokenizer, PROMPT, STORY) == STORY + eos
    )


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


# --- generative RM layout ---


def _genrm(**kw):
    from rlcw.rm.render import GENRM_SYSTEM_PROMPT

    return RMSpec(type="genrm", system_prompt=GENRM_SYSTEM_PROMPT, **kw)


def test_split_budget_hand_examples():
    from rlcw.rm.render import split_budget

    assert split_budget(100, 100, 60) == (30, 30)  # both long: half each
    assert split_budget(10, 100, 60) == (10, 50)  # a short first story leaves its share to the second
    assert split_budget(100, 10, 60) == (50, 10)
    assert split_budget(5, 7, 60) == (5, 7)  # everything fits


def test_genrm_messages_order_and_prompt(tokenizer):
    from rlcw.rm.render import render_genrm_messages

    msgs = render_genrm_messages(_genrm(), PROMPT, "first tale", "second tale")
    assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
    user = msgs[1]["content"]
    assert user.index(PROMPT) < user.index("[Story A]\nfirst tale") < user.index("[Story B]\nsecond tale")
    assert PROMPT not in render_genrm_messages(_genrm(include_prompt=False), PROMPT, "a", "b")[1]["content"]


def test_genrm_prompt_is_cut_per_story_within_max_length(tokenizer):
    from rlcw.rm.render import encode_genrm_prompt

    long_a = " ".join(f"alpha{i}" for i in range(300)) + " ALPHA-END."
    ids = encode_genrm_prompt(_genrm(max_length=256), tokenizer, PROMPT, long_a, "Short B story.")
    text = tokenizer.decode(ids)
    assert len(ids) <= 256
    assert (
        "ALPHA-END." in text and "Short B story." in text
    )  # left truncation keeps the long story's ending; B untouched
    assert text.endswith("<|im_start|>assistant\n") and "[Story B]" in text and "Decide which one" in text
    with pytest.raises(RlcwError, match="leaves no room"):
        encode_genrm_prompt(_genrm(max_length=40), tokenizer, PROMPT, "a", "b")


def test_genrm_example_labels_and_verdict_tokens(tokenizer):
    from rlcw.rm.render import encode_genrm_example, verdict_token_ids

    a, b = verdict_token_ids(tokenizer)
    assert tokenizer.decode([a]) == " A" and tokenizer.decode([b]) == " B"
    ids, labels = encode_genrm_example(_genrm(max_length=256), tokenizer, PROMPT, "x y", "y x", "B")
    assert [t for t in labels if t != -100] == [b] and labels[-1] == ids[-1] == b  # only the verdict is learnt
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\nPreferred: B")


def test_genrm_cot_example_carries_a_capped_rationale(tokenizer):
    from rlcw.rm.render import encode_genrm_example

    spec = _genrm(max_length=256, extra={"cot": True, "max_rationale_tokens": 26})  # 26 - 16 = 10 rationale tokens
    why = "Story A keeps the order of events. " * 10 + "Preferred: B"
    _, labels = encode_genrm_example(spec, tokenizer, PROMPT, "x y", "y x", "A", why)
    answer = tokenizer.decode([t for t in labels if t != -100])
    assert answer.startswith("Reasoning: Story A keeps") and answer.endswith("\n\nPreferred: A<|im_end|>")
    assert answer.count("Preferred:") == 1  # the rationale's own verdict is cut
    with pytest.raises(RlcwError, match="no rationale"):
        encode_genrm_example(spec, tokenizer, PROMPT, "x", "y", "A", None)


def test_parse_verdict_prefix_and_spec_checks():
    from rlcw.rm.render import parse_verdict_prefix

    assert parse_verdict_prefix("Reasoning: ok.\n\nPreferred: A") == "Reasoning: ok.\n\nPreferred:"
    assert parse_verdict_prefix("Reasoning: no verdict") is None
    with pytest.raises(RlcwError, match="input_template=chat"):
        RMSpec(type="genrm", input_template="plain").check()
