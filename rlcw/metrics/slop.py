"""Slop: the phrases model text over-uses against a human baseline, and a per-story slop score.

    human = count_ngrams(human_stories)                          # the baseline corpus
    model = count_ngrams(policy_stories, groups=prompt_ids)      # document frequency counted per prompt
    top = overrepresented(model, human, top_k=20)                # [Phrase("a testament to", ratio, 9, 0, 4), ...]
    slop_score("It was a testament to ...", {p.text for p in top})   # % of words inside over-used phrases

Phrases are word n-grams (`orders`, default 1-3) over `rlcw.metrics.text.tokens` (lower case,
punctuation dropped). The frequency ratio of an n-gram g of order n is

    ratio(g) = p_model(g) / p_human(g),   p(g) = (c(g) + alpha) / (N_n + alpha * V_n)

with c the count in the corpus, N_n the corpus's number of n-grams of order n, V_n the number of
distinct n-grams of order n in model and human text together, and alpha = 1 (add-one smoothing): a
phrase humans never wrote has a finite ratio that grows with how often the model writes it. Only
phrases the model wrote at least `min_count` times in at least `min_docs` different groups (prompts)
are candidates, so a story's own names and topic words do not count as slop.

The slop score of a story is the percentage of its words that lie inside an occurrence of a
fingerprint phrase (0-100; EQ-Bench's creative-writing board reports a slop score of the same kind,
a rate of listed phrases). Higher is sloppier: as a reward term it carries a negative weight (`type: slop`, rlcw.rewards.slop).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from rlcw.metrics.text import ngrams, tokens

ORDERS = (1, 2, 3)


@dataclass
class NgramCounts:
    """Per order: n-gram counts, total n-grams, and in how many groups each n-gram occurs."""

    counts: dict[int, Counter] = field(default_factory=dict)
    totals: dict[int, int] = field(default_factory=dict)
    docs: dict[int, Counter] = field(default_factory=dict)


@dataclass(frozen=True)
class Phrase:
    text: str
    ratio: float  # smoothed model/human frequency ratio
    model_count: int
    human_count: int
    docs: int  # groups (prompts) of model text that use it


def count_ngrams(
    texts: Iterable[str], orders: Sequence[int] = ORDERS, groups: Sequence[Hashable] | None = None
) -> NgramCounts:
    """N-gram statistics of a corpus; `groups` (one label per text, e.g. the prompt id) decides what one
    "document" is for the document frequency (default: each text)."""
    texts = list(texts)
    labels = list(groups) if groups is not None else list(range(len(texts)))
    if len(labels) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(labels)} group labels")
    out = NgramCounts({n: Counter() for n in orders}, {n: 0 for n in orders}, {n: Counter() for n in orders})
    seen: dict[int, dict[Hashable, set]] = {n: {} for n in orders}
    for text, label in zip(texts, labels, strict=True):
        toks = tokens(text)
        for n in orders:
            grams = [" ".join(g) for g in ngrams(toks, n)]
            out.counts[n].update(grams)
            out.totals[n] += len(grams)
            seen[n].setdefault(label, set()).update(grams)
    for n in orders:
        for grams in seen[n].values():
            out.docs[n].update(grams)
    return out


def smoothed_ratio(c_model: int, n_model: int, c_human: int, n_human: int, vocab: int, alpha: float = 1.0) -> float:
    """p_model / p_human with p = (c + alpha) / (N + alpha * V) (see the module docstring)."""
    return ((c_model + alpha) / (n_model + alpha * vocab)) / ((c_human + alpha) / (n_human + alpha * vocab))


def overrepresented(
    model: NgramCounts,
    human: NgramCounts,
    *,
    top_k: int = 20,
    min_count: int = 3,
    min_docs: int = 2,
    min_ratio: float = 1.0,
    alpha: float = 1.0,
) -> list[Phrase]:
    """The `top_k` phrases with the highest smoothed ratio above `min_ratio` (ties: more model uses first)."""
    found = []
    for n, counts in model.counts.items():
        h_counts = human.counts.get(n, Counter())
        vocab = len(set(counts) | set(h_counts))
        for g, c in counts.items():
            if c < min_count or model.docs[n][g] < min_docs:
                continue
            r = smoothed_ratio(c, model.totals[n], h_counts.get(g, 0), human.totals.get(n, 0), vocab, alpha)
            if r > min_ratio:
                found.append(Phrase(g, r, c, h_counts.get(g, 0), model.docs[n][g]))
    found.sort(key=lambda p: (-p.ratio, -p.model_count, p.text))
    return found[:top_k]


def slop_score(text: str, phrases: Iterable[str]) -> float:
    """100 x the share of `text`'s words inside an occurrence of a fingerprint phrase (0 without words)."""
    toks = tokens(text)
    if not toks:
        return 0.0
    by_order: dict[int, set[str]] = {}
    for p in phrases:
        by_order.setdefault(len(p.split()), set()).add(p)
    covered: set[int] = set()
    for n, ps in by_order.items():
        for i, g in enumerate(ngrams(toks, n)):
            if " ".join(g) in ps:
                covered.update(range(i, i + n))
    return 100.0 * len(covered) / len(toks)


class SlopBaseline:
    """A human corpus's n-gram counts, and the fingerprint and scores of model text against it."""

    def __init__(
        self,
        human_texts: Iterable[str],
        *,
        orders: Sequence[int] = ORDERS,
        top_k: int = 20,
        min_count: int = 3,
        min_docs: int = 2,
        alpha: float = 1.0,
    ):
        self.orders = tuple(orders)
        self.human = count_ngrams(human_texts, self.orders)
        if not any(self.human.totals.values()):
            raise ValueError("the human baseline has no words")
        self.options = {"top_k": top_k, "min_count": min_count, "min_docs": min_docs, "alpha": alpha}

    def fingerprint(self, texts: Sequence[str], groups: Sequence[Hashable] | None = None) -> list[Phrase]:
        """The phrases `texts` over-use against the human baseline, most over-represented first."""
        return overrepresented(count_ngrams(texts, self.orders, groups), self.human, **self.options)

    def scores(
        self, texts: Sequence[str], groups: Sequence[Hashable] | None = None, phrases: Iterable[str] | None = None
    ) -> list[float]:
        """Per-text slop scores against `phrases`, or against the fingerprint of `texts` themselves."""
        if phrases is None:
            phrases = [p.text for p in self.fingerprint(texts, groups)]
        phrases = list(phrases)
        return [slop_score(t, phrases) for t in texts]


def slop_change(
    baseline: SlopBaseline,
    start: Sequence[str],
    tuned: Sequence[str],
    prompt_ids: Sequence[Hashable],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict:
    """Slop of paired start/tuned samples (same prompts, same order): both scored against ONE fingerprint,
    that of start and tuned text pooled (so a phrase either over-uses counts for both); the change is
    the mean over prompts of (tuned - start) per-prompt means, with a 95% percentile bootstrap over
    prompts. Also each model's own top phrases (`top_start`, `top_tuned`)."""
    import numpy as np

    from rlcw.metrics.bootstrap import bootstrap_ci

    if not (len(start) == len(tuned) == len(prompt_ids)) or not start:
        raise ValueError("start, tuned and prompt_ids must be non-empty and of one length")
    pooled = baseline.fingerprint([*start, *tuned], [*prompt_ids, *prompt_ids])
    phrases = [p.text for p in pooled]
    s, t = baseline.scores(start, phrases=phrases), baseline.scores(tuned, phrases=phrases)
    by_prompt: dict[Hashable, list[float]] = {}
    for pid, a, b in zip(prompt_ids, s, t, strict=True):
        by_prompt.setdefault(pid, []).append(b - a)
    deltas = np.array([np.mean(v) for v in by_prompt.values()])
    lo, hi = bootstrap_ci(deltas, n_resamples=n_resamples, seed=seed) if len(deltas) > 1 else (math.nan, math.nan)
    return {
        "slop_start": float(np.mean(s)),
        "slop_final": float(np.mean(t)),
        "slop_delta": float(deltas.mean()),
        "slop_delta_lo": lo,
        "slop_delta_hi": hi,
        "n_prompts": len(deltas),
        "phrases": phrases,
        "top_start": baseline.fingerprint(start, prompt_ids),
        "top_tuned": baseline.fingerprint(tuned, prompt_ids),
    }
