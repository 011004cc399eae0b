"""Start and stop a local OpenAI-compatible judge server (`transformers serve`) for tests and benchmarks.

    with LocalServer(rlcw.models.resolve("smollm2-135m-instruct")) as server:
        cfg = ClientConfig(base_url=server.base_url, model=server.model, api_key_env=None)

The server is pinned to one model: requests must name `server.model` (the folder path).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from rlcw.errors import RlcwError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    def __init__(
        self,
        model_dir: str,
        *,
        port: int | None = None,
        continuous_batching: bool = True,
        cb_max_memory_percent: float = 0.05,
        log_file: str | Path | None = None,
        startup_timeout_s: float = 300.0,
    ):
        self.model, self.port = str(model_dir), port or free_port()
        self.continuous_batching, self.startup_timeout_s = continuous_batching, startup_timeout_s
        # continuous batching on CPU reserves 60% of the machine's RAM for its KV cache by default (transformers'
        # resolve_max_memory_percent): 13.7 GB on a 23-GB machine, OOM-killed there; 5% holds ~25k tokens of the
        # embedded model
        self.cb_max_memory_percent = cb_max_memory_percent
        self.log_file = Path(log_file) if log_file else None
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LocalServer:
        exe = Path(sys.executable).with_name("transformers")
        cmd = [str(exe), "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        if self.continuous_batching:
            cmd += ["--continuous-batching", "--cb-max-memory-percent", str(self.cb_max_memory_percent)]
        log = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
            start_new_session=True,
        )
        deadline = time.time() + self.startup_timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RlcwError(
                    f"transformers serve exited with status {self.proc.returncode}",
                    where=str(self.log_file or "server"),
                    hint="pip install 'transformers[serving]'",
                )
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RlcwError(f"server not healthy after {self.startup_timeout_s:.0f} s", where=self.base_url)

    def kill(self) -> None:
        """SIGKILL, as a crash would (no graceful shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
