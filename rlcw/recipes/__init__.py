"""One module per command: docstring -> Config dataclass -> main(cfg)."""
