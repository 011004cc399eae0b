"""Benchmark the judge client: judged pairs per second one at a time, with concurrency, and cached.

    python scripts/bench_judge.py                      # starts `transformers serve` with the embedded model
    python scripts/bench_judge.py --pairs 16 --concurrency 8 --base-url http://127.0.0.1:8000/v1 --model M

A pair is judged in both orders (LitBench protocol, 2 calls). Three runs on the same pairs:
(1) concurrency 1, empty cache; (2) concurrency K, another empty cache; (3) run 2 again, all
from its cache. Prints pairs/s and the ratios; targets: the cached run makes zero calls and is
>= 100x faster than run 2, and run 2 is never slower than run 1. A warm-up call comes first.
`--json FILE` also writes the numbers.

`--rubric`: the rubric reward (rlcw.rewards.rubric) over one GRPO batch of `--stories` stories x
`--criteria` TTCW criteria, timed as a step's reward latency and verdicts per second, each judge
batched/concurrent against the same judge one verdict at a time, in the same run: (a) the local
model with logprob verdicts (`--concurrency` conversations per forward vs one), (b) the served model
(`transformers serve`, text verdicts: it returns no logprobs) with `--concurrency` requests in
flight vs one; then (b) again from its cache.

    python scripts/bench_judge.py --rubric --stories 16 --criteria 2 --concurrency 8
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


def rubric_step(judge, verdict: str, stories: list[dict], criteria: list, max_tokens: int) -> dict:
    """One reward call of the rubric over the batch: seconds, verdicts/s, invalid share, calls."""
    from rlcw.rewards.rubric import RubricReward

    reward = RubricReward(criteria=criteria, verdict=verdict, max_tokens=max_tokens, judge=judge)
    start = time.perf_counter()
    scores = reward.score([s["prompt"] for s in stories], [s["story"] for s in stories])
    seconds = time.perf_counter() - start
    n = len(stories) * len(criteria)
    return {
        "concurrency": judge.cfg.concurrency,
        "seconds": seconds,
        "verdicts_per_s": n / seconds,
        "verdicts": n,
        "calls": judge.stats["calls"],
        "cache_hits": judge.stats["cache_hits"],
        "invalid": reward.last_stats["invalid"],
        # NaN when no story got a valid verdict (text replies that never reach "Answer: Yes|No")
        "mean_reward": sum(valid) / len(valid) if (valid := [x for x in scores if x == x]) else float("nan"),
    }


def bench_rubric(model: str, base_url: str | None, n_stories: int, n_criteria: int, concurrency: int, args) -> dict:
    from rlcw.rewards.rubric import ttcw_criteria

    recs = read_stories(bundled_path("stories.jsonl"))
    stories = [
        {"prompt": r["prompt"], "story": " ".join(r["story"].split()[: args.words])}
        for r in (recs[i % len(recs)] for i in range(n_stories))
    ]
    criteria = [{"name": c.name, "question": c.question, "dimension": c.dimension} for c in ttcw_criteria()]
    criteria = criteria[:n_criteria]
    out: dict = {"stories": n_stories, "criteria": n_criteria, "words": args.words, "max_tokens": args.max_tokens}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.served_only:
            local = {"kind": "local", "model": model}
            judge_one = make_client(ClientConfig(**local, concurrency=1, cache_dir=f"{tmp}/l1"))
            judge_many = make_client(ClientConfig(**local, concurrency=concurrency, cache_dir=f"{tmp}/lk"))
            warm = [{"prompt": "Warm-up.", "story": "A short warm-up story."}]  # not in the timed batch: no cache hit
            rubric_step(judge_one, "logprobs", warm, criteria[:1], 1)
            out["local_one"] = rubric_step(judge_one, "logprobs", stories, criteria, 1)
            out["local_batched"] = rubric_step(judge_many, "logprobs", stories, criteria, 1)
            out["local_speedup"] = out["local_one"]["seconds"] / out["local_batched"]["seconds"]
            del judge_one, judge_many

        def served(url: str) -> None:
            http = {"base_url": url, "model": model, "api_key_env": None, "timeout_s": 600}
            one = make_client(ClientConfig(**http, concurrency=1, cache_dir=f"{tmp}/s1", max_tokens=args.max_tokens))
            many = make_client(
                ClientConfig(**http, concurrency=concurrency, cache_dir=f"{tmp}/sk", max_tokens=args.max_tokens)
            )
            one.chat([{"role": "user", "content": "Hello"}], max_tokens=4)  # warm-up
            out["served_one"] = rubric_step(one, "text", stories, criteria, args.max_tokens)
            out["served_concurrent"] = rubric_step(many, "text", stories, criteria, args.max_tokens)
            out["served_cached"] = rubric_step(many, "text", stories, criteria, args.max_tokens)
            out["served_speedup"] = out["served_one"]["seconds"] / out["served_concurrent"]["seconds"]

        if base_url:
            served(base_url)
        else:
            with LocalServer(model, continuous_batching=not args.no_continuous_batching) as server:
                served(server.base_url)
    return out


def print_rubric(result: dict) -> bool:
    for name in ("local_one", "local_batched", "served_one", "served_concurrent", "served_cached"):
        if name not in result:
            continue
        r = result[name]
        print(
            f"{name:>17}: concurrency {r['concurrency']}, {r['seconds']:.2f} s per step, {r['verdicts_per_s']:.2f} "
            f"verdicts/s, calls {r['calls']}, cache hits {r['cache_hits']}, invalid {r['invalid']:.2f}, "
            f"mean reward {r['mean_reward']:.3f}"
        )
    if "local_speedup" in result:
        print(f"local logprob judge, batched / one at a time: {result['local_speedup']:.2f}x")
    print(f"served text judge, concurrent / one at a time: {result['served_speedup']:.2f}x")
    return result["served_cached"]["calls"] == result["served_concurrent"]["calls"]  # the cached step called nothing


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
    ap.add_argument("--rubric", action="store_true", help="time the rubric reward over one GRPO batch instead")
    ap.add_argument("--stories", type=int, default=16, help="--rubric: stories in the batch (quickstart: 2 x 8)")
    ap.add_argument("--criteria", type=int, default=2, help="--rubric: the first N TTCW criteria")
    ap.add_argument("--served-only", action="store_true", help="--rubric: skip the local-model judge")
    args = ap.parse_args(argv)
    model = args.model or resolve(EMBEDDED_ALIAS)
    if args.rubric:
        result = bench_rubric(model, args.base_url, args.stories, args.criteria, args.concurrency, args)
        ok = print_rubric(result)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return 0 if ok else 1
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
