"""Outcome-study measurement: samples kept as token ids, KL to the start on those ids, scores per story.

    recs = sample_stories(model, tokenizer, rows, n_samples=4, max_new_tokens=88, seed=1234, system_prompt=None,
                          keep_logps=True)
    add_kl(recs, reference, pad_id=tokenizer.pad_token_id, batch_size=32)        # kl_k3, kl_k1 per story
    add_scores(recs, {"gold": gold, "proxy_large": proxy})                      # scores[name], words, rep
    points = checkpoints_of("runs/outcome/grpo")                                   # [(4, .../checkpoint-4), ...]

Sampling: temperature 1, top_k 0, top_p 1, so the samples come from the distribution whose
log-probs the KL uses (`rlcw.measure.kl.check_full_distribution`); `rlcw.sampling.sample` keeps the
sampled ids, cut after the first EOS (kept). Common random numbers by `rlcw.measure.heldout.crn_completions`
(as story records by `crn_stories`): rows go in fixed chunks of `batch_size`, and chunk c of sample index k draws after
`torch.manual_seed(seed + k + CHUNK_SEED_STRIDE * c)`, so the start and a checkpoint read the same noise
at (prompt, k) whatever the other chunks consumed; with `draw="inverse_cdf"` (`measure.draw`) each row reads
its index's uniforms and several indices share a batch (see `crn_completions`). Each record keeps `prompt_ids` and
`completion_ids`.

KL per story on the SAMPLED ids (EOS included): the policy's log-probs are those the sampler drew with
(the full distribution at temperature 1; equal to `rlcw.measure.kl.sampled_logprobs` of the policy, tested,
and one forward cheaper), the start's come from `sampled_logprobs`, summed per story by `kl_per_story`
with both estimators: k3 (the report's, never negative) and k1 (kept alongside). d = sqrt(mean KL per
story) is Gao et al.'s axis.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch

from rlcw.errors import RlcwError
from rlcw.measure.heldout import crn_stories
from rlcw.measure.kl import kl_per_story, sampled_logprobs
from rlcw.metrics.text import count_words, repetition_rate

_TRL_CKPT = re.compile(r"^checkpoint-(\d+)$")
_PPO_CKPT = re.compile(r"^step_(\d+)$")
ESTIMATORS = ("k3", "k1")


def checkpoints_of(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, adapter folder) of every saved checkpoint of a grpo/dpo (TRL) or ppo run, by step.

    TRL checkpoints are `checkpoints/checkpoint-N`; rlcw PPO's are `checkpoints/step_XXXXXX/policy`.
    `checkpoints/final` is added at step max+1 only when no numbered checkpoint exists."""
    root = Path(run_dir) / "checkpoints"
    found: dict[int, Path] = {}
    for p in sorted(root.iterdir()) if root.is_dir() else []:
        m = _TRL_CKPT.match(p.name)
        if m and (p / "adapter_config.json").is_file():
            found[int(m.group(1))] = p
        m = _PPO_CKPT.match(p.name)
        if m and (p / "policy" / "adapter_config.json").is_file():
            found[int(m.group(1))] = p / "policy"
    if not found and (root / "final" / "adapter_config.json").is_file():
        found[1] = root / "final"
    return sorted(found.items())


@torch.no_grad()
def sample_stories(
    model,
    tokenizer,
    rows: list[dict],
    *,
    n_samples: int,
    max_new_tokens: int,
    seed: int,
    system_prompt: str | None,
    first_sample: int = 0,
    system: str = "model",
    batch_size: int = 96,
    keep_logps: bool = False,
    draw: str = "multinomial",
) -> list[dict]:
    """Samples first_sample .. first_sample + n_samples - 1 per prompt row (CRN; see the module docstring).

    Records are story records (`id` = `<prompt id>#<k>`, prompt, story, system, the row's word range and
    `reference` when it has one) plus prompt_id, sample_index, prompt_ids, completion_ids, finished, and
    with `keep_logps` each sampled token's log-prob under `model` (`completion_logps`, for `add_kl`)."""
    out = []
    for x in crn_stories(
        model,
        tokenizer,
        rows,
        system_prompt=system_prompt,
        n_samples=n_samples,
        max_new_tokens=max_new_tokens,
        seed=seed,
        first_sample=first_sample,
        batch_size=batch_size,
        what="outcome",
        where="measure",
        draw=draw,
    ):
        rec = {**x.record, "system": system, "prompt_ids": x.prompt_ids, "completion_ids": list(x.completion_ids)}
        reference = rows[x.prompt_index].get("reference")
        if reference:
            rec["reference"] = reference
        if keep_logps:
            rec["completion_logps"] = [float(v) for v in x.logps]
        out.append(rec)
    return out


def add_kl(records: list[dict], reference, *, pad_id: int, batch_size: int = 32, policy=None) -> list[dict]:
    """Each record plus kl_k3 and kl_k1: KL(policy || reference) of that story on its sampled ids.

    The policy's log-probs are the ones the sampler drew with (`completion_logps`, kept by
    `sample_stories(keep_logps=True)`: the full distribution at temperature 1, so they equal
    `sampled_logprobs(policy, ...)`, tested) unless `policy` is given, then one forward of it; the
    reference's come from `sampled_logprobs`. A record with no sampled token gets KL 0."""
    reference.eval()
    scored = [r for r in records if r["completion_ids"]]
    for r in records:
        if not r["completion_ids"]:
            r.update(kl_k3=0.0, kl_k1=0.0)
    for start in range(0, len(scored), batch_size):
        batch = scored[start : start + batch_size]
        p_ids, c_ids = [r["prompt_ids"] for r in batch], [r["completion_ids"] for r in batch]
        ref_logp, mask = sampled_logprobs(reference, p_ids, c_ids, pad_id=pad_id)  # (B, T) x2
        if policy is not None:
            policy.eval()
            logp, _ = sampled_logprobs(policy, p_ids, c_ids, pad_id=pad_id)
        else:
            logp = torch.zeros_like(ref_logp)
            for i, r in enumerate(batch):
                logp[i, : len(r["completion_logps"])] = torch.tensor(r["completion_logps"])
        per = {e: kl_per_story(logp, ref_logp, mask, e).tolist() for e in ESTIMATORS}  # (B,) each
        for i, r in enumerate(batch):
            r.update({f"kl_{e}": float(per[e][i]) for e in ESTIMATORS})
    return records


def add_scores(records: list[dict], scorers: Mapping[str, object]) -> list[dict]:
    """Each record plus scores[name] for every scorer (`score(prompts, stories)`), words and trigram `rep`."""
    prompts, texts = [r["prompt"] for r in records], [r["story"] for r in records]
    for name, scorer in scorers.items():
        values = scorer.score(prompts, texts)
        for r, v in zip(records, values, strict=True):
            r.setdefault("scores", {})[name] = float(v)
    for r in records:
        r["words"], r["rep"] = count_words(r["story"]), repetition_rate(r["story"], 3)
    return records


def load_gold_scorer(path: str, batch_size: int = 16):
    """The gold: an rlcw RM folder (its rlcw_rm.json says how it renders text), or any sequence-classification
    RM by folder or hub id (scored on the chat conversation user=prompt, assistant=story). Never
    length-controlled: the gold is measured as it is."""
    from rlcw.models import resolve
    from rlcw.rm.render import SPEC_FILE, RMSpec
    from rlcw.rm.scoring import RMScorer, load_rm

    try:
        src = resolve(path)
    except RlcwError as exc:
        raise RlcwError(str(exc).split("\n  hint:")[0], where="gold.rm_path", hint=exc.hint) from None
    if (Path(src) / SPEC_FILE).is_file():
        return load_rm(src, batch_size=batch_size, length_control=False)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    try:
        model = AutoModelForSequenceClassification.from_pretrained(src)
        tokenizer = AutoTokenizer.from_pretrained(src)
    except (OSError, ValueError) as exc:
        raise RlcwError(
            f"cannot load the gold reward model: {exc}",
            where="gold.rm_path",
            hint="an rlcw RM folder (`rlcw train-rm` <run>/model) or a sequence-classification RM hub id",
        ) from None
    if model.config.num_labels != 1:
        raise RlcwError(
            f"the gold RM has {model.config.num_labels} output labels; a reward model has 1", where="gold.rm_path"
        )
    spec = RMSpec(base_model=str(src), include_prompt=True, input_template="chat", pad_token=tokenizer.pad_token or "")
    return RMScorer(src, model, tokenizer, spec, batch_size=batch_size)
