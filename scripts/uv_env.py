"""Translate pip's configuration into uv's environment, so `uv pip install` sees the same packages as pip.

    eval "$(python scripts/uv_env.py)"      # what scripts/setup.sh does before `uv pip install`

uv reads none of pip's configuration files or PIP_* variables. This reads `pip config list` (files and
PIP_* variables, pip's precedence: global < install section < environment) and prints `export` lines for
index-url, extra-index-url, find-links, constraint and cert. With extra indexes it also asks uv for pip's
behaviour of taking the best version across all indexes (uv's default stops at the first index that has a
package). Variables already set for uv are left alone. Standard library only: it runs before rlcw is installed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

# pip option -> (uv variable, separator uv expects between several values)
UV_VARS = {
    "index-url": ("UV_INDEX_URL", " "),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
}
SCOPE_RANK = {"global": 0, "install": 1, ":env:": 2}  # later wins, as in pip


def parse_pip_config(text: str) -> dict[str, str]:
    """{option: value} from `pip config list` lines such as `global.find-links='/opt/wheels'`."""
    found: dict[str, tuple[int, str]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, raw = line.partition("=")
        scope, dot, option = key.rpartition(".")
        if not sep or not dot:
            raise ValueError(f"`pip config list` line {n}: expected scope.option='value', got {line!r}")
        if scope not in SCOPE_RANK:
            continue  # other commands' sections (download, wheel, ...)
        value = " ".join(shlex.split(raw))  # pip prints the value quoted
        if option not in found or SCOPE_RANK[scope] >= found[option][0]:
            found[option] = (SCOPE_RANK[scope], value)
    return {k: v for k, (_, v) in found.items()}


def uv_exports(pip_options: dict[str, str], environ: dict[str, str]) -> list[str]:
    """`export NAME=value` lines for uv; variables the environment already sets are kept."""
    out = {}
    for option, (name, sep) in UV_VARS.items():
        if option in pip_options and name not in environ:
            out[name] = sep.join(pip_options[option].split())
    if "extra-index-url" in pip_options and "UV_INDEX_STRATEGY" not in environ:
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"  # pip compares every index; uv's default stops at the first
    return [f"export {k}={shlex.quote(v)}" for k, v in out.items()]


def main() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    print("\n".join(uv_exports(parse_pip_config(listed), dict(os.environ))))


if __name__ == "__main__":
    main()
