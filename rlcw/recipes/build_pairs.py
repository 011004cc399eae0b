"""Build preference pairs by controlled corruption of stories (chosen = original).

Kinds: shuffle, splice, substitute, repeat, truncate (UNION-style); `match_length=true`
(default) keeps each pair's word counts within `tolerance`, so an RM cannot win by length.
Writes `<run>/pairs/train.jsonl` and `<run>/pairs/eval.jsonl` (preference records; the split
is by story).

    rlcw build-pairs                                   # the bundled stories
    rlcw build-pairs data.stories=my_stories.jsonl data.kinds=[shuffle,splice]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcw.data.bundled import resolve_data_path
from rlcw.data.pairs import build_corruption_pairs
from rlcw.data.records import read_stories, write_preferences
from rlcw.errors import RlcwError
from rlcw.recipes.common import stage_run


@dataclass
class PairsDataConfig:
    stories: str = "bundled"  # "bundled" or a story-record jsonl
    kinds: list[str] = field(default_factory=lambda: ["shuffle", "splice", "substitute", "repeat", "truncate"])
    chunk_sentences: int = 4
    max_chunks_per_story: int | None = None
    match_length: bool = True
    tolerance: float = 0.05
    eval_fraction: float = 0.3


@dataclass
class BuildPairsConfig:
    data: PairsDataConfig = field(default_factory=PairsDataConfig)
    output_dir: str = "runs"
    run_name: str = "build_pairs"
    seed: int = 0


def main(cfg: BuildPairsConfig) -> dict:
    d = cfg.data
    with stage_run(cfg, "build-pairs") as run:
        stories = read_stories(resolve_data_path(d.stories, "stories.jsonl"))
        train, held, stats = build_corruption_pairs(
            stories, list(d.kinds), chunk_sentences=d.chunk_sentences, max_chunks_per_story=d.max_chunks_per_story,
            match_length=d.match_length, tolerance=d.tolerance, eval_fraction=d.eval_fraction, seed=cfg.seed,
        )
        if not train:
            raise RlcwError("no training pairs were produced", hint="use longer stories or a smaller data.chunk_sentences")
        paths = {"train": write_preferences(run.path / "pairs" / "train.jsonl", train)}
        if held:
            paths["eval"] = write_preferences(run.path / "pairs" / "eval.jsonl", held)
        metrics = {"stories": stats.stories, "chunks": stats.chunks, "train_pairs": len(train), "eval_pairs": len(held)}
        metrics.update({f"pairs/{k}": v for k, v in stats.per_kind.items()})
        metrics.update({f"dropped/{k}": v for k, v in stats.dropped.items()})
        run.log(0, metrics)
        run.write_report("# Corruption pairs\n\n" + "\n".join(f"- {k}: {v}" for k, v in metrics.items()) + "\n")
        return run.write_summary("completed", metrics, paths)
