"""Cluster planning without a GPU: batch geometry and per-GPU memory of a training config (`rlcw plan`)."""
