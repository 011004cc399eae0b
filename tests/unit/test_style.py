"""The formatter and linter are part of the unit tier: `ruff check` and `ruff format --check` must be clean.

Rules live in pyproject.toml ([tool.ruff]: line length 119, rule sets E, F, I, UP, B, E501 off).
Fix a failure with `ruff format . && ruff check --fix .`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if exe is None:
        pytest.fail("ruff is not installed: `pip install -e .[dev]` installs it (scripts/setup.sh does)")
    return [exe]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_is_clean(args):
    proc = subprocess.run(_ruff() + args, cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"ruff {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


def test_ruff_config_is_the_documented_one():
    import tomllib  # Python >= 3.11

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert conf["line-length"] == 119
    assert set(conf["lint"]["select"]) == {"E", "F", "I", "UP", "B"}
