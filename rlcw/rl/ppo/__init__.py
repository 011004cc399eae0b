"""rlcw's own PPO: trainer, maths, rollout, value model, checkpoint."""
