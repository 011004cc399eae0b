"""`rlcw configs [command]`: the shipped configs with their first comment line; `--copy NAME DEST` copies one.

    rlcw configs                         # every command's configs
    rlcw configs grpo                    # configs/grpo/*.yaml
    rlcw configs --copy grpo/cpu.yaml my_grpo.yaml
    rlcw grpo --config my_grpo.yaml

NAME is `<command>/<file>` (`.yaml` may be left out) or a path under configs/. Configs ship with the source
checkout (`configs/` beside the `rlcw` package).
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

from rlcw.errors import RlcwError

ROOT = Path(__file__).resolve().parents[2] / "configs"


def first_comment(path: Path) -> str:
    """The first comment line of a YAML file (what it is), without the `#`."""
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        if line.strip().startswith("#"):
            return line.strip().lstrip("#").strip()
        if line.strip():
            break
    return "(no comment)"


def shipped(command: str | None = None) -> list[Path]:
    """Every shipped config YAML (of one command: `configs/<command with _>/`), sorted."""
    if not ROOT.is_dir():
        raise RlcwError("no configs/ folder beside the rlcw package", where=str(ROOT), hint="use a source checkout")
    folders = sorted(p for p in ROOT.iterdir() if p.is_dir())
    if command:
        name = command.replace("-", "_")
        if not (ROOT / name).is_dir():
            close = difflib.get_close_matches(name, [p.name for p in folders], n=2)
            raise RlcwError(
                f"no configs for '{command}'",
                where=str(ROOT),
                hint=f"did you mean {' or '.join(close)}?"
                if close
                else f"folders: {', '.join(p.name for p in folders)}",
            )
        folders = [ROOT / name]
    return [f for folder in folders for f in sorted(folder.glob("*.yaml"))]


def resolve_name(name: str) -> Path:
    """`grpo/cpu`, `grpo/cpu.yaml`, `configs/grpo/cpu.yaml` -> the shipped file; an error suggesting the closest."""
    rel = name.removeprefix("configs/")
    rel = rel if rel.endswith((".yaml", ".yml")) else rel + ".yaml"
    path = ROOT / rel
    if path.is_file():
        return path
    names = [str(p.relative_to(ROOT)) for p in shipped()]
    close = difflib.get_close_matches(rel, names, n=3, cutoff=0.5)
    raise RlcwError(
        f"no shipped config '{name}'",
        hint=f"did you mean {', '.join(close)}?" if close else "`rlcw configs` lists them",
    )


def listing(command: str | None = None) -> str:
    files = shipped(command)
    width = max(len(str(f.relative_to(ROOT))) for f in files)
    return "\n".join(f"  {str(f.relative_to(ROOT)):<{width}}  {first_comment(f)}" for f in files)


def cli(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    if argv and argv[0] == "--copy":
        if len(argv) != 3:
            raise RlcwError("--copy needs NAME and DEST", hint="rlcw configs --copy grpo/cpu.yaml my_grpo.yaml")
        src, dest = resolve_name(argv[1]), Path(argv[2])
        dest = dest / src.name if dest.is_dir() else dest
        if dest.exists():
            raise RlcwError("the destination exists", where=str(dest), hint="choose another name or remove it")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        print(f"[rlcw] copied {src.relative_to(ROOT.parent)} -> {dest}; run it with --config {dest}")
        return 0
    if len(argv) > 1:
        raise RlcwError(f"unexpected arguments {argv[1:]}", hint="rlcw configs [command] | --copy NAME DEST")
    print(listing(argv[0] if argv else None))
    return 0
