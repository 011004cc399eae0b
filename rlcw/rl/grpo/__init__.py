"""The GRPO extension of TRL: trainer, fast rollout, importance-sampling correction, report."""
