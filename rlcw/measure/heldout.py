"""One held-out comparison of a start and a tuned policy: CRN samples, RM scores, paired bootstrap.

    recs = sample_crn(model, tokenizer, rows, HeldoutSettings(n_samples=4, max_new_tokens=88, seed=1234))
    result = measure_policies("smollm2-135m-instruct", "runs/grpo/checkpoints/final", "runs/train_rm/model",
                              rows, HeldoutSettings(), out_dir=Path("runs/quickstart/heldout"))

Common random numbers: for sample index k, `torch.manual_seed(seed + k)` once, then ONE batch holds every
prompt in a fixed order; on CPU each row's multinomial draw then depends only on its own row and step, so the
start and the tuned policy read the same noise at (prompt, k), and different k read different noise. With
`draw="inverse_cdf"` each row reads one uniform a step from a generator seeded `seed + k` (`crn_uniforms`, the
same numbers), so the sample indices share one batch (up to `CRN_BATCH_ROWS` rows; faster than per-index batches
at the quickstart's 32 prompts x 4); such a batch drops its ended rows a few at a time (`COMPACT_SHARE`). Sampling
is at temperature 1, top_k 0, top_p 1 (the policies' own distributions), on the policies in fp32 or on bf16 copies
(`precision`; auto: bf16 where AMX runs bf16 matmuls or they timed faster, `rlcw.cpu_isa`), whose linears run from packed weights. Start samples are cached in `out_dir/start.jsonl` keyed by the
settings, so re-measuring another policy against the same start costs one policy's sampling.

Scores use the RM as RL does (`rlcw.rm.scoring.load_rm`; its length-controlled residual when the RM folder holds a
length fit), in the sampler's precision (bf16: the RM's weights in bf16, scores within a few hundredths of fp32's).
The statistics are `rlcw.metrics.heldout.paired_bootstrap` over prompts.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from rlcw.cpu_isa import CPU_PRECISIONS, resolve_cpu_precision
from rlcw.errors import RlcwError
from rlcw.generation import prompt_token_ids
from rlcw.io import atomic_write_json, jsonl_lines
from rlcw.logs import say
from rlcw.metrics.heldout import paired_bootstrap
from rlcw.metrics.text import count_words, repetition_rate


@dataclass
class HeldoutSettings:
    n_samples: int = 4
    max_new_tokens: int = 88
    seed: int = 1234
    n_resamples: int = 2000
    system_prompt: str | None = None  # the RL run's (recipes pass cfg.model.system_prompt)
    # the sampler, the same for the start and the tuned policy: fp32 + multinomial (as `generate`), or the fast
    # path bf16 + inverse_cdf (bf16 copies of both policies, one random number a row a step; scripts/bench_rollout.py);
    # precision (the sampler's and the RM scoring's) auto: bf16 where AMX runs bf16 matmuls or they timed faster, fp32 elsewhere
    # (rlcw.cpu_isa.resolve_cpu_precision)
    precision: str = "fp32"
    draw: str = "multinomial"


CHUNK_SEED_STRIDE = 100_003  # chunk c of sample k seeds seed + k + stride * c (chunk 0: seed + k)
CRN_BATCH_ROWS = 192  # the inverse-CDF draw puts sample indices of a chunk in one batch, up to this many rows
# such a batch drops its ended rows once this share of it has ended (rlcw.sampling's compact_after), not at every
# ending: each compaction copies every layer's cache of the rows kept
COMPACT_SHARE = 1 / 16


def crn_uniforms(seed: int, n_rows: int, steps: int) -> torch.Tensor:
    """(n_rows, steps) uniforms of a CPU generator seeded `seed`: row b's at step t is the number that
    `torch.manual_seed(seed)` then one `torch.rand((n_rows, 1))` a step would give it."""
    return torch.rand((steps, n_rows), generator=torch.Generator().manual_seed(seed)).T


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
    draw: str = "multinomial",
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
    ks = list(range(first_sample, first_sample + n_samples))
    # the multinomial draw reads the global generator: one sample index a batch; the inverse-CDF draw reads each
    # row's own uniforms, so several indices share a batch
    group = max(1, CRN_BATCH_ROWS // min(size, len(rows))) if draw == "inverse_cdf" else 1
    for g in range(0, len(ks), group):
        kg = ks[g : g + group]
        got = {k: ([], []) for k in kg}
        for c, start in enumerate(range(0, len(rows), size)):
            chunk, seeds = ids[start : start + size], [seed + k + CHUNK_SEED_STRIDE * c for k in kg]
            if draw == "inverse_cdf":
                u = torch.cat([crn_uniforms(s, len(chunk), max_new_tokens) for s in seeds])
            else:
                torch.manual_seed(seeds[0])
                u = None
            rows_in = len(chunk) * len(kg)
            comps, logps = sample_with_logprobs(
                model, chunk * len(kg), cfg, eos_ids=eos, pad_id=pad, draw=draw, uniforms=u,
                compact_after=max(1, int(COMPACT_SHARE * rows_in)),
            )  # fmt: skip
            for j, k in enumerate(kg):
                got[k][0].extend(comps[j * len(chunk) : (j + 1) * len(chunk)])
                got[k][1].extend(logps[j * len(chunk) : (j + 1) * len(chunk)])
            bar.update(len(comps))
        for k in kg:
            yield k, ids, *got[k]
    bar.close()


class CrnStory(NamedTuple):
    """One sample of `crn_stories`: its story record and what the record leaves out."""

    record: dict  # id (`<prompt id>#<k>`), prompt_id, sample_index, prompt, story, finished, min_words, max_words
    prompt_index: int  # the row's index in `rows`
    prompt_ids: list[int]
    completion_ids: list[int]  # sampled ids, cut after the first EOS (kept)
    logps: list[float]  # each sampled token's log-prob under the model


def crn_stories(model, tokenizer, rows: list[dict], **sampler) -> Iterator[CrnStory]:
    """`crn_completions(model, tokenizer, rows, **sampler)` decoded into stories, one a (sample index, prompt row)
    in that order; `finished` says the story ended with EOS."""
    eos = [tokenizer.eos_token_id]
    for k, ids, comps, logps in crn_completions(model, tokenizer, rows, **sampler):
        for p, (row, p_ids, comp, lp) in enumerate(zip(rows, ids, comps, logps, strict=True)):
            record = {
                "id": f"{row['id']}#{k}",
                "prompt_id": row["id"],
                "sample_index": k,
                "prompt": row["prompt"],
                "story": tokenizer.decode(comp, skip_special_tokens=True).strip(),
                "finished": bool(comp) and comp[-1] in eos,
                "min_words": row.get("min_words"),
                "max_words": row.get("max_words"),
            }
            yield CrnStory(record, p, p_ids, comp, lp)


def sample_crn(model, tokenizer, rows: list[dict], s: HeldoutSettings) -> list[dict]:
    """s.n_samples story records per prompt row with common random numbers (`crn_stories`, one chunk), each with
    its `prompt_index` and `tokens` (sampled tokens)."""
    stories = crn_stories(
        model,
        tokenizer,
        rows,
        system_prompt=s.system_prompt,
        n_samples=s.n_samples,
        max_new_tokens=s.max_new_tokens,
        seed=s.seed,
        draw=s.draw,
    )
    return [{**x.record, "prompt_index": x.prompt_index, "tokens": len(x.completion_ids)} for x in stories]


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


def check_sampler(s: HeldoutSettings) -> None:
    """Reject an unknown held-out sampler before any sampling (errors name the quickstart's `heldout.*` keys)."""
    from rlcw.sampling import DRAWS

    if s.precision not in CPU_PRECISIONS:
        raise RlcwError(
            f"unknown held-out precision {s.precision!r}", where="heldout.precision", hint="fp32, bf16 or auto"
        )
    if s.draw not in DRAWS:
        raise RlcwError(f"unknown held-out draw {s.draw!r}", where="heldout.draw", hint=" or ".join(DRAWS))


def sampling_model(model, precision: str):
    """The model to sample from: fp32 as it is; bf16 as a bf16 model whose linears run from weights packed once for
    oneDNN, attention's q/k/v and the MLP's gate/up fused (rlcw.prepack: the same products as unpacked bf16)."""
    from rlcw.prepack import can_prepack, fuse_projections, prepack_linears

    if precision != "bf16":
        return model
    model = model.to(torch.bfloat16)
    if can_prepack(model):
        prepack_linears(model, batch_hint=CRN_BATCH_ROWS)
        fuse_projections(model)
    return model


def resolved(s: HeldoutSettings, stage: str = "heldout") -> HeldoutSettings:
    """`s` with precision auto made fp32 or bf16 for this machine (the log says which and why)."""
    if s.precision != "auto":
        return s
    precision, why = resolve_cpu_precision(s.precision)
    say(stage, f"sampling and RM scoring in {precision} ({why})")
    return replace(s, precision=precision)


def policy_samples(
    spec: str, tokenizer, rows: list[dict], s: HeldoutSettings, cache: Path | None = None, key: dict | None = None
) -> tuple[list[dict], float]:
    """(CRN samples of the model `spec` (a LoRA checkpoint is merged), seconds); reused from `cache` when
    its header matches `key`."""
    from rlcw.models import load_causal_lm

    if cache is not None and cache.is_file():
        lines = jsonl_lines(cache.read_text(encoding="utf-8"))
        if lines and json.loads(lines[0]) == key:
            return [json.loads(x) for x in lines[1:]], 0.0
    start = time.time()
    check_sampler(s)
    s = resolved(s)
    model = sampling_model(load_causal_lm(spec, merge_lora=True), s.precision)  # dropped below
    recs = sample_crn(model, tokenizer, rows, s)
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
    from rlcw.rm.scoring import load_rm

    out_dir.mkdir(parents=True, exist_ok=True)
    check_sampler(s)
    s = resolved(s)  # the start cache's key names the precision sampled
    tok = load_tokenizer(start_spec, padding_side="left")
    key = {"start": start_spec, "prompts": [r["id"] for r in rows], **asdict(s)}
    start, t_start = policy_samples(start_spec, tok, rows, s, start_cache or out_dir / "start_cache.jsonl", key)
    tuned, t_tuned = policy_samples(tuned_spec, tok, rows, s)
    t0 = time.time()
    scorer = load_rm(rm_path, precision=s.precision)  # the sampler's precision, resolved above
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


# reward types that score text alone; the length terms read token ids the held-out records do not keep (the
# held-out table reports in-range, too-short and ended shares instead)
TEXT_REWARD_TYPES = ("bt", "genrm", "remote", "rubric", "slop", "python")


def check_score_with(specs: dict, key: str = "heldout.score_with") -> None:
    """Every spec of `score_with` names a text reward type (rlcw.rewards.factory specs; weight is ignored)."""
    from rlcw.rewards.factory import REWARD_TYPES

    if not isinstance(specs, dict):
        raise RlcwError("must be a mapping name -> reward spec", where=key, hint=f"e.g. {key}.rubric.type=rubric")
    for name, spec in specs.items():
        where = f"{key}.{name}"
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind not in REWARD_TYPES:
            raise RlcwError(
                f"a reward spec needs a known 'type', got {kind!r}",
                where=where,
                hint=f"types: {', '.join(TEXT_REWARD_TYPES)}",
            )
        if kind not in TEXT_REWARD_TYPES:
            raise RlcwError(
                f"type {kind} reads token counts the held-out samples do not keep",
                where=f"{where}.type",
                hint=f"use one of {', '.join(TEXT_REWARD_TYPES)}; the held-out table already has the in-range, "
                "too-short and ended shares",
            )


def _change(start: dict, tuned: dict, n_resamples: int) -> dict:
    """Start mean, tuned mean and the paired change with a CI over prompts; stories whose score is NaN in either
    policy (a judge with no valid verdict) are left out of the pair and counted."""
    from rlcw.metrics.overopt import paired_prompt_bootstrap

    keys = [k for k in start if math.isfinite(start[k]) and math.isfinite(tuned[k])]
    out = {"dropped": len(start) - len(keys)}
    if not keys:
        return {**out, "start": math.nan, "tuned": math.nan, "delta": math.nan, "lo": math.nan, "hi": math.nan}
    d = paired_prompt_bootstrap({k: tuned[k] for k in keys}, {k: start[k] for k in keys}, n_resamples=n_resamples)
    out.update(start=float(np.mean([start[k] for k in keys])), tuned=float(np.mean([tuned[k] for k in keys])))
    out.update(delta=d.delta, lo=d.ci_low, hi=d.ci_high, n_prompts=d.n_prompts)
    return out


def score_with(
    specs: dict, start: list[dict], tuned: list[dict], defaults: dict, n_resamples: int
) -> tuple[dict, list[dict]]:
    """Each reward spec's score of the start and the tuned held-out samples, scored in ONE call (a judge
    batches all of them; a slop term's fingerprint pools both), and the change with a CI over prompts:
    {name: {start, tuned, delta, lo, hi, n_prompts, dropped}}; a rubric adds `criteria`: the same per criterion
    (its P(yes) or 1/0). Also returns one row per story (policy, prompt_id, sample_index, each scorer's value and
    each criterion's as `<name>/<criterion>`; None where NaN), so two runs' samples can be compared story by story."""
    from rlcw.rewards.factory import build_reward

    check_score_with(specs)
    records = start + tuned
    prompts, stories = [r["prompt"] for r in records], [r["story"] for r in records]
    keys = [(r["prompt_id"], r["sample_index"]) for r in records]
    n = len(start)

    def change(values: list[float]) -> dict:  # the start's scores are the first n, the tuned policy's the rest
        return _change(
            dict(zip(keys[:n], values[:n], strict=True)), dict(zip(keys[n:], values[n:], strict=True)), n_resamples
        )

    rows = [
        {"policy": "start" if i < n else "tuned", "prompt_id": k[0], "sample_index": k[1]} for i, k in enumerate(keys)
    ]

    def keep(column: str, values: list[float]) -> list[float]:
        for row, v in zip(rows, values, strict=True):
            row[column] = v if math.isfinite(v) else None
        return values

    out = {}
    for name, spec in specs.items():
        func = build_reward(dict(spec), defaults, f"heldout.score_with.{name}")
        if hasattr(func, "progress"):  # a judge's verdicts over every held-out story: minutes on a CPU
            func.progress = True
        scores = func.score(prompts, stories) if hasattr(func, "score") else func(prompts=prompts, completions=stories)
        out[name] = change(keep(name, [float(x) for x in scores]))
        values = getattr(func, "last_values", None)
        if spec.get("type") == "rubric" and values:
            out[name]["criteria"] = {
                c.name: change(keep(f"{name}/{c.name}", [math.nan if v[j] is None else float(v[j]) for v in values]))
                for j, c in enumerate(func.criteria)
            }
    return out, rows
