"""RLOO on TRL's RLOOTrainer with rlcw's per-step extras."""
