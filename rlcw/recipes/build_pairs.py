"""Build preference pairs by controlled corruption of stories (chosen = original).

Kinds: shuffle, splice, substitute, repeat, truncate (UNION-style), stop_early; `match_length=true`
(default) keeps each pair's word counts within `tolerance`, so an RM cannot win by length (`stop_early`, the whole
chunk against its first sentences, is unmatched by design and training-only).
Writes `<run>/pairs/train.jsonl` and `<run>/pairs/eval.jsonl` (preference records; the split
is by story).

`data.kind=human_vs_model` instead pairs a human story (chosen) with the model's story for the same
prompt (rejected), both cut to one word budget (`rlcw.data.human_pairs`): the gold-RM data of the
outcome study. `data.stories` is then the stories.jsonl of `rlcw generate data.format=tmas`, whose
records keep the human story as `reference`; `data.min_words`, `data.max_words` and
`data.tolerance` set the budget and the length match; the split is by prompt.

    rlcw build-pairs                                   # the bundled stories
    rlcw build-pairs data.stories=my_stories.jsonl data.kinds=[shuffle,splice]
    rlcw generate data.format=tmas data.source=../shared/data/tell-me-a-story data.split=train run_name=gen_tmas
    rlcw build-pairs data.kind=human_vs_model data.stories=runs/gen_tmas/samples/stories.jsonl run_name=gold_pairs
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcw.config import check_at_least, check_choice
from rlcw.data.bundled import resolve_data_path
from rlcw.data.human_pairs import build_human_pairs, read_model_stories
from rlcw.data.pairs import build_corruption_pairs
from rlcw.data.records import read_stories, write_preferences
from rlcw.errors import RlcwError
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys


@dataclass
class PairsDataConfig:
    kind: str = "corruption"  # corruption | human_vs_model
    stories: str = "bundled"  # "bundled" or a story-record jsonl (human_vs_model: records with `reference`)
    # corruptions used: shuffle | splice | substitute | repeat | truncate | stop_early
    kinds: list[str] = field(default_factory=lambda: ["shuffle", "splice", "substitute", "repeat", "truncate"])
    chunk_sentences: int = 4  # sentences per story chunk (each chunk is one chosen text)
    max_chunks_per_story: int | None = None  # at most N chunks per story (None = all)
    match_length: bool = True  # drop pairs whose word counts differ by more than tolerance
    tolerance: float = 0.05  # allowed word-count gap as a share of the chosen length (at least one word)
    eval_fraction: float = 0.3  # share held out as the eval split (by story; human_vs_model: by prompt)
    min_words: int = 20  # human_vs_model: drop pairs whose common word budget is smaller
    max_words: int | None = None  # human_vs_model: cap of the common word budget


@dataclass
class BuildPairsConfig(RunKeys):
    data: PairsDataConfig = field(default_factory=PairsDataConfig)
    run_name: str = "build_pairs"  # name of the run folder under output_dir


def corruption(cfg: BuildPairsConfig, run) -> dict:
    """Chunks of each story against their corrupted copies (`rlcw.data.pairs`), split by story."""
    d = cfg.data
    stories = read_stories(resolve_data_path(d.stories, "stories.jsonl"))
    train, held, stats = build_corruption_pairs(
        stories,
        list(d.kinds),
        chunk_sentences=d.chunk_sentences,
        max_chunks_per_story=d.max_chunks_per_story,
        match_length=d.match_length,
        tolerance=d.tolerance,
        eval_fraction=d.eval_fraction,
        seed=cfg.seed,
    )
    require_pairs(train, d.stories, "use longer stories or a smaller data.chunk_sentences")
    metrics = {"stories": stats.stories, "chunks": stats.chunks}
    metrics.update({f"pairs/{k}": v for k, v in stats.per_kind.items()})
    metrics.update({f"dropped/{k}": v for k, v in stats.dropped.items()})
    return write_pairs(run, train, held, metrics, "Corruption pairs")


def human_vs_model(cfg: BuildPairsConfig, run) -> dict:
    """The human story of a prompt against the model's, cut to one word budget (`rlcw.data.human_pairs`)."""
    d = cfg.data
    stories = read_model_stories(resolve_data_path(d.stories, "stories.jsonl"))
    train, held, stats = build_human_pairs(
        stories,
        tolerance=d.tolerance,
        min_words=d.min_words,
        max_words=d.max_words,
        eval_fraction=d.eval_fraction,
        seed=cfg.seed,
    )
    require_pairs(train, d.stories, f"dropped: {dict(stats.dropped)}; lower data.min_words or generate longer stories")
    metrics = {
        "stories": stats.stories,
        "pairs": stats.pairs,
        "mean_words/chosen": sum(stats.chosen_words) / stats.pairs,
        "mean_words/rejected": sum(stats.rejected_words) / stats.pairs,
    }
    metrics.update({f"dropped/{k}": stats.dropped.get(k, 0) for k in ("too_short", "length_mismatch", "identical")})
    return write_pairs(run, train, held, metrics, "Human-vs-model pairs (chosen = human)")


def require_pairs(train: list, stories: str, hint: str) -> None:
    """An error naming the story file when it gave no training pair (`hint`: what to change)."""
    if not train:
        raise RlcwError("no training pairs were produced", where=stories, hint=hint)


def write_pairs(run, train: list, held: list, metrics: dict, title: str) -> dict:
    """pairs/train.jsonl (and pairs/eval.jsonl when there are held-out pairs), `metrics` with the two splits' sizes
    logged and listed in the report under `title`; the summary."""
    metrics = {**metrics, "train_pairs": len(train), "eval_pairs": len(held)}
    paths = {"train": write_preferences(run.path / "pairs" / "train.jsonl", train)}
    if held:
        paths["eval"] = write_preferences(run.path / "pairs" / "eval.jsonl", held)
    run.log(0, metrics)
    run.write_report(f"# {title}\n\n" + "\n".join(f"- {k}: {v}" for k, v in metrics.items()) + "\n")
    return run.write_summary("completed", metrics, paths)


BUILDERS = {"corruption": corruption, "human_vs_model": human_vs_model}  # data.kind -> how its pairs are built


def validate(cfg: BuildPairsConfig) -> None:
    """Every config check, before the run folder is written and before any file is read."""
    from rlcw.data.corrupt import CORRUPTIONS

    d = cfg.data
    check_choice("data.kind", d.kind, tuple(BUILDERS))
    if d.kind == "corruption":
        if not d.kinds:
            raise RlcwError("data.kinds is empty", where="data.kinds", hint=f"use some of {', '.join(CORRUPTIONS)}")
        for kind in d.kinds:
            check_choice("data.kinds", kind, CORRUPTIONS)
        check_at_least("data.chunk_sentences", d.chunk_sentences, 1)
        check_at_least("data.max_chunks_per_story", d.max_chunks_per_story, 1)
    if not 0.0 <= d.eval_fraction < 1.0:
        raise RlcwError(
            f"data.eval_fraction must be in [0, 1), got {d.eval_fraction}",
            where="data.eval_fraction",
            hint="e.g. data.eval_fraction=0.3",
        )
    if not 0.0 <= d.tolerance < 1.0:
        raise RlcwError(
            f"data.tolerance must be in [0, 1), got {d.tolerance}",
            where="data.tolerance",
            hint="e.g. data.tolerance=0.05",
        )
    check_at_least("data.min_words", d.min_words, 1)
    check_at_least("data.max_words", d.max_words, d.min_words)


def main(cfg: BuildPairsConfig) -> dict:
    validate(cfg)
    with stage_run(cfg, "build-pairs") as run:
        return BUILDERS[cfg.data.kind](cfg, run)
