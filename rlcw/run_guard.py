"""What keeps a run folder safe, checked before it is written and held while a run writes it.

    check_writable(Path("runs/grpo"), "output_dir")     # a folder rlcw can create and write (not a file, not read-only)
    check_cache(["smollm2-135m-instruct", ...])          # $RLCW_CACHE writable when the embedded model must be converted
    lock = lock_run_folder(Path("runs/grpo"))           # one process at a time; a second one is an error naming the PID
    lock.release()
    experiment_changes(old_config_yaml, new_config_yaml)  # [(key, old, new)] a resume would change (train.resume=changed)

The lock is `fcntl.flock` on `<run>/.rlcw.lock`, which holds the owner's PID: the kernel drops it when its process
exits, however it exits, so a lock left by a killed run never blocks the next one. One process may lock a folder
it already holds (nested stages) without blocking itself.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcw.config import leaf_values
from rlcw.errors import RlcwError

LOCK_FILE = ".rlcw.lock"
_HELD: dict[Path, int] = {}  # folder -> file descriptor of the locks this process holds


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(path: str | Path, key: str) -> None:
    """`path` (a folder that may not exist yet) can be created and written: its nearest existing part is a folder
    this process may write in. An error naming `key` otherwise; nothing is created."""
    path = Path(path).expanduser()
    there = _nearest_existing(path.absolute())
    if not there.is_dir():
        raise RlcwError(
            f"{there} is a file, not a folder" + ("" if there == path.absolute() else f" (needed for {path})"),
            where=key,
            hint=f"point {key} at a folder (it is created if missing)",
        )
    if not os.access(there, os.W_OK | os.X_OK):
        raise RlcwError(
            f"cannot write in {there}" + ("" if there == path.absolute() else f" (needed for {path})"),
            where=key,
            hint=f"point {key} at a folder you can write (read-only file system or no permission)",
        )


def check_cache(config_values: Iterable[object]) -> None:
    """$RLCW_CACHE can be written when a config names the embedded model and it is not converted yet (the first
    load writes it there): an error before any folder or model, not after a minute of conversion."""
    from rlcw.models import EMBEDDED_ALIAS, cache_dir, embedded_prepared

    if EMBEDDED_ALIAS in set(v for v in config_values if isinstance(v, str)) and not embedded_prepared():
        check_writable(cache_dir(), "$RLCW_CACHE")


@dataclass
class RunLock:
    """A held run-folder lock (`lock_run_folder`); `release` is idempotent."""

    folder: Path
    fd: int | None  # None: this process held the folder already (a nested stage), nothing to release

    def release(self) -> None:
        if self.fd is None:
            return
        _HELD.pop(self.folder, None)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


def lock_run_folder(folder: str | Path) -> RunLock:
    """Create `folder` if needed and lock it for this process; an RlcwError naming the folder and the PID that
    holds it when another process does."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _HELD:
        return RunLock(key, None)
    fd = os.open(key / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise RlcwError(
            f"the run folder is in use by another rlcw process (PID {holder})",
            where=str(folder),
            hint="wait for that run to end (or stop it), or give this one another run_name",
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = fd
    return RunLock(key, fd)


# What a resumed run may change: where it writes, how often it logs, saves, samples and evaluates, how far it goes,
# what it watches. Every other key (model, data, reward, batch and group sizes, rollout, learning rate, LoRA shape,
# seed, ...) defines the experiment its checkpoints belong to. A name ending in "." is a whole section.
RESUME_MAY_CHANGE = (
    "output_dir",
    "run_name",
    "overwrite",
    "train.resume",
    "train.max_steps",
    "train.logging_steps",
    "train.save_steps",
    "train.save_total_limit",
    "train.report_to",
    "train.samples_every",
    "train.samples_k",
    "train.log_kl_every",
    "train.log_kl_to_start",
    "train.eval_steps",
    "train.eval_batch_size",
    "train.eval_before",
    "eval.",
    "monitor.",
    "probe.",
)
UNSET = "(unset)"


def _may_change(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUME_MAY_CHANGE)


def experiment_changes(old_yaml: str, new_yaml: str) -> list[tuple[str, Any, Any]]:
    """(key, old, new) for every setting that defines the experiment and differs between a run's saved config.yaml
    and the config resuming it (`RESUME_MAY_CHANGE` aside); a key on one side only (a reward spec added, a key
    rlcw added since) reads as UNSET on the other."""
    from omegaconf import OmegaConf

    old, new = (leaf_values(OmegaConf.to_container(OmegaConf.create(t)) or {}) for t in (old_yaml, new_yaml))
    keys = [k for k in new if not _may_change(k)] + [k for k in old if k not in new]
    changed = [(k, old.get(k, UNSET), new.get(k, UNSET)) for k in keys]
    return [(k, a, b) for k, a, b in changed if a != b and not _may_change(k)]


def changed_lines(changes: list[tuple[str, Any, Any]]) -> str:
    """`key old -> new` for each change, joined with '; '."""
    return "; ".join(
        f"{key} {old if old is UNSET else repr(old)} -> {new if new is UNSET else repr(new)}"
        for key, old, new in changes
    )
