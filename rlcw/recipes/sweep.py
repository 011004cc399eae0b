"""Run a grid of overrides of one command, locally one after another or as a Slurm job array.

What: a sweep file names the command, an optional base config, fixed overrides and the grids:
`grid` (every combination: cartesian product) and `zip` (lists of equal length taken together,
one more axis of the product). Every run's full config is validated against the command's
schema (`rlcw.config.load_config`) BEFORE anything runs or is submitted, so a misspelt key or
a wrong type fails at once. Each run gets `output_dir=<output_dir>/<name>` and a distinct
`run_name=<name>-<index>`; the list is saved in `<output_dir>/<name>/sweep.json` (index, run
name, overrides), which `rlcw summarize` joins to the runs' summaries.
`--slurm` freezes the sweep at submission: the base config is copied to
`<output_dir>/<name>/sweep_config.yaml` and each array task runs `rlcw sweep <...>/sweep.json --index I`,
reading that manifest (absolute output folder, fixed overrides, runs), so editing the sweep YAML or
the base config while tasks wait in the queue changes nothing that was submitted.
Not here: early stopping, Bayesian search, several commands in one sweep.

    rlcw sweep configs/sweeps/build_pairs_grid.yaml --dry-run     # print the runs, run nothing
    rlcw sweep configs/sweeps/build_pairs_grid.yaml               # run them here, one after another
    rlcw sweep configs/sweeps/build_pairs_grid.yaml --slurm       # sbatch --array=0-(N-1) slurm/sweep_array.sh <run>/sweep.json
    rlcw sweep configs/sweeps/build_pairs_grid.yaml --index 2     # one run (what each array task does)
    rlcw summarize runs/sweeps/pairs-grid                         # one table of every run

Sweep file (paths relative to the folder you run from; --slurm submits from the repo root):

    name: pairs-grid
    command: build-pairs
    config: configs/build_pairs/default.yaml    # optional
    output_dir: runs/sweeps                     # default
    overrides: [data.eval_fraction=0.3]         # every run
    grid: {seed: [0, 1], data.chunk_sentences: [3, 4]}
    zip: {}                                     # e.g. {train.learning_rate: [1e-4, 3e-4], train.max_steps: [20, 10]}
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_json

FILE_KEYS = {"name", "command", "config", "output_dir", "overrides", "grid", "zip"}
RESERVED = {"output_dir", "run_name"}  # set by the sweep for each run
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Sweep:
    name: str
    command: str
    config: str | None
    output_dir: str
    fixed: list[str]
    runs: list[dict] = field(default_factory=list)  # {"index", "run_name", "overrides": {key: value}}

    @property
    def root(self) -> Path:
        return Path(self.output_dir) / self.name

    def argv(self, run: dict) -> list[str]:
        """`rlcw` arguments of one run."""
        args = [self.command] + (["--config", self.config] if self.config else [])
        return (
            args
            + self.fixed
            + [f"{k}={format_value(v)}" for k, v in run["overrides"].items()]
            + [f"output_dir={self.root}", f"run_name={run['run_name']}"]
        )


def format_value(value) -> str:
    """A value as the right-hand side of a `key=value` override (YAML flow syntax)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def expand(grid: dict[str, list], zipped: dict[str, list]) -> list[dict]:
    """Every override set: the product of the grid axes and the zipped axis, grid keys varying slowest."""
    axes = [[{k: v} for v in values] for k, values in grid.items()]
    if zipped:
        n = len(next(iter(zipped.values())))
        axes.append([{k: zipped[k][i] for k in zipped} for i in range(n)])
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes)]


def _check_axes(axes, what: str, where: str) -> dict[str, list]:
    if axes is None:
        return {}
    if not isinstance(axes, dict):
        raise RlcwError(f"'{what}' must be a mapping of key -> list of values", where=where)
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise RlcwError(
                f"'{what}.{key}' must be a non-empty list of values", where=where, hint=f"{what}: {{{key}: [a, b]}}"
            )
        if key in RESERVED:
            raise RlcwError(
                f"'{key}' cannot be swept: the sweep sets it for each run",
                where=where,
                hint="set output_dir at the top of the sweep file",
            )
    return axes


def load_sweep(path: str | Path) -> Sweep:
    """Read a sweep file (or the frozen sweep.json of a submission), expand it and validate every run's config."""
    from omegaconf import OmegaConf

    from rlcw.commands import COMMANDS

    where = str(path)
    if not Path(path).is_file():
        raise RlcwError("sweep file not found", where=where, hint="examples: configs/sweeps/*.yaml")
    if Path(path).suffix == ".json":
        return load_frozen(path)
    try:
        data = OmegaConf.to_container(OmegaConf.load(path)) or {}
    except Exception as exc:  # yaml errors carry line numbers
        raise RlcwError(f"cannot parse YAML: {exc}", where=where) from None
    if not isinstance(data, dict):
        raise RlcwError("top level must be a mapping", where=where)
    unknown = set(data) - FILE_KEYS
    if unknown:
        raise RlcwError(
            f"unknown sweep key '{sorted(unknown)[0]}'",
            where=where,
            hint=f"sweep keys: {', '.join(sorted(FILE_KEYS))}",
        )
    for key in ("name", "command"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise RlcwError(f"'{key}' is required", where=where)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", data["name"]):
        raise RlcwError(f"name '{data['name']}' may only use letters, digits, '.', '_' and '-'", where=where)
    command = data["command"]
    if command not in COMMANDS or COMMANDS[command][1] is None:
        raise RlcwError(
            f"'{command}' is not a command with a config",
            where=f"{where} key 'command'",
            hint="e.g. build-pairs, train-rm, grpo",
        )
    grid, zipped = _check_axes(data.get("grid"), "grid", where), _check_axes(data.get("zip"), "zip", where)
    if len({len(v) for v in zipped.values()}) > 1:
        raise RlcwError(
            "the lists under 'zip' must have the same length: "
            + ", ".join(f"{k}={len(v)}" for k, v in zipped.items()),
            where=where,
        )
    if set(grid) & set(zipped):
        raise RlcwError(f"key '{sorted(set(grid) & set(zipped))[0]}' is in both grid and zip", where=where)
    fixed = data.get("overrides") or []
    if not isinstance(fixed, list) or not all(isinstance(o, str) for o in fixed):
        raise RlcwError("'overrides' must be a list of key=value strings", where=where)
    sweep = Sweep(data["name"], command, data.get("config"), str(data.get("output_dir", "runs/sweeps")), fixed)
    sweep.runs = [
        {"index": i, "run_name": f"{sweep.name}-{i:03d}", "overrides": o} for i, o in enumerate(expand(grid, zipped))
    ]
    validate(sweep, where)
    return sweep


def load_frozen(path: str | Path) -> Sweep:
    """The sweep as submitted: the manifest `freeze` wrote (runs, fixed overrides, frozen base config)."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        sweep = Sweep(
            data["name"], data["command"], data["frozen_config"], data["output_dir"], data["overrides"], data["runs"]
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise RlcwError(
            f"not a frozen sweep manifest ({exc})", where=where, hint="written by `rlcw sweep FILE --slurm`"
        ) from None
    validate(sweep, where)
    return sweep


def validate(sweep: Sweep, where: str) -> None:
    """Load every run's config (defaults <- base config <- overrides); the first problem is an error."""
    from rlcw.commands import COMMANDS
    from rlcw.config import load_config

    module_name, cls_name, _ = COMMANDS[sweep.command]
    cls = getattr(importlib.import_module(module_name), cls_name)
    for run in sweep.runs:
        argv = sweep.argv(run)
        overrides = argv[3:] if sweep.config else argv[1:]
        try:
            load_config(cls, sweep.config, overrides)
        except RlcwError as exc:
            raise RlcwError(
                f"run {run['index']} ({run['run_name']}) is invalid, nothing was run: {exc}", where=where
            ) from None


def write_manifest(sweep: Sweep, source: str) -> Path:
    return atomic_write_json(
        sweep.root / "sweep.json",
        {
            "name": sweep.name,
            "command": sweep.command,
            "config": sweep.config,
            "sweep_file": source,
            "created_at": time.time(),
            "runs": sweep.runs,
        },
    )


def freeze(sweep: Sweep, source: str) -> Path:
    """Fix the sweep as submitted: absolute output folder, a copy of the base config, the manifest.

    Returns the manifest (`<root>/sweep.json`) the array tasks read instead of the editable files."""
    sweep.output_dir = str(Path(sweep.output_dir).resolve())
    frozen = None
    if sweep.config:
        frozen = sweep.root / "sweep_config.yaml"
        frozen.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sweep.config, frozen)
    manifest = write_manifest(sweep, source)
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data.update(output_dir=sweep.output_dir, overrides=sweep.fixed, frozen_config=str(frozen) if frozen else None)
    return atomic_write_json(manifest, data)


def run_local(sweep: Sweep, runs: list[dict]) -> int:
    """Run each as `python -m rlcw ...` in turn; a failed run is reported and the rest still run."""
    failed = []
    for run in runs:
        argv = [sys.executable, "-m", "rlcw"] + sweep.argv(run)
        print(f"[sweep] run {run['index'] + 1}/{len(sweep.runs)}: {' '.join(argv[3:])}", flush=True)
        if subprocess.run(argv).returncode != 0:
            failed.append(run["run_name"])
    if failed:
        print(f"[sweep] {len(failed)} of {len(runs)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def log_folder(logs: str | None) -> Path:
    return Path(logs).resolve() if logs else REPO / "logs"


def sbatch_command(sweep_file: str, n_runs: int, name: str, logs: str | None, max_parallel: int | None) -> list[str]:
    """sbatch for the array; the log folder is absolute (sbatch opens it before any task runs)."""
    array = f"0-{n_runs - 1}" + (f"%{max_parallel}" if max_parallel else "")
    cmd = ["sbatch", "--parsable", f"--array={array}", f"--job-name=rlcw-sweep-{name}"]
    cmd.append(f"--output={log_folder(logs)}/%x-%A_%a.out")
    return cmd + [str(REPO / "slurm" / "sweep_array.sh"), str(Path(sweep_file).resolve())]


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlcw sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_file")
    parser.add_argument("--dry-run", action="store_true", help="print the runs (validated) and stop")
    parser.add_argument("--slurm", action="store_true", help="submit a Slurm job array, one task per run")
    parser.add_argument("--index", type=int, help="run only this index (0-based; what each array task does)")
    parser.add_argument("--logs", help="--slurm: folder for the array tasks' logs (default logs/ in the repo)")
    parser.add_argument("--max-parallel", type=int, help="--slurm: at most this many tasks at once")
    parser.add_argument("--json", action="store_true", help="print the run list as JSON")
    args = parser.parse_args(argv)
    sweep = load_sweep(args.sweep_file)
    runs = sweep.runs
    if args.index is not None:
        if not 0 <= args.index < len(runs):
            raise RlcwError(
                f"--index {args.index} is out of range: this sweep has {len(runs)} runs (0-{len(runs) - 1})",
                where=args.sweep_file,
            )
        runs = [runs[args.index]]
    if args.dry_run or args.json:
        if args.json:
            print(json.dumps([{**r, "argv": ["rlcw"] + sweep.argv(r)} for r in runs], indent=2))
        else:
            for r in runs:
                print(f"{r['index']:>3}  rlcw {' '.join(sweep.argv(r))}")
            print(
                f"{len(runs)} run(s) of '{sweep.command}', all configs valid"
                + (" (dry run: nothing ran)" if args.dry_run else "")
            )
        if args.slurm:
            print(
                "would submit: "
                + " ".join(sbatch_command(args.sweep_file, len(sweep.runs), sweep.name, args.logs, args.max_parallel))
            )
        return 0
    if args.slurm:
        if args.index is not None:
            raise RlcwError("--slurm submits every run; --index runs one run here", hint="use one of them")
        manifest = freeze(sweep, str(Path(args.sweep_file).resolve()))
        cmd = sbatch_command(str(manifest), len(runs), sweep.name, args.logs, args.max_parallel)
        log_folder(args.logs).mkdir(parents=True, exist_ok=True)
        try:
            out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        except FileNotFoundError:
            raise RlcwError(
                "sbatch not found: is this a Slurm login node?", hint="run locally without --slurm"
            ) from None
        if out.returncode != 0:
            raise RlcwError(f"sbatch failed: {out.stderr.strip()}", where=" ".join(cmd))
        job = out.stdout.strip().split(";")[0]
        print(
            f"submitted array job {job}: {len(runs)} task(s); results in {sweep.root}; then: rlcw summarize {sweep.root}"
        )
        return 0
    if args.index is None:
        write_manifest(sweep, str(Path(args.sweep_file).resolve()))
    return run_local(sweep, runs)
