"""One held-out comparison of a start and a tuned policy: CRN samples, RM scores, paired bootstrap.

    recs = sample_crn(model, tokenizer, rows, system_prompt=None, n_samples=4, max_new_tokens=88, seed=1234)
    result = measure_policies("smollm2-135m-instruct", "runs/grpo/checkpoints/final", "runs/train_rm/model",
                              rows, HeldoutSettings(), out_dir=Path("runs/quickstart/heldout"))

Common random numbers: for sample index k, `torch.manual_seed(seed
+ k)` once, then ONE batch holds every prompt in a fixed order; on CPU each row's multinomial draw
then depends only on its own row and step, so the start and the tuned policy read the same noise at
(prompt, k), and different k read different noise. Sampling is at temperature 1, top_k 0, top_p 1
(the policies' own distributions). Start samples are cached in `out_dir/start.jsonl` keyed by the
settings, so re-measuring another policy against the same start costs one policy's sampling.

Scores use the RM exactly as RL does (`BTScorer`; its length-controlled residual when the RM folder
holds a length fit). The statistics are `rlcw.metrics.heldout.paired_bootstrap` over prompts.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from rlcw.errors import RlcwError
from rlcw.generation import prompt_token_ids
from rlcw.io import atomic_write_json
from rlcw.metrics.heldout import paired_bootstrap
from rlcw.metrics.text import count_words, repetition_rate


@dataclass
class HeldoutSettings:
    n_samples: int = 4
    max_new_tokens: int = 88
    seed: int = 1234
    n_resamples: int = 2000
    system_prompt: str | None = None  # the RL run's (recipes pass cfg.model.system_prompt)


CHUNK_SEED_STRIDE = 100_003  # chunk c of sample k seeds seed + k + stride * c (chunk 0: seed + k)


def crn_completions(
    model,
    tokenizer,
    rows: list[dict],
    *,
    system_prompt: str | None,
    n_samples: int,
    max_new_tokens: int,
    seed: int,
    first_sample: int = 0,
    batch_size: int | None = None,
    what: str = "held-out",
    where: str = "heldout",
):
    """The one CRN sampler (see the module docstring): for each sample index k in first_sample ..
    first_sample + n_samples - 1, yields (k, prompt ids, completions, log-probs), one entry per row. Rows go
    in fixed chunks of `batch_size` (None: one chunk); chunk c of index k draws after
    `torch.manual_seed(seed + k + CHUNK_SEED_STRIDE * c)`, so a row reads the same noise at (prompt, k)
    whatever the other chunks consumed. Completions are sampled ids cut after the first EOS (kept)."""
    from transformers import GenerationConfig

    from rlcw.sampling import sample_with_logprobs

    if not rows or n_samples < 1:
        raise RlcwError(f"{what} sampling needs at least one prompt and one sample", where=where)
    cfg = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens)
    eos = [tokenizer.eos_token_id]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = prompt_token_ids(tokenizer, rows, system_prompt)
    size = batch_size or len(rows)
    model.eval()
    bar = tqdm(total=n_samples * len(rows), desc=f"{what} samples", unit="story")
    for k in range(first_sample, first_sample + n_samples):
        comps, logps = [], []
        for c, start in enumerate(range(0, len(rows), size)):
            torch.manual_seed(seed + k + CHUNK_SEED_STRIDE * c)
            chunk = sample_with_logprobs(model, ids[start : start + size], cfg, eos_ids=eos, pad_id=pad)
            comps, logps = comps + chunk[0], logps + chunk[1]
            bar.update(len(chunk[0]))
        yield k, ids, comps, logps
    bar.close()


def sample_crn(
    model, tokenizer, rows: list[dict], *, system_prompt: str | None, n_samples: int, max_new_tokens: int, seed: int
) -> list[dict]:
    """n_samples completions per prompt row with common random numbers (`crn_completions`, one chunk)."""
    eos = [tokenizer.eos_token_id]
    out = []
    for k, _, comps, _ in crn_completions(
        model,
        tokenizer,
        rows,
        system_prompt=system_prompt,
        n_samples=n_samples,
        max_new_tokens=max_new_tokens,
        seed=seed,
    ):
        for p, (row, comp) in enumerate(zip(rows, comps, strict=True)):
            out.append(
                {
                    "id": f"{row['id']}#{k}",
                    "prompt_id": row["id"],
                    "prompt_index": p,
                    "sample_index": k,
                    "prompt": row["prompt"],
                    "story": tokenizer.decode(comp, skip_special_tokens=True).strip(),
                    "tokens": len(comp),
                    "finished": bool(comp) and comp[-1] in eos,
                    "min_words": row.get("min_words"),
                    "max_words": row.get("max_words"),
                }
            )
    return out


def add_scores(records: list[dict], scorer) -> list[dict]:
    """Each record plus `score` (the RM as RL uses it), `words`, `in_range` (ended, with its word count inside
    the prompt's range), `in_range_words` (word count inside, cut or not), `ended_short` (ended below the
    range), `rep` (trigram repetition)."""
    scores = scorer.score([r["prompt"] for r in records], [r["story"] for r in records])
    for r, s in zip(records, scores, strict=True):
        w = count_words(r["story"])
        lo, hi = r.get("min_words"), r.get("max_words")
        inside = lo is not None and hi is not None and lo <= w <= hi
        # a story cut at the cap has no length of its own (it did not end): it is not inside any range
        r.update(score=float(s), words=w, in_range=inside and bool(r["finished"]), in_range_words=inside)
        r["ended_short"] = bool(r["finished"]) and lo is not None and w < lo
        r["rep"] = repetition_rate(r["story"], 3)
    return records


def as_arrays(records: list[dict], n_prompts: int, n_samples: int) -> dict[str, np.ndarray]:
    """(prompts, samples) arrays of score, words, finished, in_range, rep from scored records."""
    keys = ("score", "words", "finished", "in_range", "rep")
    keys += tuple(k for k in ("in_range_words", "ended_short") if records and k in records[0])
    out = {k: np.full((n_prompts, n_samples), np.nan) for k in keys}
    for r in records:
        for k in out:
            out[k][r["prompt_index"], r["sample_index"]] = float(r[k])
    if any(np.isnan(v).any() for v in out.values()):
        raise RlcwError("held-out records do not cover every (prompt, sample) pair", where="heldout")
    return out


def _write_jsonl(path: Path, records: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    tmp.replace(path)


def policy_samples(
    spec: str, tokenizer, rows: list[dict], s: HeldoutSettings, cache: Path | None = None, key: dict | None = None
) -> tuple[list[dict], float]:
    """(CRN samples of the model `spec` (a LoRA checkpoint is merged), seconds); reused from `cache` when
    its header matches `key`."""
    from rlcw.models import load_causal_lm

    if cache is not None and cache.is_file():
        lines = cache.read_text().splitlines()
        if lines and json.loads(lines[0]) == key:
            return [json.loads(x) for x in lines[1:]], 0.0
    start = time.time()
    model = load_causal_lm(spec, merge_lora=True)
    recs = sample_crn(
        model,
        tokenizer,
        rows,
        system_prompt=s.system_prompt,
        n_samples=s.n_samples,
        max_new_tokens=s.max_new_tokens,
        seed=s.seed,
    )
    del model
    if cache is not None:
        _write_jsonl(cache, [key, *recs])
    return recs, time.time() - start


def measure_policies(
    start_spec: str,
    tuned_spec: str,
    rm_path: str,
    rows: list[dict],
    s: HeldoutSettings,
    out_dir: Path,
    start_cache: Path | None = None,
) -> dict:
    """Sample start and tuned once each (CRN), score with the RM, bootstrap over prompts; writes
    `out_dir/{start,tuned}.jsonl` (scored samples) and `out_dir/heldout.json`; returns the statistics.
    The start samples are cached in `start_cache` (default `out_dir/start_cache.jsonl`)."""
    from rlcw.models import load_tokenizer
    from rlcw.rewards.bt import BTScorer

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(start_spec, padding_side="left")
    key = {"start": start_spec, "prompts": [r["id"] for r in rows], **asdict(s)}
    start, t_start = policy_samples(start_spec, tok, rows, s, start_cache or out_dir / "start_cache.jsonl", key)
    tuned, t_tuned = policy_samples(tuned_spec, tok, rows, s)
    t0 = time.time()
    scorer = BTScorer(rm_path)
    start, tuned = add_scores([dict(r) for r in start], scorer), add_scores(tuned, scorer)
    t_score = time.time() - t0
    _write_jsonl(out_dir / "start.jsonl", start)
    _write_jsonl(out_dir / "tuned.jsonl", tuned)
    stats = paired_bootstrap(
        as_arrays(start, len(rows), s.n_samples), as_arrays(tuned, len(rows), s.n_samples), s.n_resamples
    )
    stats.update(time_sample_start_s=t_start, time_sample_tuned_s=t_tuned, time_score_s=t_score)
    atomic_write_json(out_dir / "heldout.json", {"settings": asdict(s), "tuned": tuned_spec, "stats": stats})
    return stats
