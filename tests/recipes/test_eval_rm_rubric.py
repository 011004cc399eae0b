"""rlcw eval-rm with scorer.kind=rubric: a scripted judge with hand-worked verdicts per story -> accuracy with
ties, per-criterion accuracy, pairs without a verdict left out, invalid verdicts counted, the judge cache reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.recipes.eval_rm import EvalRMConfig, main

# criteria: ends (weight 2), named (weight 1); story tag -> (ends, named) replies
REPLIES = {
    "[c1]": ("Answer: Yes", "Answer: No"),  # 2/3
    "[r1]": ("Answer: No", "Answer: Yes"),  # 1/3 -> chosen wins
    "[c2]": ("Answer: Yes", "Answer: Yes"),  # 1
    "[r2]": ("Answer: Yes", "Answer: Yes"),  # 1 -> tie
    "[c3]": ("Answer: No", "Hard to say."),  # named invalid -> 0 from ends alone
    "[r3]": ("Answer: Yes", "Answer: No"),  # 2/3 -> chosen loses
    "[c4]": ("Maybe.", "It depends."),  # no valid verdict -> NaN: pair 4 left out
    "[r4]": ("Answer: Yes", "Answer: Yes"),
}
CRITERIA = '[{name: ends, question: "Does the story end?", weight: 2}, {name: named, question: "Is the hero named?"}]'


def _files(tmp_path: Path, replies: dict[str, tuple[str, str]]) -> tuple[Path, Path]:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps(
                {"prompt": "Write a story.", "chosen": f"A story {k}.", "rejected": f"Another story [r{k[2]}] here."}
            )
            + "\n"
            for k in ("[c1]", "[c2]", "[c3]", "[c4]")
        )
    )
    rules = tmp_path / "judge.jsonl"
    rules.write_text(
        "".join(
            json.dumps({"match": [tag, question], "reply": reply}) + "\n"
            for tag, (ends, named) in replies.items()
            for question, reply in (("Does the story end?", ends), ("Is the hero named?", named))
        )
    )
    return pairs, rules


def _run(tmp_path: Path, name: str, pairs: Path, rules: Path, *extra: str) -> dict:
    cfg = load_config(
        EvalRMConfig,
        None,
        [
            f"output_dir={tmp_path}",
            f"run_name={name}",
            "bootstrap_resamples=100",
            "scorer.kind=rubric",
            f"scorer.rubric.criteria={CRITERIA}",
            "scorer.rubric.verdict=text",
            f"scorer.rubric.client={{kind: scripted, script: {rules}, cache_dir: {tmp_path / 'cache'}}}",
            f"data.file={pairs}",
            *extra,
        ],
    )
    return main(cfg)


def test_rubric_accuracy_ties_criteria_and_invalid_by_hand(tmp_path):
    pairs, rules = _files(tmp_path, REPLIES)
    summary = _run(tmp_path, "rubric", pairs, rules)
    m = summary["metrics"]
    # scored pairs 1-3: won, tied, lost -> (1 + 0.5 + 0) / 3; pair 4 has a side with no verdict
    assert m["pairs"] == 4 and m["pairs_scored"] == 3 and m["pairs_no_verdict"] == 1
    assert m["accuracy"] == pytest.approx(0.5) and m["ties"] == pytest.approx(1 / 3) and m["pairs_tied"] == 1
    assert m["accuracy_strict"] == pytest.approx(1 / 3) and m["accuracy_untied"] == pytest.approx(0.5)
    assert m["mean_margin"] == pytest.approx(((2 / 3 - 1 / 3) + 0 + (0 - 2 / 3)) / 3)
    # ends: pairs 1-3 (pair 4's chosen has none): win, tie, loss; named: pair 1 lost, pair 2 tied, 3 and 4 left out
    assert (m["rubric/ends/accuracy"], m["rubric/ends/ties"], m["rubric/ends/pairs"]) == pytest.approx((0.5, 1 / 3, 3))
    assert (m["rubric/named/accuracy"], m["rubric/named/ties"], m["rubric/named/pairs"]) == pytest.approx(
        (0.25, 0.5, 2)
    )
    assert m["invalid_verdicts"] == 3 and m["invalid_verdict_share"] == pytest.approx(3 / 16)
    assert m["judge/calls"] == 16 and m["judge/cache_hits"] == 0
    run = Path(summary["artifacts"]["eval"]).parent
    rows = [json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()]
    assert rows[0]["chosen_score"] == pytest.approx(2 / 3) and rows[0]["rejected_rubric"] == {
        "ends": 0.0,
        "named": 1.0,
    }
    assert rows[3]["chosen_score"] is None and rows[2]["chosen_rubric"] == {"ends": 0.0, "named": None}
    report = (run / "report.md").read_text()
    assert "| named | 0.250 | 0.500 | 2 |" in report and "- pairs_no_verdict: 1" in report
    scorer = json.loads((run / "eval.json").read_text())["scorer"]
    assert scorer["kind"] == "RubricReward" and [c["name"] for c in scorer["criteria"]] == ["ends", "named"]

    # the same pairs with a judge that now says No to everything: every verdict comes from the cache
    no_rules = tmp_path / "no.jsonl"
    no_rules.write_text(json.dumps({"reply": "Answer: No"}) + "\n")
    again = _run(tmp_path, "rubric_cached", pairs, no_rules)["metrics"]
    assert again["judge/cache_hits"] == 16 and again["judge/calls"] == 0  # text replies are cached as they came
    assert {k: v for k, v in again.items() if not k.startswith("judge/")} == {
        k: v for k, v in m.items() if not k.startswith("judge/")
    }


@pytest.mark.parametrize(
    "override,where",
    [
        ("scorer.rubric.verdict=maybe", "scorer.rubric.verdict"),
        ("scorer.rubric.criteria=ttcw:99", "scorer.rubric.criteria"),
        ("scorer.rubric.client={kind: scripted}", "scorer.rubric.verdict"),  # logprobs need a local/openai judge
        ("scorer.rubric.client={kind: local, modle: x}", "scorer.rubric.client"),
        ("ending.samples=x.jsonl", "ending.samples"),
    ],
)
def test_bad_rubric_keys_name_the_key_before_the_run(tmp_path, override, where):
    extra = [] if "verdict=maybe" in override or "client=" in override else ["scorer.rubric.verdict=text"]
    if "client=" not in override:
        extra.append("scorer.rubric.client={kind: scripted, script: x.jsonl}")
    cfg = load_config(EvalRMConfig, None, [f"output_dir={tmp_path}", "scorer.kind=rubric", *extra, override])
    with pytest.raises(RlcwError) as err:
        main(cfg)
    assert err.value.where.startswith(where) and err.value.hint
    assert not (tmp_path / "eval_rm").exists()  # checked before the run folder is written
