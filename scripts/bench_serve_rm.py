"""Load test of `rlcw serve-rm` on 127.0.0.1: N concurrent clients x M requests, bounded in count and time.

    python scripts/bench_serve_rm.py --clients 8 --requests 100000 --max-seconds 60   # tiny random RM
    python scripts/bench_serve_rm.py --rm runs/train_rm/model --clients 8 --max-seconds 60

Starts the real server (`python -m rlcw serve-rm`, a subprocess with a bearer token) on a free
loopback port, scores a pool of distinct (prompt, story) items directly with the same scorer
(`rlcw.rm.scoring.load_rm`) as the reference, then runs the clients: each sends requests of `--items` items drawn
from the pool, one at a time, with an Idempotency-Key, until it has sent `--requests` or
`--max-seconds` have passed. Every answer is checked against the reference: a request is *lost*
(no 200 answer), *mixed* (a score that is not its own item's) or *duplicated* (the server scored it
more than once: /health requests minus idempotent replays is more than the requests sent).

Prints (and with --out writes) JSON: requests, items, throughput (requests/s, items/s), p50/p99
latency, batches (scorer calls), mean and largest requests per batch, 503s, lost/mixed/duplicated.
Without --rm the RM is a tiny random-weight Llama (hidden 64, 2 layers) with the embedded model's
tokenizer, so the figures measure the server (HTTP, batching, queue), not a model.

Measured 2026-11-23 (2-core CPU shared with other jobs, load average ~10; tiny RM, 8 clients x 4
items, 65 s): 4,281 requests, 65.8 requests/s (263 items/s), p50 116 ms, p99 233 ms, 563 scorer
calls of 7.6 requests on average (8 at most), 0 busy, 0 lost, 0 mixed, 0 duplicated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

TOKEN_ENV = "RLCW_BENCH_RM_TOKEN"


def tiny_rm(out: Path) -> Path:
    """A tiny random sequence-classification RM folder (model, RM tokenizer, rlcw_rm.json)."""
    import torch
    from transformers import LlamaForSequenceClassification

    from rlcw.models import EMBEDDED_ALIAS, load_tokenizer, tiny_llama_config
    from rlcw.rm.render import RMSpec, save_spec

    torch.manual_seed(0)
    tok = load_tokenizer(EMBEDDED_ALIAS, for_reward_model=True, padding_side="right")
    config = tiny_llama_config(len(tok), hidden_size=64, num_labels=1, pad_token_id=tok.pad_token_id)
    LlamaForSequenceClassification(config).save_pretrained(out)
    tok.save_pretrained(out)
    save_spec(RMSpec(type="bt", base_model=EMBEDDED_ALIAS, input_template="plain", max_length=128), out)
    return out


def pool_items(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = "lamp keeper storm harbour letter garden winter clock river orchard lantern tide".split()
    return [
        (
            f"Write a story about the {rng.choice(words)} number {k}.",
            " ".join(rng.choices(words, k=rng.randint(8, 40))),
        )
        for k in range(n)
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(rm: Path, root: Path, token: str, args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "rlcw", "serve-rm", f"rm_path={rm}", f"port={port}", f"token_env={TOKEN_ENV}"]
    cmd += [f"max_batch={args.max_batch}", f"max_wait_ms={args.max_wait_ms}", f"output_dir={root}", "run_name=srv"]
    cmd += ["log_level=warning"]
    env = {**os.environ, TOKEN_ENV: token, "OMP_NUM_THREADS": "1"}
    log = (root / "server.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("serve-rm exited early:\n" + (root / "server.log").read_text())
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("serve-rm did not become healthy in 180 s")


def client(url: str, token: str, pool, reference, args, seed: int, stop_at: float, out: dict) -> None:
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=args.timeout_s, headers=headers) as http:
        for _ in range(args.requests):
            if time.monotonic() >= stop_at:
                break
            idx = rng.sample(range(len(pool)), args.items)
            body = {"prompts": [pool[i][0] for i in idx], "completions": [pool[i][1] for i in idx]}
            start = time.monotonic()
            try:
                resp = http.post(f"{url}/score", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
            except httpx.HTTPError:
                out["lost"] += 1
                continue
            out["latencies"].append(time.monotonic() - start)
            out["sent"] += 1
            if resp.status_code == 503:
                out["busy"] += 1
                time.sleep(float(resp.headers.get("retry-after", "1")))
                continue
            if resp.status_code != 200:
                out["lost"] += 1
                continue
            got = resp.json()["rewards"]
            if len(got) != len(idx) or any(abs(g - reference[i]) > args.tol for g, i in zip(got, idx, strict=False)):
                out["mixed"] += 1
            out["ok"] += 1
            out["items"] += len(idx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rm", help="an RM folder (default: a tiny random RM built here)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=1000, help="per client")
    ap.add_argument("--items", type=int, default=4, help="items per request")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--pool", type=int, default=512)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--tol", type=float, default=1e-3, help="allowed |server - direct| per score")
    ap.add_argument("--out", help="write the JSON result here")
    args = ap.parse_args()

    from rlcw.rm.scoring import load_rm

    with tempfile.TemporaryDirectory(prefix="bench_serve_rm_") as tmp:
        root = Path(tmp)
        rm = Path(args.rm) if args.rm else tiny_rm(root / "rm")
        pool = pool_items(args.pool, 0)
        reference = load_rm(str(rm)).score([p for p, _ in pool], [s for _, s in pool])
        # how well a mix-up would show: the share of item pairs whose reference scores differ by > tol
        pairs = [(a, b) for a in range(len(pool)) for b in range(a + 1, len(pool))]
        distinguishable = sum(abs(reference[a] - reference[b]) > args.tol for a, b in pairs) / len(pairs)
        token = uuid.uuid4().hex
        proc, url = start_server(rm, root, token, args)
        try:
            before = httpx.get(f"{url}/health", timeout=10).json()
            outs = [
                {"sent": 0, "ok": 0, "items": 0, "busy": 0, "lost": 0, "mixed": 0, "latencies": []}
                for _ in range(args.clients)
            ]
            start = time.monotonic()
            threads = [
                threading.Thread(
                    target=client, args=(url, token, pool, reference, args, k, start + args.max_seconds, outs[k])
                )
                for k in range(args.clients)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - start
            after = httpx.get(f"{url}/health", timeout=10).json()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    lat = sorted(x for o in outs for x in o["latencies"])
    total = {k: sum(o[k] for o in outs) for k in ("sent", "ok", "items", "busy", "lost", "mixed")}
    scored = (after["requests"] - before["requests"]) - (after["idempotent_replays"] - before["idempotent_replays"])
    batches = after["batches"] - before["batches"]
    result = {
        "rm": str(args.rm or "tiny random Llama RM (hidden 64, 2 layers, embedded tokenizer)"),
        "clients": args.clients,
        "items_per_request": args.items,
        "wall_s": round(wall, 1),
        "requests_ok": total["ok"],
        "items_ok": total["items"],
        "throughput_requests_s": round(total["ok"] / wall, 1),
        "throughput_items_s": round(total["items"] / wall, 1),
        "latency_p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "latency_p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
        "batches": batches,
        "mean_requests_per_batch": round(scored / batches, 2) if batches else None,
        "largest_batch_requests": after["largest_batch_requests"],
        "busy_503": total["busy"],
        "lost": total["lost"],
        "mixed": total["mixed"],
        "duplicated": max(0, scored - total["sent"]),
        "pool_pairs_distinguishable": round(distinguishable, 4),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if total["lost"] or total["mixed"] or result["duplicated"]:
        raise SystemExit("FAILED: lost, mixed or duplicated results")


if __name__ == "__main__":
    main()
