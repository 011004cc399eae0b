"""The "study" evaluator hook writes a blinded packet of candidates vs baseline per evaluation."""

from __future__ import annotations

import inspect
import json

import pytest

from rlcw.errors import RlcwError
from rlcw.measure.evaluation import Evaluator
from rlcw.study.blinding import read_key
from rlcw.study.evaluator import make_study_evaluator


def records(system, step=None):
    return [
        {
            "id": f"{system}{k}",
            "prompt": f"prompt {k}",
            "story": f"{system} tale {k}",
            "system": system,
            **({"step": step} if step is not None else {}),
        }
        for k in range(7)
    ]


def test_evaluator_exports_a_packet_per_step(tmp_path):
    ev = make_study_evaluator({"raters_per_item": 2, "formats": ["html"]}, {"seed": 1, "run_name": "grpo"})
    assert ev.name == "study" and callable(ev.evaluate)
    # satisfies the Evaluator protocol: an annotation cannot fail, so compare the call signatures
    want = [p for p in inspect.signature(Evaluator.evaluate).parameters if p != "self"]
    assert list(inspect.signature(ev.evaluate).parameters) == want == ["candidates", "baseline", "out_dir"]
    out = ev.evaluate(records("policy", step=20), records("base"), tmp_path / "samples")
    # 7 pairs, 2 raters, sittings of 5 -> 2 packets per rater
    assert (out["pairs"], out["raters"], out["packets"], out["max_items_per_sitting"]) == (7.0, 2.0, 4.0, 5.0)
    folder = tmp_path / "samples" / "study" / "step_000020"
    assert not list((tmp_path / "samples").rglob("key*"))  # samples/ is shared as a whole: no key in it
    key = read_key(tmp_path / "private" / "study" / "step_000020" / "key.json")
    assert key["study"] == "grpo-step_000020"
    assert {frozenset((e["A"]["system"], e["B"]["system"])) for e in key["items"].values()} == {
        frozenset({"policy", "base"})
    }
    assert len(list((folder / "packets" / "html").glob("*.html"))) == 4
    assert not (folder / "packets" / "packets.csv").exists()


def test_same_system_name_is_relabelled_and_no_baseline_exports_nothing(tmp_path):
    ev = make_study_evaluator({}, {"run_dir": tmp_path / "run"})
    ev.evaluate(records("model"), records("model"), tmp_path / "run" / "samples")
    key = json.loads((tmp_path / "run" / "private" / "study" / "eval_001" / "key.json").read_text())
    assert {e["A"]["system"] for e in key["items"].values()} | {e["B"]["system"] for e in key["items"].values()} == {
        "candidate",
        "model",
    }
    assert ev.evaluate(records("model"), [], tmp_path) == {"pairs": 0.0}


def test_unknown_option_is_an_error():
    with pytest.raises(RlcwError, match="raters_per_itme"):
        make_study_evaluator({"raters_per_itme": 3}, {})
