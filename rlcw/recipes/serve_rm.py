"""Serve a reward model over HTTP for RL jobs on other nodes (as OpenRLHF's serve_rm).

What: loads a BT RM folder (`rlcw train-rm` output) into `rlcw.rm.scoring.load_rm` and serves
`POST /score {"prompts": [...], "completions": [...]} -> {"rewards": [...]}` with concurrent
requests batched into one scorer call (`max_batch` items or `max_wait_ms`), `GET /health`
(batch statistics) and `/openapi.json`. Binds 127.0.0.1 unless `host` says otherwise; with
`token_env` set, clients must send `Authorization: Bearer $<token_env>`. Bad requests get a 4xx
JSON error and the server keeps going. Runs until interrupted (Ctrl-C / SIGTERM), then writes
its batch statistics into the run folder's summary.json.
Not here: GenRM serving, TLS (put a reverse proxy in front for traffic outside the cluster).

    rlcw serve-rm rm_path=runs/train_rm/model port=8000
    RLCW_RM_TOKEN=secret rlcw serve-rm --config configs/serve_rm/default.yaml host=0.0.0.0 token_env=RLCW_RM_TOKEN
    # client side: rlcw.rewards.remote.RemoteReward(["http://HOST:8000"], token_env="RLCW_RM_TOKEN")
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass

from rlcw.errors import RlcwError
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServeRMConfig(RunKeys):
    rm_path: str = "runs/train_rm/model"  # BT RM folder to serve (rlcw train-rm output)
    host: str = "127.0.0.1"  # address to bind (127.0.0.1 = this machine only)
    port: int = 8000  # TCP port to listen on
    token_env: str | None = None  # name of the env var holding the bearer token; None = no auth
    max_batch: int = 64  # items per scorer call
    max_wait_ms: float = 10.0  # how long the first request of a batch waits for more (ms)
    max_request_items: int = 256  # items one request may carry (more: 4xx error)
    max_chars: int = 20000  # characters allowed per prompt or completion
    max_queue: int = 256  # requests waiting to be scored; more are answered 503 + Retry-After
    limit_concurrency: int = 512  # uvicorn: open connections + tasks before it answers 503
    idempotency_ttl_s: float = 600.0  # how long a scored Idempotency-Key is remembered
    scorer_batch_size: int = 16  # the scorer's own forward batch (length-bucketed)
    head: str = "quality"  # an RM with a length head (rm.length_head=true): quality | length | sum
    device: str | None = None  # None = the model's default (cpu here, cuda when available)
    log_level: str = "info"  # server log level: debug | info | warning | error
    run_name: str = "serve_rm"  # name of the run folder under output_dir


def read_token(token_env: str | None) -> str | None:
    if token_env is None:
        return None
    token = os.environ.get(token_env)
    if not token:
        raise RlcwError(
            f"token_env={token_env} but that environment variable is empty or unset",
            hint=f"export {token_env}=<a long random string>, or drop token_env to serve without auth",
        )
    return token


def build_app(cfg: ServeRMConfig):
    from rlcw.rewards.server import ServerLimits, create_app
    from rlcw.rm.scoring import load_rm

    if min(cfg.max_batch, cfg.max_request_items, cfg.max_chars, cfg.max_queue, cfg.limit_concurrency) < 1:
        raise RlcwError("max_batch, max_request_items, max_chars, max_queue and limit_concurrency must be at least 1")
    token = read_token(cfg.token_env)
    scorer = load_rm(cfg.rm_path, batch_size=cfg.scorer_batch_size, device=cfg.device, head=cfg.head)
    limits = ServerLimits(
        cfg.max_batch,
        cfg.max_wait_ms,
        cfg.max_request_items,
        cfg.max_chars,
        max_queue=cfg.max_queue,
        idempotency_ttl_s=cfg.idempotency_ttl_s,
    )
    return create_app(scorer, limits, token=token, name=cfg.rm_path)


def check_port_free(host: str, port: int) -> None:
    """`host:port` can be bound now (as uvicorn binds it, SO_REUSEADDR): an error naming the port and the fix, before
    the run folder or the model, instead of uvicorn's log line and an exit that looked completed."""
    import socket

    if not 0 <= port <= 65535:  # socket.bind's OverflowError otherwise
        raise RlcwError(f"port must be 0-65535, got {port}", where="port", hint="e.g. port=8000 (0: any free port)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise RlcwError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                where="port",
                hint=f"another server holds port {port}: pass another port (e.g. port={port + 1}) or stop that "
                f"server (`ss -ltnp 'sport = :{port}'` names it)",
            ) from None


def _stop(signum, frame):
    raise SystemExit(0)


def main(cfg: ServeRMConfig) -> dict:
    import torch
    import uvicorn

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))))
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if cfg.host not in LOOPBACK and cfg.token_env is None:
        logging.getLogger("rlcw.serve_rm").warning(
            "serving on %s without a token: anyone who can reach the port can use it", cfg.host
        )
    check_port_free(cfg.host, cfg.port)
    read_token(cfg.token_env)  # before the run folder (build_app reads it again)
    with stage_run(cfg, "serve-rm") as run:
        app = build_app(cfg)
        print(
            f"rlcw serve-rm: {cfg.rm_path} on http://{cfg.host}:{cfg.port} (docs: /docs, health: /health)", flush=True
        )
        # uvicorn re-raises SIGINT/SIGTERM after its graceful shutdown: turn that into a normal exit
        # so the batch statistics below still reach summary.json.
        signal.signal(signal.SIGTERM, _stop)
        try:
            uvicorn.run(
                app, host=cfg.host, port=cfg.port, log_level=cfg.log_level, limit_concurrency=cfg.limit_concurrency
            )
        except KeyboardInterrupt:
            pass
        except SystemExit as exc:  # _stop's 0; uvicorn exits 1 when it cannot start (the port taken meanwhile)
            if exc.code not in (0, None):
                raise RlcwError(
                    f"the server did not start on {cfg.host}:{cfg.port} (see the log line above)",
                    where="port",
                    hint="pass another port, or stop the server that holds it",
                ) from None
        stats = app.state.batcher.stats.as_dict()
        metrics = {k: float(v) for k, v in stats.items()}
        # summary.json only, no metrics.jsonl row: a restarted server reuses its folder without overwrite=true
        return run.write_summary("completed", metrics, {"rm": cfg.rm_path})
