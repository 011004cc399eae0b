"""Per-checkpoint measurements of the outcome study: proxy, gold, length, repetition, diversity, KL.

    points = checkpoints_of("runs/outcome/grpo")          # [(0, None), (4, .../checkpoint-4), ...]
    m = Measurer(prompts, proxy_scorer, gold_scorer, MeasureSettings())
    stories, metrics = m.measure(model, tokenizer, "grpo@4")

Stories are sampled on held-out prompts with the same seed for every checkpoint. KL to the start
is the Monte-Carlo estimate on those samples (k3 = r - 1 - log r per token, r = pi_0/pi; per story
summed over tokens, and per token; the plain k1 = log pi - log pi_0 is kept as kl_seq_k1), computed with the LoRA adapter enabled and disabled; it is an
unbiased estimate of KL(pi || pi_0) only when sampling is at temperature 1 and top_p 1 (the study's
default). Best-of-n has no weights: its KL is the analytic bound log n - (n-1)/n.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from rlcw.generation import chat_messages, generate_stories
from rlcw.metrics.pairwise import side_agreement
from rlcw.metrics.stories import in_range_share, mean, repetition_stats
from rlcw.metrics.text import count_words, distinct_n
from rlcw.rewards.length import length_penalty
from rlcw.rl.ppo_math import kl_per_token, logprobs_from_logits

_TRL_CKPT = re.compile(r"^checkpoint-(\d+)$")
_PPO_CKPT = re.compile(r"^step_(\d+)$")


@dataclass
class MeasureSettings:
    max_new_tokens: int = 88
    temperature: float = 1.0  # 1.0 with top_p 1.0: the KL estimate is unbiased
    top_p: float = 1.0
    batch_size: int = 16
    seed: int = 1234


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


def story_metrics(stories: list[dict]) -> dict[str, float]:
    """Length against the prompt's stated range, repetition within stories, diversity across them
    (the numbers of the `length` and `repetition` evaluators, from rlcw.metrics.stories, plus distinct-2
    and words / stated maximum)."""
    texts = [s["story"] for s in stories]
    words = [count_words(t) for t in texts]
    rep = repetition_stats(texts, 3)
    out = {
        "words": mean([float(w) for w in words]),
        "rep_intra_3": rep["intra_trigram_rep"],
        "distinct_2": distinct_n(texts, 2),
        "distinct_3": rep["distinct_3"],
    }
    ranged = [(w, s) for w, s in zip(words, stories, strict=True) if s.get("min_words") is not None]
    if ranged:
        out["in_range"] = in_range_share([w for w, _ in ranged], [(s["min_words"], s["max_words"]) for _, s in ranged])
        out["range_penalty"] = mean([length_penalty(w, s["min_words"], s["max_words"]) for w, s in ranged])
        out["words_over_max"] = mean([w / s["max_words"] for w, s in ranged if s.get("max_words") is not None])
    return out


def _adapter_off(model):
    return model.disable_adapter() if hasattr(model, "disable_adapter") and hasattr(model, "peft_config") else None


@torch.no_grad()
def sequence_logprobs(
    model, tokenizer, stories: list[dict], system_prompt: str | None, batch_size: int = 8
) -> list[torch.Tensor]:
    """Per-token log-probs of each story given its chat prompt (the story re-tokenized after the prompt)."""
    model.eval()
    out: list[torch.Tensor] = []
    for start in tqdm(range(0, len(stories), batch_size), desc="log-probs", leave=False):
        rows = stories[start : start + batch_size]
        seqs, cuts = [], []
        for r in rows:
            prompt_ids = tokenizer.apply_chat_template(
                chat_messages(system_prompt, r["prompt"]), add_generation_prompt=True, tokenize=True
            )
            if hasattr(prompt_ids, "keys"):
                prompt_ids = prompt_ids["input_ids"]
            story_ids = tokenizer(r["story"], add_special_tokens=False)["input_ids"]
            seqs.append(list(prompt_ids) + list(story_ids))
            cuts.append(len(prompt_ids))
        width = max(map(len, seqs))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):  # right padding: positions line up with the unpadded sequence
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        logp = logprobs_from_logits(logits[:, :-1], ids[:, 1:])  # (B, T-1)
        for i, s in enumerate(seqs):
            out.append(logp[i, cuts[i] - 1 : len(s) - 1].clone())  # log p(story token t | everything before)
    return out


def kl_to_start(
    model, tokenizer, stories: list[dict], system_prompt: str | None, batch_size: int = 8
) -> dict[str, float]:
    """Monte-Carlo KL(policy || start) on the policy's own samples; 0 for a model without an adapter."""
    off = _adapter_off(model)
    if off is None:
        return {"kl_seq": 0.0, "kl_token": 0.0}
    policy = sequence_logprobs(model, tokenizer, stories, system_prompt, batch_size)
    with off:
        start = sequence_logprobs(model, tokenizer, stories, system_prompt, batch_size)
    # k3 per token (never negative, so a small KL is not lost in sampling noise); k1 kept alongside
    k3s = [kl_per_token(p, s, "k3") for p, s in zip(policy, start, strict=False)]
    k1s = [kl_per_token(p, s, "k1") for p, s in zip(policy, start, strict=False)]
    tokens = sum(d.numel() for d in k3s)
    return {
        "kl_seq": float(sum(d.sum().item() for d in k3s) / len(k3s)),
        "kl_token": float(sum(d.sum().item() for d in k3s) / max(tokens, 1)),
        "kl_seq_k1": float(sum(d.sum().item() for d in k1s) / len(k1s)),
    }


class Measurer:
    """Samples held-out stories from a model and measures them with the proxy and gold scorers."""

    def __init__(self, prompts: list[dict], proxy, gold, settings: MeasureSettings, system_prompt: str | None):
        self.prompts, self.proxy, self.gold, self.s, self.system_prompt = prompts, proxy, gold, settings, system_prompt

    def sample(self, model, tokenizer, system: str) -> list[dict]:
        s = self.s
        with torch.no_grad():
            return generate_stories(
                model,
                tokenizer,
                self.prompts,
                system_prompt=self.system_prompt,
                system_name=system,
                max_new_tokens=s.max_new_tokens,
                temperature=s.temperature,
                top_p=s.top_p,
                batch_size=s.batch_size,
                seed=s.seed,
                show_progress=True,
            )

    def score(self, stories: list[dict]) -> dict[str, float]:
        """Proxy and gold means, and the per-story scores written back into each record's meta."""
        prompts, texts = [x["prompt"] for x in stories], [x["story"] for x in stories]
        proxy, gold = self.proxy.score(prompts, texts), self.gold.score(prompts, texts)
        for x, p, g in zip(stories, proxy, gold, strict=False):
            x["meta"] = {**x.get("meta", {}), "proxy": float(p), "gold": float(g)}
        return {"proxy": sum(proxy) / len(proxy), "gold": sum(gold) / len(gold), **story_metrics(stories)}

    def measure(self, model, tokenizer, system: str) -> tuple[list[dict], dict[str, float]]:
        stories = self.sample(model, tokenizer, system)
        metrics = self.score(stories)
        metrics.update(kl_to_start(model, tokenizer, stories, self.system_prompt, self.s.batch_size))
        return stories, metrics


def rm_agreement(proxy_pairs: list[dict], gold_pairs: list[dict]) -> dict[str, float]:
    """Share of pairs on which two RMs prefer the same side, from eval-rm `scores.jsonl` rows of the same pair file."""
    n = min(len(proxy_pairs), len(gold_pairs))
    share, _ = side_agreement(
        [a["chosen_score"] - a["rejected_score"] for a in proxy_pairs[:n]],
        [b["chosen_score"] - b["rejected_score"] for b in gold_pairs[:n]],
        skip_ties=False,
    )
    return {"agreement": share, "pairs": float(n)}


def paired_agreement(stories_a: list[dict], stories_b: list[dict]) -> dict[str, float]:
    """Do proxy and gold agree on which of two stories for the same prompt is better? (meta scores from `Measurer.score`)"""
    by_id = {x["id"]: x for x in stories_b}
    both = [(a["meta"], by_id[a["id"]]["meta"]) for a in stories_a if a["id"] in by_id]
    share, n = side_agreement(
        [a["proxy"] - b["proxy"] for a, b in both], [a["gold"] - b["gold"] for a, b in both], skip_ties=True
    )
    return {"agreement": share, "pairs": float(n)}
