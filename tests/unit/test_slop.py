"""Slop maths with hand-worked counts, and the `type: slop` reward term."""

import json

import pytest

from rlcw.errors import RlcwError
from rlcw.metrics.slop import (
    SlopBaseline,
    count_ngrams,
    overrepresented,
    slop_change,
    slop_score,
    smoothed_ratio,
)
from rlcw.rewards.factory import build_rewards
from rlcw.rewards.slop import SlopReward, load_phrases


def test_count_ngrams_counts_totals_and_document_frequency():
    c = count_ngrams(["The cat sat.", "the cat ran"], orders=(1, 2))
    assert c.counts[1] == {"the": 2, "cat": 2, "sat": 1, "ran": 1}
    assert c.totals == {1: 6, 2: 4}
    assert c.counts[2] == {"the cat": 2, "cat sat": 1, "cat ran": 1}
    assert c.docs[2]["the cat"] == 2
    # both texts answer one prompt: one document
    assert count_ngrams(["the cat sat", "the cat ran"], orders=(2,), groups=["p", "p"]).docs[2]["the cat"] == 1
    with pytest.raises(ValueError, match="group labels"):
        count_ngrams(["a"], groups=["p", "q"])


def test_smoothed_ratio_by_hand():
    # p_model = (4 + 1) / (10 + 5) = 1/3; p_human = (0 + 1) / (20 + 5) = 1/25 -> 25/3
    assert smoothed_ratio(4, 10, 0, 20, 5) == pytest.approx(25 / 3)
    assert smoothed_ratio(2, 10, 2, 10, 7) == pytest.approx(1.0)


def test_overrepresented_by_hand():
    model = count_ngrams(["a b a b", "a b c"], orders=(2,))  # a b: 3 (2 texts), b a: 1, b c: 1; N = 5
    human = count_ngrams(["a c", "c a"], orders=(2,))  # a c: 1, c a: 1; N = 2; V = 5
    top = overrepresented(model, human, min_count=3, min_docs=2)
    # a b: (3 + 1) / (5 + 5) over (0 + 1) / (2 + 5) = 0.4 x 7 = 2.8
    assert [(p.text, round(p.ratio, 6), p.model_count, p.human_count, p.docs) for p in top] == [("a b", 2.8, 3, 0, 2)]
    loose = overrepresented(model, human, min_count=1, min_docs=1)
    # b a and b c: (1 + 1) / 10 x 7 = 1.4 each; a tie is broken by the text
    assert [(p.text, round(p.ratio, 6)) for p in loose] == [("a b", 2.8), ("b a", 1.4), ("b c", 1.4)]
    assert [p.text for p in overrepresented(model, human, min_count=1, min_docs=1, top_k=1)] == ["a b"]
    # a phrase humans use as often as the model is not over-represented
    same = count_ngrams(["a b a b", "a b c"], orders=(2,))
    assert overrepresented(model, same, min_count=1, min_docs=1, min_ratio=1.0) == []


def test_slop_score_by_hand():
    # tokens a b x a b c (6): "a b" covers words 1, 2, 4, 5 and "c" word 6 -> 5 of 6 words
    assert slop_score("A b, x a b c!", ["a b", "c"]) == pytest.approx(500 / 6)
    assert slop_score("A b, x a b c!", ["a b"]) == pytest.approx(400 / 6)
    assert slop_score("a b c", ["a b", "b c"]) == pytest.approx(100.0)  # overlapping phrases count a word once
    assert slop_score("nothing here", ["a b"]) == 0.0
    assert slop_score("", ["a b"]) == 0.0


def test_baseline_scores_against_the_batch_fingerprint():
    human = ["the dog ran home", "a man walked in the rain"]
    base = SlopBaseline(human, orders=(2,), min_count=2, min_docs=2)
    texts = ["it was a tapestry of light", "a tapestry of dreams it was", "the dog ran"]
    fp = base.fingerprint(texts)
    assert {p.text for p in fp} == {"a tapestry", "tapestry of", "it was"}
    # story 1: it was / a tapestry / tapestry of cover 5 of its 6 words (not "light")
    assert base.scores(texts) == pytest.approx([500 / 6, 500 / 6, 0.0])
    with pytest.raises(ValueError, match="no words"):
        SlopBaseline(["", "!!"])


def _human_file(tmp_path):
    rows = [
        {"id": f"h{i}", "prompt": "p", "story": s, "system": "human"}
        for i, s in enumerate(["the dog ran home", "a man walked in the rain"])
    ]
    path = tmp_path / "human.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_slop_reward_batch_fingerprint_and_log_metric(tmp_path):
    reward = SlopReward(human=str(_human_file(tmp_path)), orders=[2], min_count=2, min_docs=2)
    logged = {}
    prompts = ["p1", "p2", "p2"]
    completions = [
        [{"role": "assistant", "content": "it was a tapestry of light"}],
        [{"role": "assistant", "content": "a tapestry of dreams it was"}],
        [{"role": "assistant", "content": "the dog ran"}],
    ]
    got = reward(prompts, completions, log_metric=lambda k, v: logged.__setitem__(k, v))
    assert got == pytest.approx([500 / 6, 500 / 6, 0.0])
    assert logged == {"slop/score": pytest.approx(1000 / 18), "slop/phrases": 3.0}
    # the same phrases within one prompt's completions only: one document, no slop
    assert reward(["p", "p", "p"], completions) == [0.0, 0.0, 0.0]


def test_slop_reward_fixed_list_through_the_factory(tmp_path):
    (tmp_path / "slop.txt").write_text("A Tapestry\n\nshivers down\n")
    spec = {"type": "slop", "weight": -0.5, "human": str(_human_file(tmp_path)), "phrases": str(tmp_path / "slop.txt")}
    funcs, weights = build_rewards({"slop": spec})
    assert weights == [-0.5] and funcs[0].__name__ == "slop"
    assert funcs[0](["p"], ["A tapestry, and shivers down my spine"]) == pytest.approx([400 / 7])


def test_bad_phrase_lists_and_options_are_clear_errors(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(RlcwError, match="empty"):
        load_phrases(tmp_path / "empty.txt")
    (tmp_path / "bad.json").write_text('{"a": 1}')
    with pytest.raises(RlcwError, match="JSON list"):
        load_phrases(tmp_path / "bad.json")
    with pytest.raises(RlcwError, match="cannot read"):
        load_phrases(tmp_path / "missing.txt")
    with pytest.raises(RlcwError, match="orders"):
        build_rewards({"slop": {"type": "slop", "orders": [0]}})


def test_slop_change_pairs_prompts_and_scores_both_against_one_fingerprint():
    base = SlopBaseline(["the dog ran home", "a man walked in the rain"], orders=(2,), min_count=2, min_docs=2)
    start = ["the dog ran", "a man walked", "a dog sat", "a cat sat"]
    tuned = ["a tapestry of light", "a tapestry of night", "a tapestry of dust", "the cat sat"]
    got = slop_change(base, start, tuned, ["p1", "p2", "p3", "p4"], n_resamples=200)
    # pooled fingerprint: "a tapestry" and "tapestry of" (3 uses in 3 prompts, never human); tuned stories 1-3:
    # 3 of 4 words covered -> 75; story 4 and every start story: 0
    assert got["phrases"] == ["a tapestry", "tapestry of"]
    assert got["slop_start"] == 0.0 and got["slop_final"] == pytest.approx(56.25)
    assert got["slop_delta"] == pytest.approx(56.25) and got["n_prompts"] == 4
    assert 0.0 <= got["slop_delta_lo"] <= 56.25 <= got["slop_delta_hi"] <= 75.0
    assert [p.text for p in got["top_tuned"]] == ["a tapestry", "tapestry of"] and got["top_start"] == []


def test_quickstart_slop_lines_read_the_heldout_samples(tmp_path):
    from rlcw.pipelines.quickstart_gates import held_out_slop
    from rlcw.pipelines.quickstart_report import slop_lines, slop_warning

    (tmp_path / "heldout").mkdir()
    # a raw U+2028 (generated stories hold them; the held-out writer keeps non-ASCII raw) is not a line break
    human_like = ["The dog ran home.", "One man walked in.", "Rain fell all night.", "She sang\u2028by the sea."]
    start = [{"prompt_id": f"p{i}", "story": s} for i, s in enumerate(human_like)]
    tuned = [{"prompt_id": f"p{i}", "story": "A tapestry of light, a testament to hope."} for i in range(4)]
    for name, rows in (("start", start), ("tuned", tuned)):
        (tmp_path / "heldout" / f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        )
    change = held_out_slop(tmp_path, n_resamples=100)
    lines = slop_lines(change)
    assert (
        lines[0].startswith("Slop (% of words inside phrases over-used")
        and "start 0.00" in lines[0]
        and "over 4 prompts" in lines[0]
    )
    assert "'tapestry' (" in lines[3] and "x, 4 uses)" in lines[3]
    assert lines[2].endswith("none")  # no start phrase is used 3 times in 2 prompts
    # every tuned story is slop, every start story clean: the rise is warned under the verdict
    assert change["slop_delta"] > 50 and "Warning: slop rose" in slop_warning(change)[0]


def test_slop_is_a_monitor_statistic_rules_can_use():
    from rlcw.measure.monitors import check_rules, validate_rules

    validate_rules({"max_slop": 20.0}, "monitor.warn")
    assert check_rules({"slop": 25.0}, {"max_slop": 20.0}) == ["slop=25 > 20 (max_slop)"]
