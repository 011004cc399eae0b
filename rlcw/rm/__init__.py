"""Reward models: the RM folder's format (rendering, ensembles, two heads, length control), scoring and training."""
