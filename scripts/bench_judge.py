"""Benchmark the judge client: judged pairs per second one at a time, with concurrency, and cached.

    python scripts/bench_judge.py                      # starts `transformers serve` with the embedded model
    python scripts/bench_judge.py --pairs 16 --concurrency 8 --base-url http://127.0.0.1:8000/v1 --model M

A pair is judged in both orders (LitBench protocol, 2 calls). Three runs on the same pairs:
(1) concurrency 1, empty cache; (2) concurrency K, another empty cache; (3) run 2 again, all
from its cache. Prints pairs/s and the ratios; targets: the cached run makes zero calls and is
>= 100x faster than run 2, and run 2 is never slower than run 1. A warm-up call comes first.
`--json FILE` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rlcw.data.bundled import bundled_path
from rlcw.data.records import read_stories
from rlcw.judges.clients.base import ClientConfig
from rlcw.judges.clients.factory import make_client
from rlcw.judges.protocols import Pair, judge_side_by_side
from rlcw.judges.serve import LocalServer
from rlcw.judges.templates import load_template
from rlcw.models import EMBEDDED_ALIAS, resolve


def make_pairs(n: int, words: int) -> list[Pair]:
    recs = read_stories(bundled_path("stories.jsonl"))
    pairs = []
    for i in range(n):
        a, b = recs[(2 * i) % len(recs)], recs[(2 * i + 1) % len(recs)]
        pairs.append(
            Pair(
                str(i),
                a["prompt"],
                "x",
                " ".join(a["story"].split()[:words]),
                "y",
                " ".join(b["story"].split()[:words]),
            )
        )
    return pairs


def timed_run(base_url: str, model: str, pairs: list[Pair], concurrency: int, cache_dir: str, max_tokens: int) -> dict:
    client = make_client(
        ClientConfig(
            base_url=base_url,
            model=model,
            api_key_env=None,
            concurrency=concurrency,
            cache_dir=cache_dir,
            max_tokens=max_tokens,
            timeout_s=600,
        )
    )
    start = time.perf_counter()
    rows = judge_side_by_side(client, load_template("litbench_minimal"), pairs, progress=False)
    seconds = time.perf_counter() - start
    client.close()
    return {
        "concurrency": concurrency,
        "seconds": seconds,
        "pairs_per_s": len(pairs) / seconds,
        "calls": client.stats["calls"],
        "cache_hits": client.stats["cache_hits"],
        "judgments": len(rows),
        "invalid": sum(1 for r in rows if not r["verdicts"]["preferred"]["valid"]),
    }


def bench(base_url: str, model: str, n_pairs: int, concurrency: int, max_tokens: int, words: int) -> dict:
    pairs = make_pairs(n_pairs, words)
    warm = make_client(ClientConfig(base_url=base_url, model=model, api_key_env=None, max_tokens=4, timeout_s=600))
    warm.chat([{"role": "user", "content": "Hello"}])
    with tempfile.TemporaryDirectory() as tmp:
        one = timed_run(base_url, model, pairs, 1, f"{tmp}/one", max_tokens)
        many = timed_run(base_url, model, pairs, concurrency, f"{tmp}/many", max_tokens)
        cached = timed_run(base_url, model, pairs, concurrency, f"{tmp}/many", max_tokens)
    return {
        "pairs": n_pairs,
        "max_tokens": max_tokens,
        "one_at_a_time": one,
        "concurrent": many,
        "cached": cached,
        "concurrency_speedup": one["seconds"] / many["seconds"],
        "cached_speedup": many["seconds"] / cached["seconds"],
        "cached_calls": cached["calls"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--words", type=int, default=40, help="words kept per story (prompt length)")
    ap.add_argument("--base-url", default=None, help="an already running server (default: start transformers serve)")
    ap.add_argument(
        "--model", default=None, help="model name the server expects (default: the embedded model's folder)"
    )
    ap.add_argument(
        "--no-continuous-batching", action="store_true", help="start the server without continuous batching"
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    model = args.model or resolve(EMBEDDED_ALIAS)
    if args.base_url:
        result = bench(args.base_url, model, args.pairs, args.concurrency, args.max_tokens, args.words)
    else:
        with LocalServer(model, continuous_batching=not args.no_continuous_batching) as server:
            result = bench(server.base_url, model, args.pairs, args.concurrency, args.max_tokens, args.words)
    for name in ("one_at_a_time", "concurrent", "cached"):
        r = result[name]
        print(
            f"{name:>14}: concurrency {r['concurrency']}, {r['seconds']:.3f} s, {r['pairs_per_s']:.3f} pairs/s, "
            f"calls {r['calls']}, cache hits {r['cache_hits']}, invalid {r['invalid']}/{r['judgments']}"
        )
    print(f"concurrency speedup (one at a time / concurrent time): {result['concurrency_speedup']:.2f}x")
    print(
        f"cached re-run speedup (concurrent / cached time): {result['cached_speedup']:.0f}x, calls in cached run: {result['cached_calls']}"
    )
    ok = result["cached_calls"] == 0 and result["cached_speedup"] >= 100 and result["concurrency_speedup"] >= 1.0
    print("targets met" if ok else "TARGETS MISSED")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
