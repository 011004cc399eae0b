"""The remaining shipped configs: judge, curate, study_export, study_ingest, serve_rm,
prepare_model, sweeps, outcome and quickstart. Each one whose inputs exist offline runs `main()` on the
tiny model, the scripted judge or a small file written here, with overrides only for size and paths;
the ones that need a hub, a server or a dataset not in the repository are listed with the reason and
only validated (the recipe's validate(), else load_config)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import write_stories
from rlcw.recipes import (
    curate,
    judge,
    outcome,
    prepare_model,
    quickstart,
    serve_rm,
    study_export,
    study_ingest,
    sweep,
)
from rlcw.study import DIMENSIONS

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
SERVER = "needs an OpenAI-compatible judge server"
EVERY_STAGE = "runs every stage; covered by test_outcome/test_quickstart"

# config -> why it is only validated here
VALIDATE_ONLY = {
    "judge/agents_room.yaml": SERVER,
    "judge/litbench.yaml": SERVER,
    "judge/local_server.yaml": SERVER + " (transformers serve)",
    "judge/ttcw_baseline.yaml": SERVER,
    "judge/ttcw_hybrid.yaml": SERVER,
    "judge/ttcw_original.yaml": SERVER + " and the user's ttcw_all_tests.json (not shipped)",
    "judge/ttcw_reference.yaml": SERVER,
    "curate/litbench.yaml": "reads euclaise/WritingPrompts_preferences from the hub",
    "serve_rm/default.yaml": "serves until interrupted (uvicorn): validated and its app built on a tiny RM",
    "outcome/cpu.yaml": EVERY_STAGE,
    "outcome/seeds_cpu.yaml": EVERY_STAGE,
    "outcome/default_cpu.yaml": EVERY_STAGE,
    "quickstart/cpu.yaml": EVERY_STAGE,
}
RUN = [
    "judge/scripted.yaml",
    "judge/local_logprobs.yaml",
    "curate/local.yaml",
    "study_export/policy_vs_base.yaml",
    "study_export/rm_best_worst.yaml",
    "study_ingest/default.yaml",
    "prepare_model/embedded.yaml",
]
# sweeps are not a recipe config: `rlcw sweep FILE --dry-run` validates every run's config
SWEEPS = {
    "sweeps/build_pairs_grid.yaml": 4,
    "sweeps/grpo_lr.yaml": 6,
    "sweeps/train_rm_lora_rank.yaml": 4,
    "sweeps/quickstart_seeds.yaml": 6,
}
RECIPES = {
    "judge": (judge, judge.JudgeConfig),
    "curate": (curate, curate.CurateConfig),
    "study_export": (study_export, study_export.StudyExportConfig),
    "study_ingest": (study_ingest, study_ingest.StudyIngestConfig),
    "serve_rm": (serve_rm, serve_rm.ServeRMConfig),
    "prepare_model": (prepare_model, prepare_model.PrepareModelConfig),
    "outcome": (outcome, outcome.OutcomeConfig),
    "quickstart": (quickstart, quickstart.QuickstartConfig),
}
PROMPTS = [f"Write about lighthouse number {k}." for k in range(3)]


def _load(rel: str, *overrides):
    mod, cls = RECIPES[rel.split("/")[0]]
    return mod, load_config(cls, CONFIGS / rel, list(overrides))


def _run(rel: str, *overrides) -> tuple[dict, Path]:
    """The run's summary and its folder (<output_dir>/<run_name>)."""
    mod, cfg = _load(rel, *overrides)
    return mod.main(cfg), Path(cfg.output_dir) / cfg.run_name


def test_every_shipped_config_of_these_folders_is_run_or_listed():
    folders = {rel.split("/")[0] for rel in [*RECIPES, *SWEEPS]}
    shipped = {str(p.relative_to(CONFIGS)) for d in folders for p in (CONFIGS / d).glob("*.yaml")}
    listed = set(VALIDATE_ONLY) | set(RUN) | set(SWEEPS)
    assert shipped == listed, shipped ^ listed


def _stories(root: Path, system: str, n: int = 1) -> str:
    rows = [
        {"id": f"{system}{p}-{k}", "prompt": prompt, "story": f"{system} story {k}: the keeper climbs. " * (k + 1)}
        | {"system": system, "reference": f"Reference {p}."}
        for p, prompt in enumerate(PROMPTS)
        for k in range(n)
    ]
    return str(write_stories(root / f"{system}.jsonl", rows))


@pytest.mark.parametrize("rel", sorted(VALIDATE_ONLY))
def test_hub_or_server_configs_validate(rel, tmp_path):
    stories = f"data.stories=[{_stories(tmp_path, 'a')},{_stories(tmp_path, 'b')}]"
    paths = {"judge": [stories, f"ttcw_tests={tmp_path / 'ttcw_all_tests.json'}"]}.get(rel.split("/")[0], [])
    mod, cfg = _load(rel, f"output_dir={tmp_path}", *paths)
    if hasattr(mod, "validate"):
        mod.validate(cfg)
    elif mod is quickstart:  # no validate(): wire() is what its main() checks before the run folder exists
        quickstart.wire(cfg, str(tmp_path / cfg.run_name))


def test_serve_rm_builds_its_app(tmp_path, rm_run):
    _, cfg = _load("serve_rm/default.yaml", f"output_dir={tmp_path}", f"rm_path={rm_run['artifacts']['model']}")
    app = serve_rm.build_app(cfg)
    assert {"/score", "/health"} <= {route.path for route in app.routes}


@pytest.mark.parametrize("rel", sorted(SWEEPS))
def test_shipped_sweep_dry_runs(rel, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # a sweep's base config path is relative to the repository root
    assert sweep.cli([str(CONFIGS / rel), "--dry-run"]) == 0
    assert f"{SWEEPS[rel]} run(s) of" in capsys.readouterr().out


def _raw_posts(path: Path) -> str:
    """Two-story posts, 30 before the train cut-off and 10 after it: the 50-vote story beats the 20-vote one."""
    rows = []
    for i in range(40):
        t = datetime(2021 if i < 30 else 2023, 3, 1, tzinfo=timezone.utc).timestamp() + i * 86400
        good, bad = (100, 60) if i % 10 < 7 else (60, 100)
        texts = [" ".join([f"good-{i}"] + ["fine"] * (good - 1)), " ".join([f"bad-{i}"] + ["meh"] * (bad - 1))]
        rows.append(
            {"post_title": f"[WP] prompt {i}", "comment_texts": texts, "comment_scores": [50, 20]}
            | {"comment_times": [t + 86400, t]}
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _answer(key_path: str, out: Path) -> Path:
    """A rater who always prefers the tuned system (read through the key)."""
    key = json.loads(Path(key_path).read_text())
    out.mkdir()
    for pid, packet in key["packets"].items():
        answers = []
        for item_id in packet["item_ids"]:
            entry = key["items"][item_id]
            label = "B" if entry["kind"] == "attention" else ("A" if entry["A"]["system"] == "tuned" else "B")
            answers.append({"item_id": item_id, **{d: label for d in DIMENSIONS}})
        head = {"format": "rlcw-study-answers/1", "packet_id": pid, "rater_id": packet["rater_id"]}
        (out / f"answers-{pid}.json").write_text(json.dumps(head | {"study_id": key["study_id"], "answers": answers}))
    return out


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, tiny_model_dir, rm_run):
    """Runs every offline shipped config once; returns (summary, run folder) by config."""
    root = tmp_path_factory.mktemp("shipped_other")
    out, res = f"output_dir={root}", {}
    base, tuned = _stories(root, "base"), _stories(root, "tuned")
    stories = f"data.stories=[{tuned},{base}]"
    script = f"client.script={CONFIGS / 'judge' / 'scripted_replies.jsonl'}"
    res["judge/scripted.yaml"] = _run("judge/scripted.yaml", out, stories, script, "n_bootstrap=20")
    local = [f"client.model={tiny_model_dir}", "data.max_prompts=2", "n_bootstrap=20"]
    res["judge/local_logprobs.yaml"] = _run("judge/local_logprobs.yaml", out, stories, *local)
    raw = f"train.source={_raw_posts(root / 'wp_posts.jsonl')}"
    res["curate/local.yaml"] = _run("curate/local.yaml", out, raw, f"rules.tokenizer={tiny_model_dir}")
    res["study_export/policy_vs_base.yaml"] = _run("study_export/policy_vs_base.yaml", out, stories)
    samples, rm = f"data.stories=[{_stories(root, 'policy', n=3)}]", f"data.rm_dir={rm_run['artifacts']['model']}"
    res["study_export/rm_best_worst.yaml"] = _run("study_export/rm_best_worst.yaml", out, samples, rm)
    key = res["study_export/policy_vs_base.yaml"][0]["artifacts"]["key"]
    answers = f"answers=[{_answer(key, root / 'answers')}]"
    res["study_ingest/default.yaml"] = _run("study_ingest/default.yaml", out, f"key={key}", answers, "n_bootstrap=20")
    res["prepare_model/embedded.yaml"] = _run("prepare_model/embedded.yaml", out, f"model.name={tiny_model_dir}")
    return res


# the main artifact of each run
ARTIFACT = {
    "judge": "rankings",
    "curate": "train",
    "study_export": "key",
    "study_ingest": "results",
    "prepare_model": "model",
}


@pytest.mark.parametrize("rel", RUN)
def test_offline_shipped_config_runs(shipped, rel):
    summary, folder = shipped[rel]
    assert summary["status"] == "completed", summary.get("error")
    assert Path(summary["artifacts"][ARTIFACT[rel.split("/")[0]]]).exists()
    written = json.loads((folder / "summary.json").read_text())
    assert written["status"] == "completed" and written["command"] == summary["command"]
    assert (folder / "config.yaml").is_file()
    if rel == "study_ingest/default.yaml":
        assert summary["metrics"]["win_rate/tuned"] == 1.0  # the answers were read back through the key
