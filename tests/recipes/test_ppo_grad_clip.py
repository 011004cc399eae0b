"""PPO clips the policy's and the value model's gradients separately (rlcw.rl.ppo.trainer.PPOTrainer.clip_gradients)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlcw.rl.ppo.trainer import PPOSettings, PPOTrainer


def test_large_value_gradient_does_not_shrink_the_policy_step():
    policy, value = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(2, 1, bias=False)
    trainer = PPOTrainer(
        policy, value, SimpleNamespace(eos_token_id=0), [], [], PPOSettings(max_grad_norm=1.0), run=None
    )
    policy.weight.grad = torch.tensor([[0.3, 0.4]])  # norm 0.5: under the limit
    value.weight.grad = torch.tensor([[60.0, 80.0]])  # norm 100: a large value error
    norms = trainer.clip_gradients()
    assert norms == pytest.approx({"ppo/grad_norm": 0.5, "ppo/value_grad_norm": 100.0})
    torch.testing.assert_close(
        policy.weight.grad, torch.tensor([[0.3, 0.4]])
    )  # one joint norm would scale it by ~0.01
    torch.testing.assert_close(value.weight.grad, torch.tensor([[0.6, 0.8]]))
