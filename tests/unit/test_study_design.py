"""Study design: selection, blinding + key checksum, Latin-square assignment, sample-size guidance."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from rlcw.errors import RlcwError
from rlcw.study.blinding import blind, read_key, write_key
from rlcw.study.latin import assign
from rlcw.study.power import guidance, pairs_needed
from rlcw.study.selection import all_system_pairs, best_worst_pairs, system_pairs


def rec(prompt, system, story, rid=None):
    return {"id": rid or f"{system}-{prompt}", "prompt": prompt, "story": story, "system": system}


def test_best_worst_picks_extremes_per_prompt_and_skips_single_samples():
    samples = [
        rec("p1", "m", "s1", "a"),
        rec("p1", "m", "s2", "b"),
        rec("p1", "m", "s3", "c"),
        rec("p2", "m", "t1", "d"),
    ]
    pairs = best_worst_pairs(samples, [0.2, 0.9, -1.0, 5.0])
    assert len(pairs) == 1
    assert (pairs[0]["first"]["id"], pairs[0]["second"]["id"]) == ("b", "c")
    assert pairs[0]["first"]["system"] == "rm_best" and pairs[0]["first"]["meta"] == {"rm_score": 0.9, "writer": "m"}
    assert pairs[0]["second"]["meta"]["rm_score"] == -1.0


def test_system_pairs_match_prompts_and_all_pairs_counts():
    a = [rec("p1", "tuned", "x"), rec("p2", "tuned", "y")]
    b = [rec("p2", "base", "z"), rec("p3", "base", "w")]
    pairs = system_pairs(a, b)
    assert [(p["prompt"], p["first"]["story"], p["second"]["story"]) for p in pairs] == [("p2", "y", "z")]
    with pytest.raises(RlcwError, match="share no prompt"):
        system_pairs(a[:1], b[1:])
    three = [rec(p, s, s + p) for p in ("p1", "p2") for s in ("x", "y", "z")]
    assert len(all_system_pairs(three)) == 2 * 3  # M x N(N-1)/2


def _pairs(n):
    return [
        {
            "prompt": f"p{k}",
            "kind": "systems",
            "first": rec(f"p{k}", "tuned", f"T{k}"),
            "second": rec(f"p{k}", "base", f"B{k}"),
        }
        for k in range(n)
    ]


def test_blinding_is_cryptographically_random_and_the_key_holds_identities(tmp_path):
    items, key = blind(_pairs(40))
    again, _ = blind(_pairs(40))
    # two blindings of the same pairs share neither ids nor sides nor order: nothing to recompute
    assert not {it["item_id"] for it in items} & {it["item_id"] for it in again}
    sides = {it["prompt"]: it["story_a"] for it in items}
    assert sum(sides[it["prompt"]] != it["story_a"] for it in again) > 5
    assert [it["prompt"] for it in items] != [f"p{k}" for k in range(40)]  # not in input (file) order
    tuned_first = sum(1 for it in items if it["story_a"].startswith("T"))
    assert 10 < tuned_first < 30  # random sides, not always the same one
    for it in items:
        side = "A" if it["story_a"].startswith("T") else "B"
        assert key[it["item_id"]][side]["system"] == "tuned"
        assert set(it) == {"item_id", "prompt", "story_a", "story_b"}  # nothing reveals the system
    assert len({it["item_id"] for it in items}) == 40


def test_key_checksum_detects_tampering(tmp_path):
    items, key = blind(_pairs(3))
    packets = assign(items)
    path = write_key(tmp_path / "key.json", key, packets)
    assert read_key(path)["items"] == key
    assert path.stat().st_mode & 0o777 == 0o600  # readable by its owner only
    data = json.loads(path.read_text())
    first = next(iter(data["items"]))
    data["items"][first]["A"]["system"], data["items"][first]["B"]["system"] = "x", "y"
    path.write_text(json.dumps(data))
    with pytest.raises(RlcwError, match="does not match its checksum"):
        read_key(path)


def test_latin_square_no_prompt_twice_cap_and_balanced_coverage():
    # 7 prompts x 3 system pairs each: 3 rater groups, 2 raters per item
    items = [{"item_id": f"{p}-{c}", "prompt": f"p{p}"} for p in range(7) for c in range(3)]
    packets = assign(items, raters_per_item=2, per_sitting=5)
    per_rater: dict[str, list] = {}
    for pk in packets:
        assert len(pk["items"]) <= 5
        per_rater.setdefault(pk["rater_id"], []).extend(pk["items"])
    assert len(per_rater) == 6
    for seen in per_rater.values():
        prompts = [it["prompt"] for it in seen]
        assert len(prompts) == len(set(prompts)) == 7  # every prompt once
    counts = Counter(it["item_id"] for seen in per_rater.values() for it in seen)
    assert set(counts) == {it["item_id"] for it in items} and set(counts.values()) == {2}
    firsts = Counter(seen[0]["prompt"] for seen in per_rater.values())
    assert len(firsts) == 3  # groups start at different prompts (positions rotate)


def test_attention_checks_go_into_every_sitting_within_the_cap():
    items, _ = blind(_pairs(9), attention_checks=2)
    packets = assign(items, per_sitting=5)
    assert [len(p["items"]) for p in packets] == [5, 5, 2]  # 4 + check, 4 + check, 1 + check
    assert all(sum(1 for it in p["items"] if it.get("attention")) == 1 for p in packets)


def test_pairs_needed_normal_approximation_by_hand():
    # ((1.959964*0.5 + 0.841621*sqrt(0.24)) / 0.1)^2 = (0.979982 + 0.412307)^2 / 0.01 = 193.85 -> 194
    assert pairs_needed(0.6) == 194
    # p1 = 0.7: (0.979982 + 0.841621*0.458258)^2 / 0.04 = 1.365656^2 / 0.04 = 46.6 -> 47
    assert pairs_needed(0.7) == 47
    assert pairs_needed(0.4) == 194  # symmetric
    assert "win rate 0.60: 194 pairs" in guidance((0.6,), n_pairs=12)
    with pytest.raises(ValueError):
        pairs_needed(0.5)


def test_story_text_cannot_break_out_of_the_page_script():
    from rlcw.study.export_html import render_packet

    item = {"item_id": "x1", "prompt": "p", "story_a": "</script><script>alert(1)</script>", "story_b": "ok"}
    page = render_packet({"packet_id": "r-s1", "rater_id": "r", "items": [item]}, study="s", study_id="0")
    assert page.count("</script>") == 2  # only the page's own two script blocks close
    assert "\\u003c/script>\\u003cscript>alert(1)" in page
