"""Benchmark the shared reward scorer: length-bucketed batching vs one story at a time.

For each length bucket (words), the same synthetic stories are scored twice in the same run by
`rlcw.rm.scoring` (`load_rm`) with the same truncation (`encode_for_rm`, `--max-length` tokens):
once as one call (sorted, batches of <= --batch-size rows and <= --token-budget padded tokens)
and once story by story. Prints stories/s for both, the ratio, and the peak memory of each
(CUDA: max allocated; CPU: peak process RSS above the level before the phase).
Without `--rm` the embedded SmolLM2-135M-Instruct with a random score head stands in as the RM.

`--ensemble K` instead times, in the same run, an RM ensemble of K members (`rlcw.rm.ensemble`) against
ONE member scored alone, on the same stories and batching: the members share all but the top `--top-layers`
decoder layers (the quickstart RM adapts the top 8 of 30), so the ensemble runs that trunk once per batch.
Prints each bucket's ensemble/single ratio of wall time and of CPU time (all threads; the steadier figure on a
machine shared with other jobs), naive: K. With `--rm` an ensemble folder (`rlcw train-rm
rm.ensemble.size=K`) is used and its member 0 is the single RM; without it, K members are made from the
embedded model by perturbing the top layers and drawing random heads (the same compute as trained members).

    python scripts/bench_reward.py --ensemble 4 --buckets 50,100 --n 16 --max-length 256 --no-prompt   # quickstart sizes

`--precision-vs` instead times, in the same run and on the same stories and batching, the scorer in fp32 against
the scorer in bf16 (`load_rm(precision="bf16")`: bf16 weights, the forward under bf16 autocast), interleaved, and prints each
bucket's fp32/bf16 time ratio and the largest and mean score difference (with the RM's score SD beside them):

    OMP_NUM_THREADS=1 python scripts/bench_reward.py --precision-vs --rm RM --buckets 50,70 --n 16 --max-length 256 --no-prompt

    OMP_NUM_THREADS=1 python scripts/bench_reward.py --buckets 50,200,500 --n 8          # short
    python scripts/bench_reward.py --rm runs/train_rm/model --buckets 50,200,500,1000,1500 --n 32 --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from pathlib import Path

import torch

from rlcw.data.bundled import bundled_path
from rlcw.data.records import read_stories
from rlcw.models import EMBEDDED_ALIAS, load_tokenizer, resolve
from rlcw.rm.render import RMSpec, encode_for_rm
from rlcw.rm.scoring import RMScorer, load_rm


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rm", default=None, help="an RM folder (default: embedded model with a random score head)")
    ap.add_argument("--buckets", default="50,200,500,1000,1500", help="story lengths in words, comma-separated")
    ap.add_argument("--n", type=int, default=8, help="stories per bucket")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument(
        "--token-budget",
        type=int,
        default=None,
        help="max padded tokens per batch (default: the scorer's for the device)",
    )
    ap.add_argument(
        "--max-padding", type=float, default=None, help="max padding overhead per batch (default: the scorer's)"
    )
    ap.add_argument(
        "--repeats", type=int, default=2, help="interleaved timings per bucket; the fastest of each is kept"
    )
    ap.add_argument("--max-length", type=int, default=2048, help="RM truncation in tokens (embedded stand-in only)")
    ap.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--ensemble", type=int, default=0, help="K > 1: time an ensemble of K against one RM instead")
    ap.add_argument("--top-layers", type=int, default=8, help="members' own top layers (stand-in ensemble)")
    ap.add_argument("--no-prompt", action="store_true", help="score stories without the prompt (the quickstart RM)")
    ap.add_argument("--model-dir", default=None, help="stand-in ensemble: this model folder (default: the embedded)")
    ap.add_argument(
        "--random-weights", action="store_true", help="stand-in ensemble: the folder's config with random weights"
    )
    ap.add_argument("--precision-vs", action="store_true", help="time fp32 against bf16 scoring instead")
    return ap.parse_args(argv)


def build_scorer(args, precision: str = "fp32") -> RMScorer:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype)
    if args.rm:
        scorer = load_rm(args.rm, batch_size=args.batch_size, device=device, length_control=False, precision=precision)
        if precision == "fp32":
            scorer.model.to(dtype)
    else:
        from transformers import AutoModelForSequenceClassification

        tok = load_tokenizer(EMBEDDED_ALIAS, for_reward_model=True, padding_side="right")
        torch.manual_seed(args.seed)
        model = AutoModelForSequenceClassification.from_pretrained(resolve(EMBEDDED_ALIAS), num_labels=1, dtype=dtype)
        model.config.pad_token_id = tok.pad_token_id
        spec = standin_spec(args, tok).check()
        scorer = RMScorer(
            "embedded-random-head", model, tok, spec, batch_size=args.batch_size, device=device, precision=precision
        )
    set_batching(scorer, args)
    return scorer


def standin_spec(args, tok) -> RMSpec:
    """The spec of a stand-in RM on the embedded model (its truncation and prompt use from the options)."""
    return RMSpec(
        type="bt",
        base_model=EMBEDDED_ALIAS,
        max_length=args.max_length,
        pad_token=tok.pad_token,
        include_prompt=not args.no_prompt,
    )


def set_batching(scorer: RMScorer, args) -> None:
    """The options' --token-budget / --max-padding on `scorer`, where given."""
    scorer.token_budget = args.token_budget if args.token_budget is not None else scorer.token_budget
    scorer.max_padding = args.max_padding if args.max_padding is not None else scorer.max_padding


def synthetic_stories(words: int, n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """n (prompt, story) pairs of ~words words (+-10%), cut from the bundled stories at random offsets."""
    records = read_stories(bundled_path("stories.jsonl"))
    pool = " ".join(r["story"] for r in records).split()
    prompts, stories = [], []
    for _ in range(n):
        k = max(1, round(words * rng.uniform(0.9, 1.1)))
        start = rng.randrange(len(pool))
        text = [pool[(start + j) % len(pool)] for j in range(k)]
        prompts.append(rng.choice(records)["prompt"])
        stories.append(" ".join(text))
    return prompts, stories


class PeakMemory:
    """Peak memory during a `with` block: CUDA max allocated, else process RSS sampled every 5 ms."""

    def __init__(self, device: str):
        self.cuda = str(device).startswith("cuda")
        self.peak_mb = 0.0

    @staticmethod
    def rss_mb() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _sample(self):
        while not self._stop.is_set():
            self._max = max(self._max, self.rss_mb())
            time.sleep(0.005)

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        else:
            self._base = self._max = self.rss_mb()
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak_mb = (torch.cuda.max_memory_allocated() - self._base) / 2**20
        else:
            self._stop.set()
            self._thread.join()
            self.peak_mb = self._max - self._base


def timed(scorer: RMScorer, fn) -> tuple[float, float, list[float]]:
    with PeakMemory(scorer.device) as mem:
        start = time.perf_counter()
        out = fn()
        if str(scorer.device).startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return seconds, mem.peak_mb, out


def bench_bucket(scorer: RMScorer, words: int, n: int, rng: random.Random, repeats: int = 2) -> dict:
    prompts, stories = synthetic_stories(words, n, rng)
    tokens = [len(e) for e in encode_for_rm(scorer.spec, scorer.tokenizer, prompts, stories)]
    scorer.score(prompts[:1], stories[:1])  # warm-up at this length
    t_batch = t_naive = float("inf")
    for _ in range(repeats):  # interleaved, fastest kept: load from other processes hits both alike
        t, m_batch, s_batch = timed(scorer, lambda: scorer.score(prompts, stories))
        t_batch = min(t_batch, t)
        t, m_naive, s_naive = timed(
            scorer, lambda: [scorer.score([p], [s])[0] for p, s in zip(prompts, stories, strict=False)]
        )
        t_naive = min(t_naive, t)
    diff = max(abs(a - b) for a, b in zip(s_batch, s_naive, strict=False))
    return {
        "words": words,
        "n": n,
        "mean_tokens": sum(tokens) / n,
        "batched_per_s": n / t_batch,
        "naive_per_s": n / t_naive,
        "ratio": t_naive / t_batch,
        "batched_peak_mb": m_batch,
        "naive_peak_mb": m_naive,
        "max_abs_score_diff": diff,
    }


def standin_ensemble(args, folder: Path) -> Path:
    """K members from the embedded model: member j = top layers + N(0, 1e-3) noise and a random head."""
    from transformers import AutoModelForSequenceClassification

    from rlcw.io import atomic_save_tensors
    from rlcw.rm.ensemble import EnsembleManifest, Member, member_tensors, save_manifest
    from rlcw.rm.render import save_spec

    src = args.model_dir or resolve(EMBEDDED_ALIAS)
    tok = load_tokenizer(src, for_reward_model=True, padding_side="right")
    torch.manual_seed(args.seed)
    if args.random_weights:  # the same shapes and compute, without the weights file (a machine without the cache)
        from transformers import AutoConfig

        model = AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(src, num_labels=1))
    else:
        model = AutoModelForSequenceClassification.from_pretrained(src, num_labels=1)
    model.config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    spec = standin_spec(args, tok)
    save_spec(spec, folder)
    shared = model.config.num_hidden_layers - args.top_layers
    members = []
    for j in range(args.ensemble):
        own = member_tensors(model.state_dict(), model.base_model_prefix, shared)
        own = {k: v + 1e-3 * torch.randn_like(v) if j else v for k, v in own.items()}
        members.append(
            Member(atomic_save_tensors(own, folder / "members" / f"{j}.safetensors").relative_to(folder).as_posix())
        )
    save_manifest(EnsembleManifest(members, shared_layers=shared), folder)
    return folder


def wall_and_cpu(scorer: RMScorer, prompts: list[str], stories: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (every thread of this process: the cost on a machine others load too)."""
    w0, c0 = time.perf_counter(), time.process_time()
    scorer.score(prompts, stories)
    if str(scorer.device).startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - w0, time.process_time() - c0


def bench_ensemble(args) -> list[dict]:
    """Ensemble of K vs its member 0 alone, interleaved on the same stories (see module docstring)."""
    import tempfile

    from transformers import AutoModelForSequenceClassification

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.rm) if args.rm else standin_ensemble(args, Path(tmp))
        ens = load_rm(folder, batch_size=args.batch_size, device=device, length_control=False)
        member = AutoModelForSequenceClassification.from_pretrained(folder)
        single = RMScorer(folder, member, ens.tokenizer, ens.spec, batch_size=args.batch_size, device=device)
        for s in (ens, single):
            s.model.to(getattr(torch, args.dtype))
            set_batching(s, args)
        k, shared = ens.ensemble.size, ens.ensemble.manifest.shared_layers
        print(
            f"device={device} threads={torch.get_num_threads()} members={k} shared_layers={shared} of "
            f"{single.model.config.num_hidden_layers} max_length={ens.spec.max_length} repeats={args.repeats}"
        )
        print(
            f"{'words':>6} {'tokens':>7} {'single/s':>9} {'ensemble/s':>11} {'ratio':>6} {'cpu ratio':>9} {'naive':>6}"
        )
        rows = []
        for words, prompts, stories, mean_tokens in bucket_stories(args, ens):
            ens.score(prompts, stories), single.score(prompts, stories)  # warm-up at this length
            t_one = t_ens = c_one = c_ens = float("inf")
            for _ in range(args.repeats):  # interleaved, fastest kept
                wall, cpu = wall_and_cpu(single, prompts, stories)
                t_one, c_one = min(t_one, wall), min(c_one, cpu)
                wall, cpu = wall_and_cpu(ens, prompts, stories)
                t_ens, c_ens = min(t_ens, wall), min(c_ens, cpu)
            r = {
                "words": words,
                "n": args.n,
                "mean_tokens": mean_tokens,
                "single_s": t_one,
                "ensemble_s": t_ens,
                "ratio": t_ens / t_one,
                "single_cpu_s": c_one,
                "ensemble_cpu_s": c_ens,
                "cpu_ratio": c_ens / c_one,
                "members": k,
                "shared_layers": shared,
            }
            rows.append(r)
            print(
                f"{words:>6} {r['mean_tokens']:>7.0f} {args.n / t_one:>9.2f} {args.n / t_ens:>11.2f} "
                f"{r['ratio']:>6.2f} {r['cpu_ratio']:>9.2f} {k:>6}",
                flush=True,
            )
    write_json(args, device, rows)
    return rows


def bucket_stories(args, scorer: RMScorer):
    """(words, prompts, stories, mean tokens as the scorer encodes them) for each of `--buckets`, `--n` stories each."""
    rng = random.Random(args.seed)
    for words in [int(w) for w in args.buckets.split(",")]:
        prompts, stories = synthetic_stories(words, args.n, rng)
        tokens = [len(e) for e in encode_for_rm(scorer.spec, scorer.tokenizer, prompts, stories)]
        yield words, prompts, stories, sum(tokens) / args.n


def write_json(args, device, rows: list[dict]) -> None:
    """The options, the device and the rows to `--json`, when given."""
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "device": str(device), "rows": rows}, indent=2) + "\n"
        )


def bench_precision(args) -> list[dict]:
    """The same RM scored in fp32 and in bf16, interleaved on the same stories (see module docstring)."""
    from rlcw.cpu_isa import describe

    scorers = {p: build_scorer(args, p) for p in ("fp32", "bf16")}
    scorer = scorers["fp32"]
    print(f"device={scorer.device} threads={torch.get_num_threads()} {describe()} repeats={args.repeats}")
    print(
        f"{'words':>6} {'tokens':>7} {'fp32/s':>8} {'bf16/s':>8} {'ratio':>6} {'max|diff|':>9} {'mean|diff|':>10} {'sd':>6}"
    )
    rows = []
    for words, prompts, stories, mean_tokens in bucket_stories(args, scorer):
        best, scores = {"fp32": float("inf"), "bf16": float("inf")}, {}
        for p in best:  # warm-up at this length
            scorers[p].score(prompts[:1], stories[:1])
        for _ in range(args.repeats):  # interleaved, fastest kept
            for p, one in scorers.items():
                t, _, scores[p] = timed(one, lambda one=one, ps=prompts, ss=stories: one.score(ps, ss))
                best[p] = min(best[p], t)
        diffs = [abs(a - b) for a, b in zip(scores["fp32"], scores["bf16"], strict=True)]
        r = {
            "words": words,
            "n": args.n,
            "mean_tokens": mean_tokens,
            "fp32_s": best["fp32"],
            "bf16_s": best["bf16"],
            "ratio": best["fp32"] / best["bf16"],
            "max_abs_diff": max(diffs),
            "mean_abs_diff": sum(diffs) / len(diffs),
            "score_sd": float(torch.tensor(scores["fp32"]).std()),
        }
        rows.append(r)
        print(
            f"{words:>6} {r['mean_tokens']:>7.0f} {args.n / r['fp32_s']:>8.2f} {args.n / r['bf16_s']:>8.2f} "
            f"{r['ratio']:>6.2f} {r['max_abs_diff']:>9.3f} {r['mean_abs_diff']:>10.3f} {r['score_sd']:>6.3f}",
            flush=True,
        )
    write_json(args, scorer.device, rows)
    return rows


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    if args.ensemble > 1:
        return bench_ensemble(args)
    if args.precision_vs:
        return bench_precision(args)
    scorer = build_scorer(args)
    rng = random.Random(args.seed)
    print(
        f"device={scorer.device} threads={torch.get_num_threads()} batch_size={scorer.batch_size} token_budget="
        f"{scorer.token_budget} max_padding={scorer.max_padding} max_length={scorer.spec.max_length} repeats={args.repeats}"
    )
    print(
        f"{'words':>6} {'tokens':>7} {'batched/s':>10} {'naive/s':>9} {'ratio':>6} {'peak MB b/n':>14} {'|diff|':>8}"
    )
    rows = []
    for words in [int(w) for w in args.buckets.split(",")]:
        r = bench_bucket(scorer, words, args.n, rng, args.repeats)
        rows.append(r)
        print(
            f"{r['words']:>6} {r['mean_tokens']:>7.0f} {r['batched_per_s']:>10.2f} {r['naive_per_s']:>9.2f} {r['ratio']:>6.2f} "
            f"{r['batched_peak_mb']:>6.0f}/{r['naive_peak_mb']:<7.0f} {r['max_abs_score_diff']:>8.1e}",
            flush=True,
        )
    write_json(args, scorer.device, rows)
    return rows


if __name__ == "__main__":
    main()
