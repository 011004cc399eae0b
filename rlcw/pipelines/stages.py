"""The stage runner of a pipeline: recipes run in-process, each in its own folder, and the pipeline's own cached
steps, each reused when it completed under the same settings.

A recipe stage's record is its run folder's `config.yaml` and `summary.json` (written by the recipe itself); a
cached step's record is `<folder>/done.json` ({"key": settings, "wall_time_s": ...}, written last). A stage re-runs
when its settings drifted (`config_drift`), when it never completed, or, under `chain=True`, when it started before
an earlier stage of the pipeline last finished (an earlier stage ran again, so its inputs changed). Every stage
prints one line as it starts (`[<label>] <name> ...`) or is reused (`... cached ...`), and its wall time goes into
`timings`.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcw.config import leaf_values, to_yaml, translate_retired
from rlcw.io import atomic_write_json
from rlcw.runs import last_checkpoint, move_aside, resume_mode


def config_drift(before: str, cfg) -> tuple[list[str], list[str]]:
    """(changed, added) dotted keys between a run folder's config YAML `before` and the config `cfg`: changed =
    a value that differs, a key `cfg` no longer has, or a key `before` lacks set away from its default; added =
    keys `before` lacks that hold their defaults (new in rlcw since the stage ran: the default is the code's
    stand-in for running without them, as for any other code change). Keys retired since are read in their new
    places first (`rlcw.config.translate_retired`): a moved key is compared under its new name, a removed one
    not at all."""
    from omegaconf import OmegaConf

    old = translate_retired(leaf_values(OmegaConf.to_container(OmegaConf.create(before)) or {}), type(cfg))
    new = leaf_values(OmegaConf.to_container(OmegaConf.structured(cfg)))
    default = leaf_values(OmegaConf.to_container(OmegaConf.structured(type(cfg))))
    added = sorted(k for k in new if k not in old)
    changed = [k for k in old if k not in new or new[k] != old[k]]
    changed += [k for k in added if k not in default or default[k] != new[k]]  # set away from its default: a change
    return sorted(changed), [k for k in added if k not in changed]


def continued(stage_cfg):
    """A copy of a training stage's config with `train.resume=auto` (None for a stage without train.resume, or
    one whose resume is already set by the user)."""
    train = getattr(stage_cfg, "train", None)
    if train is None or not hasattr(train, "resume") or resume_mode(train.resume) != "false":
        return None
    out = copy.deepcopy(stage_cfg)
    out.train.resume = "auto"
    return out


class Stages:
    """Runs recipe stages (`run`) and a pipeline's own steps (`cached`), reusing what completed under the same
    settings when `resume` is on; `chain` also re-runs every stage that started before an earlier one finished."""

    def __init__(self, resume: bool, label: str, chain: bool = False):
        self.resume, self.label, self.chain = resume, label, chain
        self.timings: dict[str, float] = {}
        self._since = 0.0  # chain: when the latest earlier stage finished (a record started before it is stale)

    def say(self, message: str) -> None:
        print(f"[{self.label}] {message}", flush=True)

    def run(self, name: str, fn: Callable[[Any], dict], stage_cfg) -> dict:
        """Reuse a stage completed under the same config; continue one killed under the same config from its
        last complete checkpoint (its `train.resume` set to auto); start any other in a clean folder."""
        folder = Path(stage_cfg.output_dir) / stage_cfg.run_name
        summary, config = folder / "summary.json", folder / "config.yaml"
        resumed = continued(stage_cfg)
        if self.resume and summary.is_file() and config.is_file():
            done = json.loads(summary.read_text())
            same = self._same_config(name, config.read_text().split("\n", 2)[-1], stage_cfg, resumed)
            fresh = self._fresh(name, done.get("started_at"))
            if done.get("status") == "completed" and same and fresh:
                self.say(f"{name}: cached (completed before, reused)")
                return self._reused(name, done)
            if same and fresh and resumed is not None and last_checkpoint(folder / "checkpoints") is not None:
                self.say(f"{name}: unfinished under the same config; continuing from its last checkpoint")
                return self._timed(name, lambda: fn(resumed))
        if folder.exists() and resume_mode(getattr(getattr(stage_cfg, "train", None), "resume", False)) == "false":
            # a stage run again under a new config starts clean: old checkpoints or metrics must not mix in
            aside = move_aside(folder)
            self.say(f"{name}: config changed or run unfinished; old folder kept as {aside.name}")
        return self._timed(name, lambda: fn(stage_cfg))

    def cached(self, name: str, folder: Path, key: dict, make: Callable[[Path], Any]) -> Any:
        """`make(folder)` writes the step's files; `folder/done.json` (written last) holds the settings key, so
        a killed step, or one whose settings changed, runs again. What `make` returns (None, or plain JSON
        values) is kept in done.json as `result` and returned again when the step is reused."""
        done = folder / "done.json"
        key = json.loads(json.dumps(key))  # what the file will hold (tuples -> lists)
        if self.resume and done.is_file():
            old = json.loads(done.read_text())
            if old.get("key") == key and self._fresh(f"{name} ({folder.name})", old.get("started_at")):
                self.say(f"{name} ({folder.name}): cached (done before with the same settings, reused)")
                return self._reused(name, old).get("result")
        folder.mkdir(parents=True, exist_ok=True)
        took = time.time()
        result = json.loads(json.dumps(self._timed(name, lambda: make(folder))))  # as a reuse will read it
        record = {"key": key, "wall_time_s": round(time.time() - took, 2), "started_at": took}
        record.update(finished_at=time.time(), **({} if result is None else {"result": result}))
        atomic_write_json(done, record)
        return result

    def _same_config(self, name: str, before: str, stage_cfg, resumed) -> bool:
        """The folder's config is this stage's (or its continued copy's); keys rlcw added since the stage ran, at
        their defaults, do not make it another run."""
        if before in (to_yaml(stage_cfg), to_yaml(resumed) if resumed is not None else None):
            return True
        changed, added = config_drift(before, stage_cfg)
        same = not changed or (resumed is not None and not config_drift(before, resumed)[0])
        if same:
            why = (
                f"lacks keys added since ({', '.join(added)})"
                if added
                else "differs only in retired or reordered keys"
            )
            self.say(f"{name}: its config {why}; taken as the same")
        return same

    def _fresh(self, name: str, started_at: float | None) -> bool:
        """Under `chain`, a record is fresh when it started after every earlier stage had finished."""
        if not self.chain or (started_at or 0.0) >= self._since:
            return True
        self.say(f"{name}: an earlier stage ran again since; running it again")
        return False

    def _reused(self, name: str, record: dict) -> dict:
        self._add(name, float(record.get("wall_time_s") or 0.0))
        self._since = max(self._since, float(record.get("finished_at") or 0.0))
        return record

    def _add(self, name: str, seconds: float) -> None:
        """One name can time several steps (measure_<run>: one per checkpoint): their times add up."""
        self.timings[name] = self.timings.get(name, 0.0) + seconds

    def _timed(self, name: str, fn):
        start = time.time()
        self.say(f"{name} ...")
        out = fn()
        self._add(name, time.time() - start)
        self._since = time.time()
        self.say(f"{name} done in {time.time() - start:.0f}s")
        return out
