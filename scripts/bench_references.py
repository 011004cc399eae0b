"""Reference injection's teacher forcing at the quickstart's sizes: one padded forward for a step's references
(logits only where a reference token is predicted, the processors over all positions at once) against one forward
per reference with a position-by-position loop (the way it ran before), same rows, same copy, in one run.

    OMP_NUM_THREADS=2 python scripts/bench_references.py                     # embedded model, bf16 and fp32 copies
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python scripts/bench_references.py --precisions fp32

A quickstart step injects one reference a group (batch / num_generations rows: the bundled references of the first
prompts, in the quickstart's chat format). Each row prints the median seconds a step of each way over --repeats
interleaved passes, their ratio, and the largest log-prob difference between the two ways (float rounding only).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from quickstart_sizes import add_size_args


@torch.inference_mode()
def one_by_one(model, prompts, completions, cfg) -> list[list[float]]:
    """The baseline, as teacher forcing ran before: a forward per reference (one row, full-sequence logits), then
    the logits processors and a log-softmax position by position."""
    from rlcw.sampling import logits_processors

    procs, out = logits_processors(cfg), []
    for prompt, completion in zip(prompts, completions, strict=True):
        ids = torch.tensor([prompt + completion])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        row = []
        for t, token in enumerate(completion):
            scores = procs(ids[:, : len(prompt) + t], logits[t : t + 1])
            row.append(float(torch.log_softmax(scores, dim=-1)[0, token]))
        out.append(row)
    return out


def main() -> None:
    from transformers import GenerationConfig

    from rlcw.data.prompts import load_prompts
    from rlcw.generation import prompt_token_ids
    from rlcw.models import load_causal_lm, load_tokenizer
    from rlcw.recipes.common.sections import DEFAULT_SYSTEM_PROMPT
    from rlcw.rl.grpo.references import ReferenceInjection, teacher_forced_logprobs
    from rlcw.rl.grpo.rollout import MergedPolicy

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    add_size_args(p, "--max-new-tokens", lora=False)  # the quickstart's, from its config
    p.add_argument("--precisions", nargs="+", default=["bf16", "fp32"], choices=["bf16", "fp32"])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    tok = load_tokenizer(args.model, padding_side="left")
    policy = load_causal_lm(args.model, "float32").eval()
    refs = ReferenceInjection.load("bundled", tok, tok.eos_token_id, args.max_new_tokens)
    covered = [r for r in load_prompts("bundled", "train") if r["prompt"] in refs.ids]
    rows = covered[: args.batch // args.num_generations]  # one reference a group
    prompts = prompt_token_ids(tok, rows, DEFAULT_SYSTEM_PROMPT)
    completions = [refs.ids[r["prompt"]] for r in rows]
    cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens, do_sample=True, temperature=args.temperature, top_p=1.0, top_k=0,
        pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id],
    )  # fmt: skip
    print(
        f"{len(rows)} references a step; prompts {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
        f"references {min(map(len, completions))}-{max(map(len, completions))}; {torch.get_num_threads()} threads"
    )
    for precision in args.precisions:
        model = MergedPolicy(policy, precision, prepack=True).refresh().eval()
        ways = {
            "one forward a reference": lambda m=model: one_by_one(m, prompts, completions, cfg),
            "one padded forward": lambda m=model: teacher_forced_logprobs(
                m, prompts, completions, cfg, tok.pad_token_id
            ),
        }
        times = {k: [] for k in ways}
        out = {k: f() for k, f in ways.items()}  # warm-up, and the two ways' log-probs
        gap = max(abs(a - b) for x, y in zip(*out.values(), strict=True) for a, b in zip(x, y, strict=True))
        for _ in range(args.repeats):
            for k, f in ways.items():
                t = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t)
        base, new = (statistics.median(v) for v in times.values())
        print(
            f"{precision}: one forward a reference {base:.3f} s, one padded forward {new:.3f} s a step: "
            f"{base / new:.2f}x; largest log-prob difference {gap:.2e}"
        )


if __name__ == "__main__":
    main()
