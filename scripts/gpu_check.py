"""GPU check of rlcw's hot paths on random-init models of real shapes (needs only torch, transformers, rlcw).

    python scripts/gpu_check.py                          # CUDA: SmolLM2-135M and ~1B shapes, bf16
    python scripts/gpu_check.py --device cpu --small     # smoke test on CPU (tiny shape, few tokens)
    python scripts/gpu_check.py --json out.json --peak-tflops 989

For each shape: the RM scorer's length-bucketed batched scoring vs one story at a time (target >= 5x on a
GPU), rlcw.rl.grpo.rollout's fast sampling loop (tokens/s at batch 8 and 64), and one forward+backward
training step; tokens/s, MFU against the card's bf16 dense peak (6 * params * tokens for a training
step, 2 * params * tokens for inference; `--peak-tflops` or a small table of known cards) and peak
memory. No trl, peft or datasets, no downloads: the models are built from configs with random weights.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from types import SimpleNamespace

import torch

# SmolLM2-135M's shape, a ~1B Llama shape with the same vocabulary, and a tiny one for CPU smoke tests
SHAPES = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9),
    "llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4),
}
KV_HEADS = {"smollm2-135m": 3, "llama-1b": 8, "tiny": 2}
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_memory_gb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 1024**3
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # process RSS (KB -> GB)


def card_peak(device: str, given: float | None) -> float | None:
    if given:
        return given
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def llama_config(shape: str, vocab: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        num_key_value_heads=KV_HEADS[shape],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
        **SHAPES[shape],
    )


def timed(fn, device: str, repeats: int) -> float:
    """Median seconds of `repeats` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rm_scoring(cfg, device: str, dtype, n: int, lengths: tuple[int, int], repeats: int) -> dict:
    """RMScorer.score_ids (length-bucketed batches) vs one forward per story, same inputs."""
    from transformers import LlamaForSequenceClassification

    from rlcw.rm.render import RMSpec
    from rlcw.rm.scoring import RMScorer

    keys = {k: v for k, v in cfg.to_dict().items() if k not in ("id2label", "label2id")}
    cfg = cfg.__class__(**keys, num_labels=1)
    model = LlamaForSequenceClassification(cfg).to(device=device, dtype=dtype).eval()
    scorer = RMScorer("gpu_check", model, SimpleNamespace(pad_token_id=0), RMSpec(), device=device)
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(lengths[0], lengths[1] + 1, (n,), generator=gen).tolist()
    encoded = [torch.randint(3, cfg.vocab_size, (s,), generator=gen).tolist() for s in sizes]

    @torch.inference_mode()
    def naive():
        for e in encoded:
            model(input_ids=torch.tensor([e], device=device)).logits.float().cpu()

    batched_s = timed(lambda: scorer.score_ids(encoded), device, repeats)
    naive_s = timed(naive, device, max(1, repeats // 2))
    return {"stories": n, "batched_s": batched_s, "naive_s": naive_s, "speedup": naive_s / batched_s}


def rollout(model, device: str, batch: int, prompt_len: int, new_tokens: int, params: int, peak) -> dict:
    """rlcw.sampling.sample (the rollout.kind=fast loop): tokens/s at one batch size."""
    from transformers import GenerationConfig

    from rlcw.sampling import sample

    cfg = GenerationConfig(do_sample=True, top_k=0, top_p=1.0, temperature=1.0, max_new_tokens=new_tokens)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, model.config.vocab_size, (prompt_len,), generator=gen).tolist() for _ in range(batch)]
    out = {}

    def run():
        out["c"] = sample(model, prompts, cfg, eos_ids=[-1], pad_id=0)  # eos -1: every row decodes new_tokens

    seconds = timed(run, device, 1)
    tokens = sum(map(len, out["c"]))
    tok_s = tokens / seconds
    return {
        "batch": batch,
        "tok_per_s": tok_s,
        "mfu": 2 * params * tok_s / (peak * 1e12) if peak else None,
        "peak_memory_gb": peak_memory_gb(device),
    }


def train_step(model, device: str, batch: int, seq: int, params: int, peak, repeats: int) -> dict:
    """One forward + backward (+ AdamW step) of a causal-LM loss on random tokens."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(3, model.config.vocab_size, (batch, seq), device=device)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    seconds = timed(step, device, repeats)
    tok_s = batch * seq / seconds
    model.eval()
    return {
        "batch": batch,
        "seq": seq,
        "tok_per_s": tok_s,
        "mfu": 6 * params * tok_s / (peak * 1e12) if peak else None,
        "peak_memory_gb": peak_memory_gb(device),
    }


def check_shape(shape: str, args, peak) -> dict:
    from transformers import LlamaForCausalLM

    device, dtype = args.device, torch.bfloat16
    vocab = 512 if args.small else 49152
    cfg = llama_config(shape, vocab)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    params = sum(p.numel() for p in model.parameters())
    small = args.small
    result = {"shape": shape, "params": params, "device": device, "dtype": "bf16"}
    result["rm_scoring"] = rm_scoring(cfg, device, dtype, 16 if small else 256, (8, 64) if small else (100, 1500), 1)
    new_tokens = 8 if small else args.new_tokens
    result["rollout"] = [
        rollout(model, device, b, 16 if small else 128, new_tokens, params, peak)
        for b in ((2, 4) if small else (8, 64))
    ]
    result["train_step"] = train_step(
        model, device, 2 if small else 8, 32 if small else 1024, params, peak, 1 if small else 3
    )
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="a tiny shape and few tokens: a CPU smoke test")
    p.add_argument("--shapes", default="smollm2-135m,llama-1b")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--peak-tflops", type=float, default=None, help="the card's bf16 dense peak (default: by name)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    peak = card_peak(args.device, args.peak_tflops)
    shapes = ["tiny"] if args.small else args.shapes.split(",")
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {name}; bf16 peak {peak or 'unknown'} TFLOPS; torch {torch.__version__}", flush=True)
    results = []
    for shape in shapes:
        r = check_shape(shape, args, peak)
        results.append(r)
        rm = r["rm_scoring"]
        print(f"[{shape}] {r['params'] / 1e6:.1f}M params", flush=True)
        print(
            f"  RM scoring {rm['stories']} stories: batched {rm['batched_s']:.3f} s, naive {rm['naive_s']:.3f} s, {rm['speedup']:.1f}x"
        )
        for ro in r["rollout"]:
            mfu = f", MFU {ro['mfu']:.1%}" if ro["mfu"] is not None else ""
            print(
                f"  rollout batch {ro['batch']}: {ro['tok_per_s']:.0f} tok/s{mfu}, peak memory {ro['peak_memory_gb']:.2f} GB"
            )
        ts = r["train_step"]
        mfu = f", MFU {ts['mfu']:.1%}" if ts["mfu"] is not None else ""
        print(
            f"  train step {ts['batch']}x{ts['seq']}: {ts['tok_per_s']:.0f} tok/s{mfu}, peak memory {ts['peak_memory_gb']:.2f} GB"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"device": name, "peak_tflops": peak, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
