"""Rewards: RM rendering, the BT scorer as a TRL reward callable, length terms."""
