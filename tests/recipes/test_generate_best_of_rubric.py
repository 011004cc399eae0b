"""generate with best_of.scorer=rubric on the tiny model: a scripted judge answers in call order (one batched
call, story-major: candidate x criterion), so each candidate's rubric score is worked by hand and so is the pick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import read_stories
from rlcw.errors import RlcwError
from rlcw.recipes import generate

Y, N, G = "Answer: Yes", "Answer: No", "Hard to say."  # G: no verdict
# criteria a (weight 2), b (weight 1); per prompt, the (a, b) replies of candidates 0..3 and their scores
REPLIES = [
    [(Y, N), (Y, Y), (N, Y), (N, N)],  # 2/3, 1, 1/3, 0
    [(G, G), (N, Y), (Y, N), (Y, G)],  # no verdict, 1/3, 2/3, 1 (b invalid: a alone)
    [(Y, Y), (Y, Y), (N, N), (Y, Y)],  # 1, 1, 0, 1: ties go to the lowest index
]
SCORES = [[2 / 3, 1.0, 1 / 3, 0.0], [None, 1 / 3, 2 / 3, 1.0], [1.0, 1.0, 0.0, 1.0]]
PICKS = {1: [0, 0, 0], 2: [1, 1, 0], 4: [1, 3, 0]}  # best of the first k; no verdict never beats a score
CRITERIA = '[{name: a, question: "Is it A?", weight: 2}, {name: b, question: "Is it B?"}]'


def _script(path: Path, replies: list[str]) -> Path:
    path.write_text("".join(json.dumps({"reply": r}) + "\n" for r in replies))  # rules without match: in turn
    return path


def _run(tmp_path: Path, tiny_model_dir, name: str, script: Path, *extra: str) -> dict:
    cfg = load_config(
        generate.GenerateConfig,
        None,
        [
            f"output_dir={tmp_path}",
            f"run_name={name}",
            f"model.name={tiny_model_dir}",
            "data.max_prompts=3",
            "sampling.max_new_tokens=6",
            "best_of.n=4",
            "best_of.scorer=rubric",
            f"best_of.rubric.criteria={CRITERIA}",
            "best_of.rubric.verdict=text",
            f"best_of.rubric.client={{kind: scripted, script: {script}, cache_dir: {tmp_path / 'cache'}}}",
            *extra,
        ],
    )
    return generate.main(cfg)


@pytest.fixture(scope="module")
def bon_rubric(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("bon_rubric")
    script = _script(root / "judge.jsonl", [r for prompt in REPLIES for cand in prompt for r in cand])
    return root, _run(root, tiny_model_dir, "bon", script)


def test_rubric_scores_and_picks_by_hand(bon_rubric):
    _, summary = bon_rubric
    samples = Path(summary["artifacts"]["stories"]).parent
    cands = read_stories(samples / "candidates.jsonl")
    assert len({(c["prompt"], c["story"]) for c in cands}) == 12  # distinct: the judge cache cannot reorder calls
    got = [[c["meta"]["score"] for c in cands[i * 4 : (i + 1) * 4]] for i in range(3)]
    assert got == [[pytest.approx(s) if s is not None else None for s in row] for row in SCORES]
    assert cands[4]["meta"]["rubric"] == {"a": None, "b": None} and cands[7]["meta"]["rubric"] == {"a": 1.0, "b": None}
    for k, picks in PICKS.items():
        picked = read_stories(samples / f"best_of_{k}.jsonl")
        assert [p["meta"]["candidate"] for p in picked] == picks
        assert [p["story"] for p in picked] == [cands[i * 4 + j]["story"] for i, j in enumerate(picks)]
    assert [p["meta"]["candidate"] for p in read_stories(summary["artifacts"]["stories"])] == PICKS[4]


def test_rubric_metrics_per_criterion_of_the_chosen(bon_rubric):
    _, summary = bon_rubric
    m = summary["metrics"]
    # best-of-1: candidates 0 -> scores 2/3, none, 1 (the story without a verdict has no score)
    assert m["bon/1/score"] == pytest.approx(5 / 6) and m["bon/2/score"] == pytest.approx(7 / 9)
    assert m["bon/4/score"] == pytest.approx(1.0)
    assert (m["bon/1/rubric/a"], m["bon/1/rubric/b"]) == pytest.approx((1.0, 0.5))
    assert (m["bon/2/rubric/a"], m["bon/2/rubric/b"]) == pytest.approx((2 / 3, 1.0))
    assert (m["bon/4/rubric/a"], m["bon/4/rubric/b"]) == pytest.approx((1.0, 1.0))
    assert m["bon/invalid"] == pytest.approx(3 / 24) and m["bon/no_verdict"] == 1
    assert m["judge/calls"] == 24 and m["judge/cache_hits"] == 0  # one batched call: 12 candidates x 2 criteria
    report = (Path(summary["artifacts"]["stories"]).parent.parent / "report.md").read_text()
    assert "Best-of-4 with a rubric (a, b; text verdicts" in report and "| 4 | 1.0000 |" in report


def test_rubric_best_of_reuses_the_judge_cache(bon_rubric, tiny_model_dir):
    root, first = bon_rubric
    # same seed -> same candidates; a judge that now says No to all would change every pick unless cached
    again = _run(root, tiny_model_dir, "bon_again", _script(root / "no.jsonl", [N]))
    assert again["metrics"]["judge/cache_hits"] == 24 and again["metrics"]["judge/calls"] == 0
    for k in PICKS:
        assert again["metrics"][f"bon/{k}/score"] == first["metrics"][f"bon/{k}/score"]


@pytest.mark.parametrize(
    "override,where",
    [
        ("best_of.rubric.verdict=maybe", "best_of.rubric.verdict"),
        ("best_of.rubric.criteria=[]", "best_of.rubric.criteria"),
        ("best_of.rm_path=runs/rm", "best_of.rm_path"),
        ("best_of.scorer=gold", "best_of.scorer"),
    ],
)
def test_bad_rubric_best_of_keys_name_the_key(tmp_path, tiny_model_dir, override, where):
    with pytest.raises(RlcwError) as err:
        _run(tmp_path, tiny_model_dir, "bad", tmp_path / "judge.jsonl", override)
    assert (err.value.where or str(err.value)).startswith(where) and err.value.hint
    assert not (tmp_path / "bad").exists()  # checked before the run folder is written
