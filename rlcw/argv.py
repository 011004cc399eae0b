"""The command line's words after `rlcw <command>`: the config file and the key=value overrides.

    config, overrides = split_args(["--config", "c.yaml", "train.max_steps=3", "--learning_rate", "1e-5"], keys)

`--config FILE` once; `key=value` dotlist overrides (OmegaConf); HF/TRL-style `--name value` flags read as the one
config key they mean (`flag_key`). Used by the CLI and by `rlcw plan`, which reads a job's command line.
"""

from __future__ import annotations

import sys

from rlcw.config import KEY_ALIASES, close_keys
from rlcw.errors import RlcwError


def flag_key(flag: str, keys: list[str]) -> str:
    """The config key a `--name` flag means (HF/TRL habit, `--learning_rate 1e-5`): a full dotted key, or the one
    key whose leaf is `name` or its alias; an error naming the candidates otherwise."""
    name = flag.lstrip("-").replace("-", "_")
    if name in keys:
        return name
    leaf = KEY_ALIASES.get(name.lower(), name)
    hits = [k for k in keys if k.rpartition(".")[2] == leaf]
    if len(hits) == 1:
        return hits[0]
    hint = (
        f"several keys end in '{leaf}': {', '.join(hits)}; write one as key=value"
        if hits
        else "options: --config FILE, --help; everything else is key=value"
        + (f" (did you mean {', '.join(close_keys(name, keys))}?)" if close_keys(name, keys) else "")
    )
    raise RlcwError(f"unknown option '{flag}'", hint=hint)


def split_args(args: list[str], keys: list[str] | None = None) -> tuple[str | None, list[str]]:
    """(config file, key=value overrides); `--key value` / `--key=value` become `key=value` when `keys` names one."""
    config, overrides, i = None, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--config" or arg.startswith("--config="):
            if arg == "--config" and i + 1 >= len(args):
                raise RlcwError("--config needs a file path")
            path = args[i + 1] if arg == "--config" else arg.split("=", 1)[1]
            if config is not None:
                raise RlcwError(
                    f"--config given twice ({config} and {path}); one file is read",
                    where="command line",
                    hint="merge the two files into one, or keep one --config and give the other's keys as key=value",
                )
            config, i = path, i + (2 if arg == "--config" else 1)
            continue
        if arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            key = flag_key(flag, keys or [])
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    raise RlcwError(f"{flag} needs a value", hint=f"{key}=VALUE")
                value, i = args[i + 1], i + 1
            print(f"[rlcw] {flag} read as {key}={value}", file=sys.stderr, flush=True)
            overrides.append(f"{key}={value}")
        elif "=" not in arg and arg.lower().endswith((".yaml", ".yml")):
            raise RlcwError(f"'{arg}' looks like a config file", hint=f"use --config {arg}")
        else:
            overrides.append(arg)
        i += 1
    return config, overrides
