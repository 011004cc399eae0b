"""rlcw eval-rm: the tiny BT RM (pointwise, with a length-control fit), a fake pairwise scorer with
hand-worked numbers, a random tiny GenRM folder, and bad scorer paths."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.preferences import load_preferences
from rlcw.errors import RlcwError
from rlcw.recipes import eval_rm
from rlcw.recipes.eval_rm import EvalRMConfig, main
from rlcw.rm.length_control import LENGTH_CONTROL_FILE
from rlcw.rm.scoring import load_rm


def _cfg(tmp_path, name, *extra):
    return load_config(
        EvalRMConfig, None, [f"output_dir={tmp_path}", f"run_name={name}", "bootstrap_resamples=200", *extra]
    )


def test_eval_bt_reports_accuracy_length_split_and_baseline(tmp_path, rm_run, pairs_run):
    eval_file = pairs_run["artifacts"]["eval"]
    summary = main(
        _cfg(
            tmp_path,
            "bt",
            f"scorer.path={rm_run['artifacts']['model']}",
            f"data.file={eval_file}",
            "data.max_pairs=16",
        )
    )
    m = summary["metrics"]
    pairs = load_preferences(eval_file)[:16]
    longer = [len(p["chosen"].split()) > len(p["rejected"].split()) for p in pairs]
    shorter = [len(p["chosen"].split()) < len(p["rejected"].split()) for p in pairs]
    assert m["pairs"] == 16 and m["pairs_chosen_longer"] == sum(longer) and m["pairs_chosen_shorter"] == sum(shorter)
    assert m["length_baseline/accuracy"] == pytest.approx((sum(longer) + 0.5 * (16 - sum(longer) - sum(shorter))) / 16)
    scorer = load_rm(rm_run["artifacts"]["model"])
    c = scorer.score([p["prompt"] for p in pairs], [p["chosen"] for p in pairs])
    r = scorer.score([p["prompt"] for p in pairs], [p["rejected"] for p in pairs])
    assert m["accuracy"] == pytest.approx(
        sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(c, r, strict=False)) / 16
    )
    assert m["accuracy_ci_low"] <= m["accuracy"] <= m["accuracy_ci_high"]
    assert -1 <= m["score_length_spearman"] <= 1 and "order_consistency" not in m
    run = Path(summary["artifacts"]["eval"]).parent
    assert json.loads((run / "eval.json").read_text())["scorer"]["pairwise"] is False
    assert len((run / "scores.jsonl").read_text().splitlines()) == 16
    assert (run / "eval_rm.png").stat().st_size > 1000 and "longer wins" in (run / "report.md").read_text()


def test_length_control_fit_is_saved_and_removes_length_correlation(tmp_path, rm_run, pairs_run):
    rm_copy = tmp_path / "rm"  # never write into the shared session RM
    shutil.copytree(rm_run["artifacts"]["model"], rm_copy)
    eval_file = tmp_path / "pairs.jsonl"
    eval_file.write_text("".join(json.dumps(p) + "\n" for p in load_preferences(pairs_run["artifacts"]["eval"])[:12]))
    summary = main(
        _cfg(
            tmp_path,
            "lc",
            f"scorer.path={rm_copy}",
            f"data.file={eval_file}",
            f"length_control.fit_on={eval_file}",
            "length_control.feature=words",
        )
    )
    # without length_control.install the RM folder is left alone: the reward never depends on what ran before
    assert not (rm_copy / LENGTH_CONTROL_FILE).exists() and (tmp_path / "lc" / LENGTH_CONTROL_FILE).is_file()
    assert load_rm(rm_copy).length_fit is None  # auto: nothing installed -> raw
    with pytest.raises(RlcwError, match="length_control=true but the RM folder has no"):
        load_rm(rm_copy, length_control=True)
    summary = main(
        _cfg(
            tmp_path,
            "lc_install",
            f"scorer.path={rm_copy}",
            f"data.file={eval_file}",
            f"length_control.fit_on={eval_file}",
            "length_control.feature=words",
            "length_control.install=true",
        )
    )
    m = summary["metrics"]
    assert (rm_copy / LENGTH_CONTROL_FILE).is_file() and (tmp_path / "lc_install" / LENGTH_CONTROL_FILE).is_file()
    assert m["length_control/n"] == 24
    # OLS residuals are uncorrelated with the regressor on the set they were fitted on (here: the eval stories)
    assert m["length_controlled/score_length_pearson"] == pytest.approx(0.0, abs=1e-6)
    scorer = load_rm(rm_copy)
    raw, lc = scorer.score(["p"], ["one two three four"], raw=True)[0], scorer.score(["p"], ["one two three four"])[0]
    fit = json.loads((rm_copy / LENGTH_CONTROL_FILE).read_text())
    assert lc == pytest.approx(raw - (fit["intercept"] + fit["slope"] * 4))
    assert load_rm(rm_copy, length_control=False).score(["p"], ["one two three four"])[0] == pytest.approx(raw)


class LengthLovingJudge:
    """P(first better) = 1 if the first story has more words, 0 if fewer, 1 on a tie (position bias);
    no verdict (None) for the prompt 'bad' when the chosen story is shown first."""

    def __init__(self):
        self.calls = 0

    def prefer_ordered(self, prompts, first, second):
        self.calls += 1
        out = []
        for p, f, s in zip(prompts, first, second, strict=False):
            nf, ns = len(f.split()), len(s.split())
            out.append(None if p == "bad" and self.calls == 1 else 1.0 if nf >= ns else 0.0)
        return out


def test_pairwise_path_by_hand(tmp_path, monkeypatch):
    words = lambda n: " ".join(["w"] * n)  # noqa: E731
    rows = [("p0", 10, 5), ("p1", 8, 4), ("p2", 3, 9), ("p3", 5, 5), ("bad", 6, 2)]
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt": p, "chosen": words(c) + " c", "rejected": words(r) + " r"}) + "\n"
            for p, c, r in rows
        )
    )
    monkeypatch.setattr(eval_rm, "load_scorer", lambda *a, **k: LengthLovingJudge())
    m = main(_cfg(tmp_path, "pw", f"data.file={path}", "scorer.kind=judge"))["metrics"]
    # valid in both orders: p0 (right), p1 (right), p2 (wrong), p3 (0.5: half); 'bad' excluded
    assert m["pairs_scored"] == 4 and m["invalid_chosen_first"] == 1 and m["invalid_rejected_first"] == 0
    assert m["accuracy"] == pytest.approx(2.5 / 4)
    assert m["accuracy_chosen_longer"] == 1.0 and m["accuracy_chosen_shorter"] == 0.0
    assert m["order_consistency"] == pytest.approx(3 / 4)
    assert m["first_position_rate"] == pytest.approx(5 / 9)  # first-order 1,1,0,1 + second-order 0,0,1,1,0
    assert m["length_baseline/accuracy"] == pytest.approx(3.5 / 5)  # all five pairs: p0, p1, bad longer; p3 tie


def test_random_genrm_folder_is_evaluated_pairwise(tmp_path, tiny_model_dir, pairs_run):
    from rlcw.rewards.genrm import GenRMScorer
    from rlcw.rm.render import RMSpec, save_spec

    folder = tmp_path / "genrm"
    shutil.copytree(tiny_model_dir, folder)
    save_spec(RMSpec(type="genrm", base_model=str(tiny_model_dir), max_length=256), folder)
    summary = main(
        _cfg(
            tmp_path,
            "genrm",
            f"scorer.path={folder}",
            f"data.file={pairs_run['artifacts']['eval']}",
            "data.max_pairs=3",
        )
    )
    m = summary["metrics"]
    assert m["pairs_scored"] == 3 and m["invalid_chosen_first"] == 0
    rows = [json.loads(x) for x in (Path(summary["artifacts"]["scores"]).read_text().splitlines())]
    from rlcw.metrics import pairwise as pw

    fwd, bwd = [r["p_chosen_first"] for r in rows], [r["p_rejected_first"] for r in rows]
    assert m["order_consistency"] == pytest.approx(pw.order_consistency(fwd, bwd))  # not only "in [0, 1]"
    pairs = load_preferences(pairs_run["artifacts"]["eval"])[:3]
    scorer = GenRMScorer(folder)
    p = scorer.prefer([x["prompt"] for x in pairs], [x["chosen"] for x in pairs], [x["rejected"] for x in pairs])
    assert m["accuracy"] == pytest.approx(sum(1.0 if v > 0.5 else 0.5 if v == 0.5 else 0.0 for v in p) / 3)


def test_bad_scorer_paths(tmp_path, tiny_model_dir, pairs_run, rm_run):
    data = f"data.file={pairs_run['artifacts']['eval']}"
    with pytest.raises(RlcwError, match="rlcw_rm.json"):
        main(_cfg(tmp_path, "bad1", f"scorer.path={tiny_model_dir}", data))
    with pytest.raises(RlcwError, match="scorer.kind=genrm but this reward model is 'bt'"):
        main(_cfg(tmp_path, "bad2", f"scorer.path={rm_run['artifacts']['model']}", "scorer.kind=genrm", data))
    with pytest.raises(RlcwError, match="unknown scorer kind"):
        main(_cfg(tmp_path, "bad3", "scorer.kind=oracle", data))


class _OneOrderMissing:
    """Scripted pairwise scorer: chosen-first probabilities, then rejected-first ones (None = no verdict)."""

    def __init__(self):
        self.replies = iter([[0.9, 0.8, 0.3, 0.9], [0.2, 0.7, 0.6, None]])

    def prefer_ordered(self, prompts, first, second):
        return next(self.replies)


def test_train_rm_and_eval_rm_report_the_same_genrm_accuracy():

    from rlcw.metrics import pairwise as pw
    from rlcw.rm.pair_eval import eval_pairwise, evaluate_genrm

    pairs = [{"prompt": "p", "chosen": "a b c", "rejected": "a b"} for _ in range(4)]
    train = evaluate_genrm(_OneOrderMissing(), pairs)
    cw, rw = [3] * 4, [2] * 4
    ev, _ = eval_pairwise(_OneOrderMissing(), pairs, cw, rw, pw.length_direction(cw, rw), resamples=50, seed=0)
    # pair 4 has one order only: left out by both (two-order rule); pairs 1-3 average to 0.85, 0.55, 0.35
    assert train["eval/accuracy"] == ev["accuracy"] == pytest.approx(2 / 3)
    assert train["eval/order_consistency"] == ev["order_consistency"] == pytest.approx(2 / 3)
    assert train["eval/pairs_scored"] == ev["pairs_scored"] == 3.0 and train["eval/no_verdict"] == 1.0
