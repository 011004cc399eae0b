"""RL training: GRPO on TRL (rl.grpo), rlcw's own PPO (rl.ppo), and the resume state both save (rl.aux_state)."""
