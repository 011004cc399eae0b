"""rlcw: RL fine-tuning for creative writing driven by learned rewards.

Run `rlcw --help` for the commands; `scripts/quickstart.sh` runs the whole loop on CPU.
"""

__version__ = "0.1.0"
