"""Shared fixtures and the tier rules.

Tiers are pytest markers, set by folder: tests/unit -> unit, tests/recipes -> recipe,
tests/integration -> integration. Under CI=true a skipped integration test (or a skipped
test that needs the shared data) fails the run: a failed install must not turn green.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# TELL ME A STORY: ../shared/data next to the clone, or wherever RLCW_TMAS_DIR points.
SHARED_DATA = Path(os.environ.get("RLCW_TMAS_DIR") or ROOT.parent / "shared" / "data" / "tell-me-a-story")
IN_CI = os.environ.get("CI", "").lower() == "true"
_TIERS = {"unit": "unit", "recipes": "recipe", "integration": "integration"}
_ci_skips: list[str] = []


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = _TIERS.get(Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0])
        if tier:
            item.add_marker(getattr(pytest.mark, tier))


def pytest_runtest_logreport(report):
    if IN_CI and report.skipped and ("integration" in report.keywords or "needs_data" in report.keywords):
        _ci_skips.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _ci_skips:
        print(f"\nCI=true and {len(_ci_skips)} integration/data test(s) were skipped: failing the run.")
        for nodeid in _ci_skips:
            print(f"  skipped: {nodeid}")
        session.exitstatus = 1


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_data: uses ../shared/data (skips outside CI when absent)")


@pytest.fixture(scope="session")
def tmas_dir() -> Path:
    """The shared TELL ME A STORY data; absent outside CI -> skip, absent in CI -> fail."""
    if not SHARED_DATA.is_dir():
        if IN_CI:
            pytest.fail(f"CI=true but the shared data is missing: {SHARED_DATA}")
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tokenizer():
    """The real SmolLM2 tokenizer (from the embedded model's converted cache)."""
    from rlcw.models import EMBEDDED_ALIAS, load_tokenizer

    return load_tokenizer(EMBEDDED_ALIAS)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A tiny random-weight Llama causal LM with the real tokenizer and chat template, saved to disk."""
    import torch
    from transformers import LlamaForCausalLM

    from rlcw.models import tiny_llama_config

    torch.manual_seed(0)
    config = tiny_llama_config(
        len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.do_sample = True
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def short_references(tmp_path) -> Path:
    """A references file (`rollout.references`) with a 2-word story for every bundled training prompt: short enough
    for the tests' 8-token completion cap, where the bundled references do not fit."""
    from rlcw.data.prompts import load_prompts
    from rlcw.data.records import write_stories

    path = tmp_path / "short_references.jsonl"
    rows = load_prompts("bundled", "train")
    write_stories(
        path, [{"id": r["id"], "prompt": r["prompt"], "story": "The end.", "system": "reference"} for r in rows]
    )
    return path
