"""LitBench curation rules (paper section 3.2) as pure functions over posts of upvoted stories.

Per split, in this order (each step's count is reported):
1. date window: keep stories posted in [start, end) (the train/test cut-offs);
2. story filters: upvotes >= min_upvotes (10), words >= min_words (50), tokens <= max_tokens
   (2048, the target RM's tokenizer; the costly count runs last, the kept set does not depend on order);
3. duplicates: a story whose content hash was already seen in the split under another prompt or with
   other upvotes/time is dropped (the same story listed twice for one post counts once);
4. overlap: train stories whose hash, or whose post's prompt hash, occurs in the test pairs are dropped;
5. pairs: within a post, every pair with (hi - lo) / hi >= min_gap (0.25) and the higher-voted story
   posted strictly later; optionally at most `max_pairs_per_post`, chosen at random under the seed;
6. length balancing: word differences d = chosen - rejected are binned by |d| into `bins / 2` equal
   bins on each side of zero (100 bins symmetric about zero, width max|d| / 50); in every mirrored
   bin pair the larger side loses random pairs (seeded) until both sides are equal. Pairs with
   d = 0 are kept. Afterwards chosen is longer in exactly half of the unequal-length pairs.

    result = curate_split(posts, Rules(), count_tokens=lambda texts: [...], seed=0)
    result.pairs, result.counts, result.drops
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import combinations

from rlcw.data.litbench import Post, Story
from rlcw.metrics.text import count_words

TokenCounter = Callable[[list[str]], list[int]]


@dataclass
class Rules:
    min_upvotes: int = 10
    min_words: int = 50
    max_tokens: int | None = 2048  # None = no token filter
    min_gap: float = 0.25  # (hi - lo) / hi
    max_pairs_per_post: int | None = None
    bins: int = 100  # histogram bins over [-max|d|, max|d|]; must be even
    balance: bool = True


@dataclass
class SplitResult:
    pairs: list[dict]
    counts: dict[str, int]  # step name -> stories or pairs left after it, in order
    drops: Counter = field(default_factory=Counter)  # reason -> count
    diffs_before: list[int] = field(default_factory=list)  # chosen - rejected words, before balancing
    diffs_after: list[int] = field(default_factory=list)


def n_stories(posts: list[Post]) -> int:
    return sum(len(p.stories) for p in posts)


def _keep(posts: list[Post], pred: Callable[[Post, Story], bool]) -> list[Post]:
    out = [Post(p.post_id, p.prompt, [s for s in p.stories if pred(p, s)]) for p in posts]
    return [p for p in out if p.stories]


def in_window(posts: list[Post], start: float | None, end: float | None) -> list[Post]:
    """Stories posted in [start, end) (None = open)."""
    return _keep(posts, lambda p, s: (start is None or s.time >= start) and (end is None or s.time < end))


def filter_stories(posts: list[Post], rules: Rules, count_tokens: TokenCounter | None, counts: dict) -> list[Post]:
    """Upvote, word and token filters; records the story count after each in `counts`."""
    posts = _keep(posts, lambda p, s: s.upvotes >= rules.min_upvotes)
    counts["min_upvotes"] = n_stories(posts)
    posts = _keep(posts, lambda p, s: count_words(s.text) >= rules.min_words)
    counts["min_words"] = n_stories(posts)
    if rules.max_tokens is not None and count_tokens is not None:
        stories = [s for p in posts for s in p.stories]
        too_long = {
            id(s)
            for s, n in zip(stories, count_tokens([s.text for s in stories]), strict=False)
            if n > rules.max_tokens
        }
        posts = _keep(posts, lambda p, s: id(s) not in too_long)
    counts["max_tokens"] = n_stories(posts)
    return posts


def dedupe_stories(posts: list[Post]) -> tuple[list[Post], int]:
    """Drop later copies of a story (same content hash) under another prompt or with other votes/time."""
    first: dict[str, tuple[str, int, float]] = {}
    dropped = 0
    out = []
    for post in posts:
        kept, seen_here = [], set()
        for s in post.stories:
            key = (post.prompt_hash, s.upvotes, s.time)
            if s.hash in seen_here or first.setdefault(s.hash, key) != key:
                dropped += 1
                continue
            seen_here.add(s.hash)
            kept.append(s)
        if kept:
            out.append(Post(post.post_id, post.prompt, kept))
    return out, dropped


def post_pairs(post: Post, min_gap: float) -> tuple[list[tuple[Story, Story]], int, int]:
    """(chosen, rejected) pairs of one post, and how many candidates failed the gap / the time rule."""
    pairs, gap_fail, time_fail = [], 0, 0
    for a, b in combinations(post.stories, 2):
        hi, lo = (a, b) if a.upvotes >= b.upvotes else (b, a)
        if hi.upvotes <= 0 or (hi.upvotes - lo.upvotes) / hi.upvotes < min_gap:
            gap_fail += 1
        elif not hi.time > lo.time:
            time_fail += 1
        else:
            pairs.append((hi, lo))
    return pairs, gap_fail, time_fail


def length_bins(diffs: list[int], bins: int = 100) -> list[int | None]:
    """Magnitude bin (0 .. bins/2 - 1) of each |d| on a grid of width max|d| / (bins/2); None for d = 0."""
    if bins < 2 or bins % 2:
        raise ValueError(f"bins must be even and >= 2, got {bins}")
    half = bins // 2
    top = max((abs(d) for d in diffs), default=0)
    width = top / half if top else 1.0
    return [None if d == 0 else min(int(abs(d) / width), half - 1) for d in diffs]


def balance_by_length(diffs: list[int], bins: int = 100, seed: int = 0) -> list[int]:
    """Indices kept after pruning each mirrored bin pair to equal counts (random, seeded); order kept."""
    rng = random.Random(seed)
    sides: dict[tuple[int, bool], list[int]] = {}
    for i, (d, b) in enumerate(zip(diffs, length_bins(diffs, bins), strict=False)):
        if b is not None:
            sides.setdefault((b, d > 0), []).append(i)
    drop: set[int] = set()
    for b in sorted({b for b, _ in sides}):
        longer, shorter = sides.get((b, True), []), sides.get((b, False), [])
        big, small = (longer, shorter) if len(longer) > len(shorter) else (shorter, longer)
        drop.update(rng.sample(big, len(big) - len(small)))
    return [i for i in range(len(diffs)) if i not in drop]


def chosen_longer_share(diffs: list[int]) -> float | None:
    """Share of pairs with unequal lengths where chosen is the longer one (None when there are none)."""
    unequal = [d for d in diffs if d != 0]
    return sum(d > 0 for d in unequal) / len(unequal) if unequal else None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat()


def pair_record(post: Post, hi: Story, lo: Story, source: str) -> dict:
    meta = {
        "post_id": post.post_id,
        "prompt_hash": post.prompt_hash,
        "chosen_upvotes": hi.upvotes,
        "rejected_upvotes": lo.upvotes,
        "chosen_timestamp": _iso(hi.time),
        "rejected_timestamp": _iso(lo.time),
        "chosen_words": count_words(hi.text),
        "rejected_words": count_words(lo.text),
        "chosen_hash": hi.hash,
        "rejected_hash": lo.hash,
    }
    return {"prompt": post.prompt, "chosen": hi.text, "rejected": lo.text, "source": source, "meta": meta}


def form_pairs(posts: list[Post], rules: Rules, rng: random.Random, source: str, counts: dict) -> list[dict]:
    """All rule-passing pairs of every post (capped per post if asked), as preference records."""
    records, candidates, gap_fail, time_fail, capped = [], 0, 0, 0, 0
    for post in posts:
        n = len(post.stories)
        candidates += n * (n - 1) // 2
        pairs, g, t = post_pairs(post, rules.min_gap)
        gap_fail, time_fail = gap_fail + g, time_fail + t
        if rules.max_pairs_per_post is not None and len(pairs) > rules.max_pairs_per_post:
            keep = sorted(rng.sample(range(len(pairs)), rules.max_pairs_per_post))
            capped += len(pairs) - len(keep)
            pairs = [pairs[i] for i in keep]
        records += [pair_record(post, hi, lo, source) for hi, lo in pairs]
    counts["candidate_pairs"] = candidates
    counts["upvote_gap"] = candidates - gap_fail
    counts["later_is_better"] = candidates - gap_fail - time_fail
    counts["per_post_cap"] = counts["later_is_better"] - capped
    return records


def curate_split(
    posts: list[Post],
    rules: Rules,
    count_tokens: TokenCounter | None,
    seed: int = 0,
    source: str = "curate",
    start: float | None = None,
    end: float | None = None,
    exclude_stories: set[str] | frozenset = frozenset(),
    exclude_prompts: set[str] | frozenset = frozenset(),
) -> SplitResult:
    """Every rule above on one split's posts; `exclude_*` are the other split's story/prompt hashes."""
    counts: dict[str, int] = {"stories": n_stories(posts)}
    posts = in_window(posts, start, end)
    counts["date_window"] = n_stories(posts)
    posts = filter_stories(posts, rules, count_tokens, counts)
    posts, dup = dedupe_stories(posts)
    counts["duplicates"] = n_stories(posts)
    drops = Counter({"duplicate_story": dup})
    if exclude_prompts or exclude_stories:
        before = n_stories(posts)
        posts = [p for p in posts if p.prompt_hash not in exclude_prompts]
        drops["prompt_in_other_split"] = before - n_stories(posts)
        before = n_stories(posts)
        posts = _keep(posts, lambda p, s: s.hash not in exclude_stories)
        drops["story_in_other_split"] = before - n_stories(posts)
    counts["split_overlap"] = n_stories(posts)
    rng = random.Random(seed)
    pairs = form_pairs(posts, rules, rng, source, counts)
    diffs = [p["meta"]["chosen_words"] - p["meta"]["rejected_words"] for p in pairs]
    keep = balance_by_length(diffs, rules.bins, seed) if rules.balance else list(range(len(pairs)))
    pairs = [pairs[i] for i in keep]
    counts["length_balance"] = len(pairs)
    return SplitResult(pairs, counts, drops, diffs, [diffs[i] for i in keep])


def split_hashes(pairs: list[dict]) -> tuple[set[str], set[str]]:
    """(story hashes, prompt hashes) used by curated pairs: what the other split must not contain."""
    stories = {p["meta"][k] for p in pairs for k in ("chosen_hash", "rejected_hash")}
    return stories, {p["meta"]["prompt_hash"] for p in pairs}
