"""validate(cfg) of each recipe runs before the run folder is written and before any model loads.

With `RunDir.create` and the model loaders patched to raise, a bad config must fail with its
validation error (naming the key); a good config gets past validation and reaches the patched
`RunDir.create` (so each test can fail both ways)."""

from __future__ import annotations

import pytest

from rlcw import models
from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.recipes import build_pairs, curate, eval_rm, export, generate, judge, outcome, train_agents, train_rm
from rlcw.runs import RunDir


class Heavy(Exception):
    """Raised by anything slow or anything that writes the run folder."""


@pytest.fixture(autouse=True)
def no_heavy(monkeypatch):
    def refuse(*args, **kwargs):
        raise Heavy("validation must come first")

    monkeypatch.setattr(RunDir, "create", classmethod(lambda cls, *a, **k: refuse()))
    for name in ("load_causal_lm", "load_tokenizer"):
        monkeypatch.setattr(models, name, refuse)
        for mod in (train_rm, generate, train_agents, export):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, refuse)


CASES = [
    (train_rm, train_rm.TrainRMConfig, ["rm.type=bradley"], "rm.type"),
    (train_rm, train_rm.TrainRMConfig, ["train.resume=maybe"], "train.resume"),
    (train_rm, train_rm.TrainRMConfig, ["train.batch_size=0"], "train.batch_size"),
    (train_rm, train_rm.TrainRMConfig, ["train.deepspeed=/no/such.json"], "train.deepspeed"),
    (
        train_rm,
        train_rm.TrainRMConfig,
        ["rm.type=genrm", "rm.cot=true", "rm.rationales.source=file"],
        "rm.rationales.file",
    ),
    (eval_rm, eval_rm.EvalRMConfig, ["scorer.kind=oracle"], "scorer.kind"),
    (eval_rm, eval_rm.EvalRMConfig, ["scorer.kind=genrm", "length_control.fit_on=x.jsonl"], "length_control.fit_on"),
    (build_pairs, build_pairs.BuildPairsConfig, ["data.kinds=[shuffle,explode]"], "data.kinds"),
    (build_pairs, build_pairs.BuildPairsConfig, ["data.eval_fraction=1.5"], "data.eval_fraction"),
    (generate, generate.GenerateConfig, ["sampling.batch_size=0"], "sampling.batch_size"),
    (generate, generate.GenerateConfig, ["best_of.n=4"], "best_of.rm_path"),
    (generate, generate.GenerateConfig, ["generator=agents_room", "variant=sonnet"], "variant"),
    (generate, generate.GenerateConfig, ["data.format=tmas"], "data.source"),
    (train_agents, train_agents.TrainAgentsConfig, ["teacher.backend=oracle"], "teacher.backend"),
    (train_agents, train_agents.TrainAgentsConfig, ["train.resume=sometimes"], "train.resume"),
    (export, export.ExportConfig, ["hub.push=true"], "hub.repo_id"),
    (export, export.ExportConfig, ["model.chat_template=/no/such.jinja"], "model.chat_template"),
    (outcome, outcome.OutcomeConfig, ["runs=[grpo,rlhf]"], "runs"),
    (judge, judge.JudgeConfig, ["protocol=vibes", "data.stories=[a.jsonl]"], "protocol"),
    (judge, judge.JudgeConfig, ["data.stories=[]"], "data.stories"),
    (curate, curate.CurateConfig, ["train.source=x.jsonl", "rules.test_from=yesterday"], "rules.test_from"),
    (outcome, outcome.OutcomeConfig, ["proxy_rm.train.batch_size=0"], "proxy_rm.train.batch_size"),
    (outcome, outcome.OutcomeConfig, ["dpo.eval.every_steps=3"], "dpo.eval.every_steps"),
    (outcome, outcome.OutcomeConfig, ["best_of_n.sizes=[1]", "measure.samples_per_prompt=1"], "best_of_n.sizes"),
    (outcome, outcome.OutcomeConfig, ["proxy_data.eval_fraction=1.0"], "proxy_data.eval_fraction"),
    (outcome, outcome.OutcomeConfig, ["measure.draw=gumbel"], "measure.draw"),
    (outcome, outcome.OutcomeConfig, ["proxies={small: -1}", "rl_proxy=small"], "proxies.small"),
    (outcome, outcome.OutcomeConfig, ["proxies={small: 0, large: 0}"], "no proxy to train"),
]


@pytest.mark.parametrize(("mod", "cls", "overrides", "key"), CASES, ids=[" ".join(c[2]) for c in CASES])
def test_bad_config_fails_validation_before_anything_heavy(tmp_path, mod, cls, overrides, key):
    cfg = load_config(cls, None, [f"output_dir={tmp_path}", *overrides])
    with pytest.raises(RlcwError) as info:
        mod.main(cfg)
    assert key in str(info.value)
    assert not (tmp_path / cfg.run_name).exists()


@pytest.mark.parametrize("mod", [train_rm, eval_rm, build_pairs, generate, train_agents, export, outcome])
def test_default_config_passes_validation_and_reaches_the_run_folder(tmp_path, mod):
    cls = next(
        v
        for k, v in vars(mod).items()
        if k.endswith("Config")
        and k not in ("ModelConfig",)
        and isinstance(v, type)
        and v.__module__ == mod.__name__
        and "run_name" in getattr(v, "__dataclass_fields__", {})
    )
    pairs = tmp_path / "pairs.jsonl"  # train-rm's default pairs file is build-pairs' output, absent here
    pairs.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n', encoding="utf-8")
    files = [f"data.train_file={pairs}", f"data.eval_file={pairs}"] if mod is train_rm else []
    with pytest.raises(Heavy):
        mod.main(load_config(cls, None, [f"output_dir={tmp_path}", *files]))
