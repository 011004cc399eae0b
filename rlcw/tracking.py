"""Experiment trackers behind `train.report_to`: tensorboard, wandb, trackio (several at once) or none.

    from rlcw.tracking import Tracker
    tracker = Tracker(["tensorboard", "wandb"], run_dir, run_name="grpo", config=resolved_config_dict)
    tracker.log({"train/loss": 0.3, "monitor/words": 120.0}, step=5)
    tracker.close()

TensorBoard event files go to `<run_dir>/tensorboard/` (the run-folder contract). Offline-safe: wandb runs in whatever `WANDB_MODE` says (`offline` writes under `<run_dir>/wandb`
and never touches the network; sync later with `wandb sync`); trackio writes a local database.

What reaches a tracker is checked against rlcw's threat model (anyone may read what a tracker
shows): wandb's own collection of the command line, host, git remote and code is switched off,
and rlcw sends instead a checked `rlcw_meta` (command line and git remote with credentials
removed) with the config. `check_outgoing` refuses (RlcwError) any payload holding the value of an
environment variable named like a secret (`*_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`), a token-
shaped string (sk-..., hf_..., ghp_..., github_pat_..., xox?-...), or a URL with a user:password part.
The host name is not sent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rlcw.errors import RlcwError

REPORTERS = ("tensorboard", "wandb", "trackio", "none")
SECRET_NAME = re.compile(r"(?i)(_KEY$|_TOKEN$|^TOKEN$|SECRET|PASSWORD|PASSWD|CREDENTIAL|_PAT$)")
TOKEN_SHAPES = re.compile(
    r"\b(sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abpr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16})\b"
)
_URL_WITH_USER = re.compile(r"[a-z][a-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@", re.I)
_SECRET_ARG = re.compile(r"(?i)^(--?)?([\w.\-]*(?:key|token|secret|password)[\w.\-]*)(=)(.+)$")


def parse_report_to(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """["tensorboard", "wandb"] from "tensorboard,wandb" or a list; [] for none/empty."""
    items = [value] if isinstance(value, str) else list(value or [])
    names = [n.strip().lower() for item in items for n in str(item).split(",") if n.strip()]
    unknown = [n for n in names if n not in REPORTERS]
    if unknown:
        raise RlcwError(
            f"unknown tracker '{unknown[0]}'", where="train.report_to", hint=f"use any of {', '.join(REPORTERS)}"
        )
    if "none" in names and len(set(names)) > 1:
        raise RlcwError("'none' cannot be combined with a tracker", where="train.report_to")
    return [n for n in dict.fromkeys(names) if n != "none"]


# tracker -> the module it needs (checked before a run folder is written)
_TRACKER_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def check_trackers(report_to: str | list[str] | tuple[str, ...] | None) -> None:
    """Every tracker `report_to` names is installed (an RlcwError naming the package otherwise) and wandb has
    credentials unless it runs offline (`wandb_logged_in`); imports nothing."""
    import importlib.util

    for name in parse_report_to(report_to):
        if importlib.util.find_spec(_TRACKER_MODULES[name]) is None:
            raise RlcwError(
                f"report_to={name} needs the '{_TRACKER_MODULES[name]}' package",
                where="train.report_to",
                hint='pip install "rlcw[tracking]", or train.report_to=none',
            )
        if name == "wandb" and not wandb_logged_in():
            raise RlcwError(
                "report_to=wandb but wandb is not logged in (wandb.init would prompt, or fail in a batch job)",
                where="train.report_to",
                hint="run `wandb login` (or set WANDB_API_KEY), or WANDB_MODE=offline to log locally and `wandb sync` "
                "later, or train.report_to=tensorboard",
            )


def wandb_logged_in(env: Mapping[str, str] | None = None) -> bool:
    """wandb can start without asking: offline or disabled mode, an API key or identity token in the environment,
    or a key for its host in the netrc file `wandb login` writes (as wandb's own look-up; without importing it)."""
    import netrc

    env = os.environ if env is None else env
    if env.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun") or env.get("WANDB_API_KEY"):
        return True
    if env.get("WANDB_IDENTITY_TOKEN_FILE") or env.get("WANDB_DISABLED", "").lower() in ("true", "1"):
        return True
    host = urlsplit(env.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc
    home = Path(env.get("HOME") or Path.home())
    paths = [Path(env["NETRC"]).expanduser()] if env.get("NETRC") else [home / ".netrc", home / "_netrc"]
    for path in paths:
        try:
            if path.is_file() and netrc.netrc(str(path)).authenticators(host):
                return True
        except (OSError, netrc.NetrcParseError):
            continue
    return False


def _strings(value: Any) -> list[str]:
    """Every string (keys included) inside nested dicts/lists/tuples."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, (list, tuple, set)):
        return [s for v in value for s in _strings(v)]
    return []


def check_outgoing(payload: Any, env: Mapping[str, str] | None = None, *, what: str = "tracker payload") -> None:
    """Raise RlcwError if the payload holds a secret (see the module docstring); names the finding, never the value."""
    env = os.environ if env is None else env
    secrets = {name: v for name, v in env.items() if SECRET_NAME.search(name) and len(v) >= 6}
    for text in _strings(payload):
        for name, value in secrets.items():
            if value in text:
                raise RlcwError(f"the {what} holds the value of ${name}", where="tracking", hint="remove it")
        if TOKEN_SHAPES.search(text):
            raise RlcwError(f"the {what} holds a token-shaped string", where="tracking", hint="remove it")
        if _URL_WITH_USER.search(text):
            raise RlcwError(f"the {what} holds a URL with a user:password part", where="tracking")


def redact_url(url: str) -> str:
    """A URL without its user:password part (git remotes often carry a token there)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit((parts.scheme, host + (f":{parts.port}" if parts.port else ""), parts.path, parts.query, ""))


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with the value of any *key*/*token*/*secret*/*password* argument replaced."""
    out = []
    for arg in argv:
        m = _SECRET_ARG.match(arg)
        out.append(f"{m.group(1) or ''}{m.group(2)}=<redacted>" if m else arg)
    return out


def run_metadata(argv: list[str] | None = None) -> dict[str, Any]:
    """What rlcw tells a tracker about the run: the redacted command line and git remote and commit."""
    meta: dict[str, Any] = {"command": redact_argv(list(sys.argv if argv is None else argv))}
    for key, cmd in (
        ("git_remote", ["git", "remote", "get-url", "origin"]),
        ("git_commit", ["git", "rev-parse", "HEAD"]),
    ):
        try:
            value = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        meta[key] = redact_url(value) if key == "git_remote" else value
    return meta


class Tracker:
    """Logs metric dicts to every chosen tracker; `log` and `close` are no-ops with report_to=none."""

    def __init__(
        self,
        report_to: str | list[str] | None,
        run_dir: str | Path,
        *,
        run_name: str,
        config: dict | None = None,
        project: str = "rlcw",
        argv: list[str] | None = None,
    ):
        self.names = parse_report_to(report_to)
        self.run_dir = Path(run_dir)
        self._tb = self._wandb = self._trackio = None
        if not self.names:
            return
        payload = {"config": config or {}, "rlcw_meta": run_metadata(argv), "run_name": run_name, "project": project}
        check_outgoing(payload)
        if "tensorboard" in self.names:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))  # the run folder's `tensorboard/`
        if "wandb" in self.names:
            self._wandb = self._start_wandb(payload)
        if "trackio" in self.names:
            self._trackio = self._start_trackio(payload)

    def _start_wandb(self, payload: dict):
        try:
            import wandb
        except ImportError:
            raise RlcwError("report_to=wandb needs wandb", hint='pip install "rlcw[tracking]"') from None
        settings = wandb.Settings(disable_git=True, save_code=False, x_disable_meta=True, silent=True)
        return wandb.init(
            project=payload["project"],
            name=payload["run_name"],
            dir=str(self.run_dir),
            config={**payload["config"], "rlcw_meta": payload["rlcw_meta"]},
            settings=settings,
        )

    def _start_trackio(self, payload: dict):
        try:
            import trackio
        except ImportError:
            raise RlcwError("report_to=trackio needs trackio", hint='pip install "rlcw[tracking]"') from None
        return trackio.init(
            project=payload["project"],
            name=payload["run_name"],
            config={**payload["config"], "rlcw_meta": payload["rlcw_meta"]},
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """One row of scalars at `step` to every tracker (non-numbers are skipped)."""
        scalars = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if not scalars:
            return
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()  # a killed run keeps what it logged
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if self._trackio is not None:
            self._trackio.log(scalars, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._trackio is not None:
            import trackio

            trackio.finish()
        self._tb = self._wandb = self._trackio = None
