"""Periodic evaluation leaves the training RNG stream as it found it (rlcw.measure.periodic.PeriodicEval)."""

from __future__ import annotations

import torch

from rlcw.measure.periodic import PeriodicEval
from rlcw.runs import RunDir


def test_evaluation_restores_the_global_rng(tmp_path):
    def sample(model, step: int) -> list[dict]:
        torch.manual_seed(1234)  # what generate_stories does per batch
        torch.rand(3)
        return [{"id": "p1", "prompt": "p", "story": "a story", "system": f"policy@{step}"}]

    run = RunDir.create(str(tmp_path), "run", "test", "seed: 0\n")
    periodic = PeriodicEval(run, sample, [], every_steps=1)
    torch.manual_seed(7)
    want = torch.rand(4)  # the draws training would make next
    torch.manual_seed(7)
    periodic.begin(None, 0, is_main=True)
    periodic.step_end(None, 1, is_main=True)
    assert torch.equal(torch.rand(4), want)
    assert (run.samples / "step_000001.jsonl").is_file()
