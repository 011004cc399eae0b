"""A generative reward model (GenRM / GenRM-CoT) as a pairwise scorer and as a TRL reward.

    scorer = GenRMScorer("runs/genrm/model")
    scorer.prefer_ordered(prompts, first, second)   # P(first shown is better), None if no verdict
    scorer.prefer(prompts, a, b)                    # P(a better), averaged over both orders (None: an order gave no verdict)
    GenRMReward("runs/genrm/model", mode="groupmates", k=2, num_generations=4)   # TRL reward

The verdict is read from the next-token probabilities of " A" and " B" (renormalised over the
two) after the `Preferred:` prefix. A CoT GenRM first writes its rationale greedily (up to
`max_rationale_tokens`); a rationale without `Preferred:` gives None. Layout and truncation come
from `rlcw.rm.render` (the same functions training uses).
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import StoppingCriteria

from rlcw.data.records import message_text
from rlcw.errors import RlcwError
from rlcw.metrics.pairwise import averaged_preference
from rlcw.rm.render import (
    VERDICT_PREFIX,
    RMSpec,
    encode_genrm_prompt,
    genrm_cot,
    genrm_max_rationale_tokens,
    genrm_response_prefix,
    load_spec,
    parse_verdict_prefix,
    verdict_token_ids,
)
from rlcw.rm.scoring import pad_batch


class _StopAtVerdict(StoppingCriteria):
    """Stops a row once its generated tail contains `Preferred:` (cheaper than transformers' stop_strings)."""

    def __init__(self, tokenizer, prompt_width: int, tail: int = 8):
        self.tokenizer, self.start, self.tail = tokenizer, prompt_width, tail

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        tails = self.tokenizer.batch_decode(input_ids[:, max(self.start, input_ids.shape[1] - self.tail) :])
        return torch.tensor([VERDICT_PREFIX in t for t in tails], device=input_ids.device)


class GenRMScorer:
    """Pairwise preferences from a GenRM folder written by `rlcw train-rm rm.type=genrm`."""

    def __init__(
        self,
        rm_dir: str | Path,
        batch_size: int = 8,
        device: str | None = None,
        model=None,
        tokenizer=None,
        spec: RMSpec | None = None,
        show_progress: bool = True,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.rm_dir = Path(rm_dir)
        self.spec = spec or load_spec(self.rm_dir)
        if self.spec.type != "genrm":
            raise RlcwError(
                f"expected a genrm reward model, this one is '{self.spec.type}'",
                where=str(self.rm_dir),
                hint="a bt RM scores single stories: use rlcw.rm.scoring.load_rm",
            )
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.rm_dir)
        self.model = model or AutoModelForCausalLM.from_pretrained(self.rm_dir)
        self.device = device or next(self.model.parameters()).device
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.label_ids = verdict_token_ids(self.tokenizer)
        self.__name__ = f"genrm_{self.rm_dir.parent.name or self.rm_dir.name}"

    def _batches(self, n: int, desc: str):
        starts = range(0, n, self.batch_size)
        return tqdm(starts, desc=desc, disable=not self.show_progress or len(starts) < 4, leave=False)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def verdict_probs(self, sequences: list[list[int]]) -> list[float]:
        """P(" A") / (P(" A") + P(" B")) for the token after each sequence (right-padded batches)."""
        out = [0.0] * len(sequences)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        a, b = self.label_ids
        for start in self._batches(len(order), "genrm verdicts"):
            idx = order[start : start + self.batch_size]
            ids, mask = pad_batch([sequences[i] for i in idx], self.tokenizer.pad_token_id)
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits  # (B, T, V)
            last = logits[torch.arange(len(idx)), mask.sum(1).to(logits.device) - 1]  # (B, V)
            pair = torch.log_softmax(last[:, [a, b]].float(), dim=-1)  # renormalise over the two answers
            for i, p in zip(idx, pair[:, 0].exp().cpu().tolist(), strict=False):
                if p != p:
                    raise RlcwError("genrm returned NaN", where=str(self.rm_dir))
                out[i] = p
        return out

    @torch.no_grad()
    def generate_rationales(self, prompts: list[list[int]]) -> list[str]:
        """Greedy continuations of each prompt (left-padded), stopped at `Preferred:` or the cap."""
        tok = self.tokenizer
        texts: list[str] = []
        for start in self._batches(len(prompts), "genrm rationales"):
            chunk = prompts[start : start + self.batch_size]
            width = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, p in enumerate(chunk):
                ids[i, width - len(p) :] = torch.tensor(p)
                mask[i, width - len(p) :] = 1
            gen = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                do_sample=False,
                max_new_tokens=genrm_max_rationale_tokens(self.spec),
                stopping_criteria=[_StopAtVerdict(tok, width)],
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.convert_tokens_to_ids(tok.eos_token),
            )
            texts += tok.batch_decode(gen[:, width:], skip_special_tokens=True)
        return texts

    def prefer_ordered(self, prompts: list[str], first: list[str], second: list[str]) -> list[float | None]:
        """Probability that the story shown FIRST (as A) is the better one; None when no verdict was reached."""
        if not len(prompts) == len(first) == len(second):
            raise ValueError(f"{len(prompts)} prompts, {len(first)} first and {len(second)} second stories")
        base = [
            encode_genrm_prompt(self.spec, self.tokenizer, p, f, s)
            for p, f, s in zip(prompts, first, second, strict=False)
        ]
        if not genrm_cot(self.spec):
            prefix = self._ids(genrm_response_prefix(self.spec, None))
            return list(self.verdict_probs([b + prefix for b in base]))
        heads = [parse_verdict_prefix(t.strip()) for t in self.generate_rationales(base)]
        ready = [i for i, h in enumerate(heads) if h is not None]
        probs = self.verdict_probs([base[i] + self._ids(heads[i]) for i in ready]) if ready else []
        out: list[float | None] = [None] * len(base)
        for i, p in zip(ready, probs, strict=False):
            out[i] = p
        return out

    def prefer(self, prompts: list[str], a: list[str], b: list[str]) -> list[float | None]:
        """P(a is better than b), averaged over both orders (cancels position bias); None unless both orders
        gave a verdict (the two-order rule, `rlcw.metrics.pairwise.averaged_preference`)."""
        return averaged_preference(self.prefer_ordered(prompts, a, b), self.prefer_ordered(prompts, b, a))


# --- as an RL reward ---

MODES = ("groupmates", "reference", "all_pairs")


def groups_of(prompts: list[str], num_generations: int | None) -> list[range]:
    """Consecutive blocks of completions for one prompt; raises when a group is not whole on this process."""
    n = len(prompts)
    if num_generations is None:  # infer: runs of identical prompts, all the same size
        starts = [i for i in range(n) if i == 0 or prompts[i] != prompts[i - 1]] + [n]
        blocks = [range(s, e) for s, e in zip(starts, starts[1:], strict=False)]
        if len({len(b) for b in blocks}) > 1 or any(len(b) < 2 for b in blocks):
            raise RlcwError(
                f"cannot infer completion groups: run lengths {[len(b) for b in blocks]}",
                hint="pass num_generations to GenRMReward (the trainer's num_generations)",
            )
        return blocks
    if num_generations < 2:
        raise RlcwError(f"num_generations={num_generations}: comparisons within a group need at least 2 completions")
    if n % num_generations:
        raise RlcwError(
            f"this process got {n} completions, not a multiple of num_generations={num_generations}: a group is split "
            "across processes",
            hint="make the per-device batch size (rlcw grpo: train.batch_size) a multiple of "
            "train.num_generations, or use GenRMReward(mode='reference')",
        )
    blocks = [range(s, s + num_generations) for s in range(0, n, num_generations)]
    for block in blocks:
        if any(prompts[i] != prompts[block.start] for i in block):
            raise RlcwError(
                f"completions {block.start}..{block.stop - 1} do not share one prompt: groups are not whole on this process",
                hint="make the per-device batch size (rlcw grpo: train.batch_size) a multiple of train.num_generations "
                "(and keep TRL's grouped sampler), or use GenRMReward(mode='reference')",
            )
    return blocks


def group_comparisons(size: int, mode: str, k: int, rng: random.Random) -> list[tuple[int, int]]:
    """Unordered index pairs (i < j) to compare inside one group of `size` completions."""
    if mode == "all_pairs":
        return [(i, j) for i in range(size) for j in range(i + 1, size)]
    pairs: set[tuple[int, int]] = set()
    for i in range(size):
        mates = rng.sample([j for j in range(size) if j != i], min(k, size - 1))
        pairs.update((min(i, j), max(i, j)) for j in mates)
    return sorted(pairs)


def win_rates(size: int, comparisons: list[tuple[int, int]], probs: list[float | None]) -> list[float | None]:
    """Mean win probability of each member over the comparisons it took part in (None results skipped)."""
    sums, counts = [0.0] * size, [0] * size
    for (i, j), p in zip(comparisons, probs, strict=True):
        if p is None:
            continue
        sums[i], counts[i] = sums[i] + p, counts[i] + 1
        sums[j], counts[j] = sums[j] + 1.0 - p, counts[j] + 1
    return [s / c if c else None for s, c in zip(sums, counts, strict=False)]


class GenRMReward:
    """TRL reward `(prompts, completions, **kwargs) -> list[float]`: mean win probability of each completion.

    mode="reference": against the dataset column `reference` (passed by TRL as a kwarg);
    "groupmates": against k sampled completions of the same group; "all_pairs": against all of them.
    Groups are consecutive blocks of `num_generations` completions with one prompt."""

    def __init__(
        self,
        rm_dir: str | Path,
        mode: str = "groupmates",
        k: int = 2,
        num_generations: int | None = None,
        seed: int = 0,
        batch_size: int = 8,
        scorer: GenRMScorer | None = None,
    ):
        if mode not in MODES:
            raise RlcwError(f"unknown GenRM reward mode '{mode}'", hint=f"use one of {MODES}")
        if k < 1:
            raise RlcwError(f"k={k}: compare each completion with at least one group-mate")
        self.scorer = scorer or GenRMScorer(rm_dir, batch_size=batch_size, show_progress=False)
        self.mode, self.k, self.num_generations = mode, k, num_generations
        self.rng = random.Random(seed)
        self.__name__ = f"genrm_{mode}"

    def state_dict(self) -> dict:
        """The pairing RNG (which group-mates each completion meets), for checkpoints."""
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        texts = [message_text(p) for p in prompts]
        stories = [message_text(c) for c in completions]
        if self.mode == "reference":
            refs = kwargs.get("reference")
            if refs is None or len(refs) != len(stories) or any(not isinstance(r, str) or not r.strip() for r in refs):
                raise RlcwError(
                    "GenRMReward(mode='reference') needs a non-empty 'reference' column in the prompt dataset",
                    hint="add a reference story per prompt, or use mode='groupmates'",
                )
            rewards = self.scorer.prefer(texts, stories, list(refs))
        else:
            rewards = self._group_rewards(texts, stories)
        missing = [i for i, r in enumerate(rewards) if r is None]
        if missing:
            raise RlcwError(
                f"the genrm gave no verdict for completions {missing[:8]}",
                hint="raise the RM's max_rationale_tokens (CoT) or use a GenRM without rationale",
            )
        return [float(r) for r in rewards]

    def _group_rewards(self, texts: list[str], stories: list[str]) -> list[float | None]:
        plan = []  # (group start, i, j) of every comparison this batch needs
        blocks = groups_of(texts, self.num_generations)
        for block in blocks:
            plan += [(block.start, i, j) for i, j in group_comparisons(len(block), self.mode, self.k, self.rng)]
        probs = (
            self.scorer.prefer(
                [texts[s] for s, _, _ in plan],
                [stories[s + i] for s, i, _ in plan],
                [stories[s + j] for s, _, j in plan],
            )
            if plan
            else []
        )
        out: list[float | None] = []
        for block in blocks:
            mine = [(n, (i, j)) for n, (s, i, j) in enumerate(plan) if s == block.start]
            out += win_rates(len(block), [c for _, c in mine], [probs[n] for n, _ in mine])
        return out
