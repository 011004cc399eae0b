"""Read raw upvoted-story data into posts of stories, dropping malformed entries by named reason.

Two layouts (columns found in the first row, or set with `layout=`):

- `posts`: euclaise/WritingPrompts_preferences, one row per prompt post: `post_title`, `post_text`,
  `comment_texts`, `comment_scores`, `comment_times` (parallel lists; in CSV a list may be a JSON
  string). Optional `post_id`.
- `pairs`: the LitBench pair layout: `prompt`, `chosen_story`, `rejected_story`, `chosen_timestamp`,
  `rejected_timestamp`, `chosen_upvotes`, `rejected_upvotes`. Each row is read as a post of its
  two stories (`regroup_pairs=False`), or all rows with the same prompt form one post whose stories
  are re-paired (`regroup_pairs=True`; a story listed in several rows counts once).

Timestamps: unix seconds (milliseconds when > 1e11), numeric strings, ISO 8601 strings, or
datetime values; naive times are UTC. Drop reasons (counts in `drops`): row-level
`ragged_comment_lists`, `malformed_comment_lists`, `missing_field`, `empty_prompt`; story-level
`missing_upvotes`, `non_numeric_upvotes`, `missing_timestamp`, `bad_timestamp`, `empty_story`,
`deleted_story`.

    posts = read_posts(rows, where="raw.jsonl", layout="auto", drops=Counter())
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from rlcw.errors import RlcwError, location

POST_COLUMNS = ("post_title", "comment_texts", "comment_scores", "comment_times")
PAIR_COLUMNS = (
    "prompt",
    "chosen_story",
    "rejected_story",
    "chosen_timestamp",
    "rejected_timestamp",
    "chosen_upvotes",
    "rejected_upvotes",
)
LAYOUTS = ("auto", "posts", "pairs")
DELETED = ("[deleted]", "[removed]")


@dataclass
class Story:
    text: str
    upvotes: int
    time: float  # unix seconds, UTC
    where: str  # file:row (+ comment index) for messages

    @property
    def hash(self) -> str:
        return content_hash(self.text)


@dataclass
class Post:
    post_id: str
    prompt: str
    stories: list[Story] = field(default_factory=list)

    @property
    def prompt_hash(self) -> str:
        return content_hash(self.prompt)


def content_hash(text: str) -> str:
    """Hash of text with case and whitespace normalised (duplicate and overlap checks)."""
    return hashlib.sha1(" ".join(text.lower().split()).encode("utf-8")).hexdigest()[:16]


def parse_upvotes(value) -> int | str:
    """An integer upvote count, or the drop reason."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "missing_upvotes"
    if isinstance(value, bool):
        return "non_numeric_upvotes"
    if isinstance(value, float) and math.isnan(value):
        return "missing_upvotes"
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return "non_numeric_upvotes"
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return "non_numeric_upvotes"


def parse_time(value) -> float | str:
    """Unix seconds (UTC), or the drop reason."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "missing_timestamp"
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp()
    if isinstance(value, bool):
        return "bad_timestamp"
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text)
        except ValueError:
            try:
                return parse_time(datetime.fromisoformat(text))
            except ValueError:
                return "bad_timestamp"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value / 1000.0 if value > 1e11 else float(value)
    return "bad_timestamp"


def parse_date(value: str, where: str) -> float:
    """A config date/time (ISO 8601) as unix seconds; an error names the key."""
    t = parse_time(value)
    if isinstance(t, str):
        raise RlcwError(
            f"cannot read '{value}' as a date",
            where=where,
            hint="use ISO 8601, e.g. 2023-01-01 or 2023-01-02T00:00:00",
        )
    return t


def _as_list(value):
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist"):  # numpy arrays from parquet / datasets
        return list(value.tolist())
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                out = parse(value)
            except (ValueError, SyntaxError):
                continue
            if isinstance(out, (list, tuple)):
                return list(out)
    return None


def _story(text, votes, when, where: str, drops: Counter) -> Story | None:
    if not isinstance(text, str) or not text.strip():
        drops["empty_story"] += 1
        return None
    if text.strip() in DELETED:
        drops["deleted_story"] += 1
        return None
    up = parse_upvotes(votes)
    if isinstance(up, str):
        drops[up] += 1
        return None
    t = parse_time(when)
    if isinstance(t, str):
        drops[t] += 1
        return None
    return Story(text=text.strip(), upvotes=up, time=t, where=where)


def detect_layout(row: dict, where: str, layout: str = "auto") -> str:
    """'posts' or 'pairs' from the first row's columns; an error names the file and the missing keys."""
    if layout not in LAYOUTS:
        raise RlcwError(f"unknown layout '{layout}'", hint=f"use one of {LAYOUTS}")
    for name, cols in (("posts", POST_COLUMNS), ("pairs", PAIR_COLUMNS)):
        if layout in ("auto", name) and all(c in row for c in cols):
            return name
    want = POST_COLUMNS if layout == "posts" else PAIR_COLUMNS if layout == "pairs" else POST_COLUMNS + PAIR_COLUMNS
    missing = [c for c in want if c not in row]
    raise RlcwError(
        f"row does not match the {'posts or pairs' if layout == 'auto' else layout} layout: missing key '{missing[0]}' "
        f"(columns present: {', '.join(map(str, row))})",
        where=location(where, 1, missing[0]),
        hint="posts layout: post_title, comment_texts, comment_scores, comment_times; pairs layout: "
        + ", ".join(PAIR_COLUMNS),
    )


def _post_row(row: dict, where: str, line: int, drops: Counter) -> Post | None:
    if any(c not in row for c in POST_COLUMNS):
        drops["missing_field"] += 1
        return None
    title = str(row.get("post_title") or "").strip()
    body = str(row.get("post_text") or "").strip()
    prompt = title + ("\n\n" + body if body else "")
    if not prompt:
        drops["empty_prompt"] += 1
        return None
    lists = [_as_list(row[c]) for c in ("comment_texts", "comment_scores", "comment_times")]
    if any(v is None for v in lists):
        drops["malformed_comment_lists"] += 1
        return None
    texts, scores, times = lists
    if not len(texts) == len(scores) == len(times):
        drops["ragged_comment_lists"] += 1
        return None
    post = Post(str(row.get("post_id") or f"{where}:{line}"), prompt)
    for i, (text, votes, when) in enumerate(zip(texts, scores, times, strict=False)):
        story = _story(text, votes, when, f"{location(where, line)} comment {i}", drops)
        if story is not None:
            post.stories.append(story)
    return post


def _pair_row(row: dict, where: str, line: int, drops: Counter) -> Post | None:
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        drops["empty_prompt"] += 1
        return None
    post = Post(str(row.get("post_id") or f"{where}:{line}"), prompt.strip())
    for side in ("chosen", "rejected"):
        story = _story(
            row.get(f"{side}_story"),
            row.get(f"{side}_upvotes"),
            row.get(f"{side}_timestamp"),
            f"{location(where, line)} {side}",
            drops,
        )
        if story is not None:
            post.stories.append(story)
    return post


def _regroup(posts: list[Post]) -> list[Post]:
    """Merge pair-rows with the same prompt into one post; a story listed in several rows counts once."""
    merged: dict[str, Post] = {}
    for post in posts:
        into = merged.setdefault(post.prompt_hash, Post(post.post_id, post.prompt))
        seen = {s.hash for s in into.stories}
        into.stories += [s for s in post.stories if s.hash not in seen]
    return list(merged.values())


EXAMPLES = 3  # rows named per drop reason


def read_posts(
    rows: Iterable[tuple[int, dict]],
    where: str,
    layout: str = "auto",
    drops: Counter | None = None,
    regroup_pairs: bool = False,
    examples: dict[str, list[str]] | None = None,
) -> tuple[list[Post], str]:
    """Posts of parseable stories from raw rows, and the layout used; drops are counted in `drops`, and the
    first `EXAMPLES` rows of each reason are named in `examples` (reason -> ["file:line", ...])."""
    drops = drops if drops is not None else Counter()
    examples = examples if examples is not None else {}
    rows = list(rows)
    if not rows:
        raise RlcwError("no rows", where=where)
    found = detect_layout(rows[0][1], where, layout)
    read = _post_row if found == "posts" else _pair_row
    posts = []
    for line, row in rows:
        before = Counter(drops)
        post = read(row, where, line, drops)
        for reason in drops - before:
            named = examples.setdefault(reason, [])
            if len(named) < EXAMPLES:
                named.append(f"{where}:{line}")
        if post is not None:
            posts.append(post)
    if found == "pairs" and regroup_pairs:
        posts = _regroup(posts)
    return posts, found
