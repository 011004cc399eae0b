"""generate with best_of.n: one candidate pool, best-of-k from its first k, scored by the tiny BT RM (`rm_run`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import read_stories
from rlcw.errors import RlcwError
from rlcw.recipes import generate


@pytest.fixture(scope="module")
def bon_run(runs_root, rm_run, tiny_model_dir):
    cfg = load_config(
        generate.GenerateConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=bon",
            f"model.name={tiny_model_dir}",
            "data.max_prompts=3",
            "sampling.max_new_tokens=6",
            "best_of.n=4",
            f"best_of.rm_path={rm_run['artifacts']['model']}",
        ],
    )
    return generate.main(cfg)


def test_best_of_files_pick_max_of_first_k_candidates(bon_run):
    samples = Path(bon_run["artifacts"]["stories"]).parent
    assert sorted(p.name for p in samples.iterdir()) == [
        "best_of_1.jsonl",
        "best_of_2.jsonl",
        "best_of_4.jsonl",
        "candidates.jsonl",
        "stories.jsonl",
    ]
    cands = read_stories(samples / "candidates.jsonl")
    assert len(cands) == 12 and [c["meta"]["candidate"] for c in cands] == [0, 1, 2, 3] * 3
    pools: dict[str, list[float]] = {}
    texts: dict[tuple[str, int], str] = {}
    for c in cands:
        pools.setdefault(c["meta"]["prompt_id"], []).append(c["meta"]["score"])
        texts[(c["meta"]["prompt_id"], c["meta"]["candidate"])] = c["story"]
    for k in (1, 2, 4):
        picked = read_stories(samples / f"best_of_{k}.jsonl")
        assert [p["id"] for p in picked] == list(pools) and {p["system"] for p in picked} == {f"bon{k}"}
        for p in picked:
            first = pools[p["id"]][:k]
            assert p["meta"]["candidate"] == first.index(max(first))  # list.index: ties -> lowest
            assert p["meta"]["score"] == max(first) and p["story"] == texts[(p["id"], p["meta"]["candidate"])]
    best = read_stories(bon_run["artifacts"]["stories"])
    assert {b["system"] for b in best} == {"bon4"} and [b["story"] for b in best] == [p["story"] for p in picked]


def test_best_of_metrics_per_k(bon_run):
    m = bon_run["metrics"]
    assert m["bon/1/score"] <= m["bon/2/score"] <= m["bon/4/score"]
    assert (m["bon/1/kl_analytic"], m["bon/4/kl_analytic"]) == (0.0, pytest.approx(0.636294, abs=1e-6))
    assert m["candidates"] == 12 and m["stories"] == 3 and m["bon/4/words"] == pytest.approx(m["mean_words"])
    logged = json.loads(
        (Path(bon_run["artifacts"]["stories"]).parent.parent / "metrics.jsonl").read_text().splitlines()[-1]
    )
    assert logged["bon/2/score"] == m["bon/2/score"]


def test_best_of_needs_rm(tmp_path, tiny_model_dir):
    cfg = load_config(
        generate.GenerateConfig, None, [f"output_dir={tmp_path}", f"model.name={tiny_model_dir}", "best_of.n=2"]
    )
    with pytest.raises(RlcwError, match="best_of.rm_path"):
        generate.main(cfg)


def test_best_of_keeps_tmas_reference(tmp_path, rm_run, tiny_model_dir):
    tmas = tmp_path / "tell-me-a-story-train.jsonl"
    rows = [
        {
            "example_id": f"ex{i}",
            "inputs": f"Write about a kite {i}, between 20 and 30 words.",
            "targets": f"The kite {i} flew.",
        }
        for i in range(2)
    ]
    tmas.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = generate.main(
        load_config(
            generate.GenerateConfig,
            None,
            [
                f"output_dir={tmp_path}",
                "run_name=bon_tmas",
                f"model.name={tiny_model_dir}",
                "data.format=tmas",
                f"data.source={tmas}",
                "data.split=train",
                "sampling.max_new_tokens=4",
                "best_of.n=2",
                "best_of.sizes=[2]",
                "system=base",
                f"best_of.rm_path={rm_run['artifacts']['model']}",
            ],
        )
    )
    assert sorted(res["artifacts"]) == ["best_of_2", "candidates", "stories"]
    for name, system in (("candidates", "base"), ("best_of_2", "base_bon2"), ("stories", "base")):
        recs = read_stories(res["artifacts"][name])
        assert [r["reference"] for r in recs][-1] == "The kite 1 flew." and {r["system"] for r in recs} == {system}
        assert (recs[0]["min_words"], recs[0]["max_words"]) == (20, 30)
