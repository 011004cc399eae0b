"""`python -m rlcw ...` is `rlcw ...`."""

from rlcw.cli import main

main()
