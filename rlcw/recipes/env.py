"""`rlcw env`: a short report of this machine and install to paste into a bug report (like `trl env`).

    rlcw env

It says: rlcw's version (and git commit in a checkout), Python, the platform, the CPU model with the ISA flags
that change numerics and speed (avx2, avx512f, avx512_bf16, amx_bf16; machines differ here), the versions of
torch, transformers, trl, peft, accelerate, deepspeed and omegaconf read from package metadata (nothing is
imported), CUDA (a CPU build of torch says so from its version; otherwise torch is imported in a child
process given ~1.5 s), and rlcw's cache ($RLCW_CACHE) with the state of the embedded model. It takes about a
second and writes nothing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

from rlcw import __version__

PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "omegaconf")
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
CUDA_PROBE_S = 1.5
_CUDA_PROBE = (
    "import torch; c = torch.cuda; n = c.device_count() if c.is_available() else 0; "
    "print(f'available, {n} GPU(s): ' + ', '.join(c.get_device_name(i) for i in range(n)) if n else 'not available')"
)


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpu_info(cpuinfo: str | None = None) -> tuple[str, dict[str, bool]]:
    """(CPU model, {ISA flag: present}) from /proc/cpuinfo (the platform's processor name elsewhere)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    model = fields.get("model name") or platform.processor() or "unknown"
    return model, {flag: flag in flags for flag in ISA_FLAGS}


def cuda_line(torch_version: str) -> str:
    """CUDA as torch sees it: a CPU build says so from its version; otherwise a child process imports torch (the
    report stays quick: past CUDA_PROBE_S it says how to check by hand)."""
    if torch_version == "not installed":
        return "torch is not installed"
    if "+cpu" in torch_version:
        return "not available (a CPU build of torch)"
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=CUDA_PROBE_S
        )
    except subprocess.TimeoutExpired:
        return f"not checked (importing torch took over {CUDA_PROBE_S} s): python -c 'import torch; print(torch.cuda.is_available())'"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else f"torch failed to import: {lines[-1] if lines else '?'}"


def rlcw_line() -> str:
    root = Path(__file__).resolve().parents[2]
    sha = None
    if (root / ".git").exists():  # a checkout; an installed package has no commit of its own
        from rlcw.runs import git_sha

        sha = git_sha()
    return f"{__version__}" + (f" (git {sha})" if sha else "")


def cache_lines() -> list[str]:
    from rlcw.models import (
        EMBEDDED_ALIAS,
        EMBEDDED_INSTALL,
        EMBEDDED_WHEEL,
        cache_dir,
        embedded_dir,
        embedded_prepared,
    )

    wheel = importlib.util.find_spec(EMBEDDED_WHEEL.replace("-", "_")) is not None
    if embedded_prepared():
        state = f"prepared in {embedded_dir()}"
    elif wheel:
        state = "not prepared yet: `rlcw prepare-model` (or the first run) converts it"
    else:
        state = f"not prepared, and its wheel is missing: {EMBEDDED_INSTALL}"
    source = "$RLCW_CACHE" if os.environ.get("RLCW_CACHE") else "default; set $RLCW_CACHE to move it"
    return [f"- rlcw cache: {cache_dir()} ({source})", f"- embedded model ({EMBEDDED_ALIAS}): {state}"]


def report() -> str:
    model, flags = cpu_info()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = {name: package_version(name) for name in PACKAGES}
    lines = [
        "Copy-paste the following information when you report a problem with rlcw:",
        "",
        f"- rlcw: {rlcw_line()}",
        f"- Python: {platform.python_version()} ({sys.executable})",
        f"- Platform: {platform.platform()}",
        f"- CPU: {model}; {cores} core(s) usable",
        "- CPU flags: " + ", ".join(f"{flag} {'yes' if on else 'no'}" for flag, on in flags.items()),
    ]
    lines += [f"- {name}: {version}" for name, version in versions.items()]
    lines.append(f"- CUDA: {cuda_line(versions['torch'])}")
    lines += cache_lines()
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        lines.append(f"- OMP_NUM_THREADS: {threads}")
    return "\n".join(lines)


def cli(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    if argv:
        from rlcw.errors import RlcwError

        raise RlcwError(f"rlcw env takes no arguments, got {' '.join(argv)}", hint="rlcw env")
    print(report())
    return 0
