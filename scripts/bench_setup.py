"""Benchmark scripts/setup.sh with uv against pip, each from an EMPTY package cache, in the same run.

    python scripts/bench_setup.py                          # the quickstart's set-up (no extras), uv then pip
    python scripts/bench_setup.py --extras dev --order pip uv --json setup.json
    python scripts/bench_setup.py --model-cache ~/.cache/rlcw   # reuse a converted model (times the installs only)
    python scripts/bench_setup.py --conversion --repeats 2      # the GGUF conversion alone: transformers' loader
                                                                # as is against rlcw.models.parse_gguf_once

Each installer runs the real scripts/setup.sh in a fresh copy of this working tree (tracked and untracked,
not ignored files) under a temporary folder, with a fresh venv, fresh PIP_CACHE_DIR and UV_CACHE_DIR and (by
default) a fresh RLCW_CACHE, so downloads, wheel builds and the embedded model's conversion all count, as on a
new machine. It then imports every stage the quickstart runs in that venv, so a set-up that misses a
dependency fails here. Reports each phase's seconds (setup.sh prints them) and the ratio. The machine's other
load moves both numbers: alternate the order (--order) and repeat on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASE = re.compile(r"^set-up phase (.+): ([0-9.]+) s$")
QUICKSTART_IMPORTS = (
    "import rlcw.recipes.quickstart, rlcw.recipes.build_pairs, rlcw.recipes.train_rm, rlcw.recipes.grpo, "
    "rlcw.recipes.export, trl, peft"
)


def copy_tree(dest: Path) -> None:
    """The working tree as git sees it (tracked + untracked, minus ignored) into dest."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def parse_phases(log: str) -> dict[str, float]:
    """{phase: seconds} from setup.sh's "set-up phase NAME: S s" lines."""
    return {m[1]: float(m[2]) for m in map(PHASE.match, log.splitlines()) if m}


def run_setup(tool: str, extras: str, work: Path, model_cache: str | None) -> dict:
    repo = work / "repo"
    repo.mkdir(parents=True)
    copy_tree(repo)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    env.update(
        RLCW_INSTALLER=tool,
        RLCW_EXTRAS=extras,
        PIP_CACHE_DIR=str(work / "pip-cache"),
        UV_CACHE_DIR=str(work / "uv-cache"),
        RLCW_CACHE=model_cache or str(work / "rlcw-cache"),
    )
    start = time.perf_counter()
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=repo, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"{tool}: scripts/setup.sh failed (exit {proc.returncode}):\n{log[-3000:]}")
    check = subprocess.run(
        [str(repo / ".venv/bin/python"), "-c", QUICKSTART_IMPORTS], cwd=repo, env=env, capture_output=True, text=True
    )
    if check.returncode != 0:
        raise SystemExit(f"{tool}: the quickstart's imports fail after set-up:\n{check.stderr[-3000:]}")
    return {"tool": tool, "extras": extras, "wall_s": wall, "phases": parse_phases(log)}


def conversion(repeats: int) -> dict:
    """The embedded GGUF's load (tokenizer + fp32 model) with transformers' loader as is and with its metadata
    parsed once (rlcw.models.load_embedded_gguf), interleaved, in this process; checks both give the same
    weights and vocabulary."""
    import torch

    from rlcw.models import load_embedded_gguf

    times: dict[str, list[float]] = {"as is": [], "parsed once": []}
    for _ in range(repeats):
        loaded = {}
        for name, fast in (("as is", False), ("parsed once", True)):
            start = time.perf_counter()
            loaded[name] = load_embedded_gguf(fast=fast)
            times[name].append(time.perf_counter() - start)
        (tok_a, model_a), (tok_b, model_b) = loaded.values()
        b = model_b.state_dict()
        assert tok_a.get_vocab() == tok_b.get_vocab(), "the tokenizers differ"
        assert all(torch.equal(v, b[k]) for k, v in model_a.state_dict().items()), "the weights differ"
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(
        "GGUF load (tokenizer + model), median of "
        + f"{repeats}: as is {med['as is']:.1f} s, parsed once {med['parsed once']:.1f} s, "
        + f"{med['as is'] / med['parsed once']:.2f}x; same weights and vocabulary"
    )
    return {"conversion_s": times, "median_s": med}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--order", nargs="+", default=["uv", "pip"], choices=["uv", "pip"])
    p.add_argument("--extras", default="", help="RLCW_EXTRAS for both (default: none, what the quickstart installs)")
    p.add_argument("--model-cache", help="an RLCW_CACHE to reuse (default: a fresh one per run, conversion timed)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folders (printed)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--conversion", action="store_true", help="instead: time the GGUF conversion alone, both ways")
    p.add_argument("--repeats", type=int, default=2, help="with --conversion: interleaved passes")
    args = p.parse_args()
    if args.conversion:
        out = conversion(args.repeats)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        return
    top = Path(tempfile.mkdtemp(prefix="rlcw-bench-setup-"))
    results = []
    try:
        for i, tool in enumerate(args.order):
            r = run_setup(tool, args.extras, top / f"{i}-{tool}", args.model_cache)
            results.append(r)
            print(
                f"{tool}: {r['wall_s']:.1f} s (" + ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items()) + ")",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)
        else:
            print(f"kept {top}", file=sys.stderr)
    walls = {r["tool"]: r["wall_s"] for r in results}
    if {"uv", "pip"} <= walls.keys():
        print(f"pip / uv wall time: {walls['pip'] / walls['uv']:.2f}x (same run, empty caches)")
    if args.json:
        Path(args.json).write_text(json.dumps({"extras": args.extras, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
