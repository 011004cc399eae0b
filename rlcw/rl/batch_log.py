"""What rlcw logs of each generated GRPO or RLOO training batch: one callback, called once per batch by the trainer.

    log = BatchLog(run, monitor_ngram=3, samples_every=1, samples_k=2)
    metrics = log(step, rows, num_generations, is_main_process=True)   # rows: one per completion, all ranks

Returns the batch's metrics (the reward-hacking statistics `monitor/*`, rlcw.measure.monitors, with
`monitor/slop` when a slop baseline is given, and
reward, words and tokens per prompt source `source/<name>/*`); on the main process it appends the
sampled prompt order to `samples/data_order.jsonl` and writes the top and bottom scored stories to
`samples/train_step_XXXXXX.jsonl`. A row holds `text`, `tokens`, `truncated`, `reward` (weighted
total), `rewards` (per function), `prompt`, `prompt_id`, `source`, `min_words`, `max_words`, for
Agents' Room `agents_room`, and `reference` for a reference story injected into the group (GRPO's
`rollout.references`: its sample record's `system` is "reference"; the monitors count it as a completion).
"""

from __future__ import annotations

from rlcw.data.records import write_stories
from rlcw.io import append_jsonl
from rlcw.measure.monitors import PREFIX, step_stats
from rlcw.runs import RunDir


class BatchLog:
    """`monitor_ngram`: n of the monitors' n-gram statistics (None = none); `samples_every`: top/bottom
    `samples_k` stories every N steps (0 = never); `slop`: a rlcw.metrics.slop.SlopBaseline for `monitor/slop`
    (None = off)."""

    def __init__(
        self, run: RunDir, monitor_ngram: int | None = 3, samples_every: int = 1, samples_k: int = 2, slop=None
    ):
        self.run, self.monitor_ngram = run, monitor_ngram
        self.samples_every, self.samples_k, self.slop = samples_every, samples_k, slop

    def __call__(self, step: int, rows: list[dict], num_generations: int, *, is_main_process: bool) -> dict:
        metrics: dict[str, float] = {}
        if self.monitor_ngram:
            texts, tokens, cut, total = ([r[k] for r in rows] for k in ("text", "tokens", "truncated", "reward"))
            stats = step_stats(texts, tokens, cut, total, num_generations, self.monitor_ngram)
            metrics.update({PREFIX + k: v for k, v in stats.items()})
        if self.slop is not None:  # against the batch's own over-used phrases, one document per prompt
            scores = self.slop.scores([r["text"] for r in rows], [r["prompt"] for r in rows])
            metrics[PREFIX + "slop"] = sum(scores) / len(scores)
        metrics.update(per_source(rows))
        if is_main_process:
            order = {"step": step, "prompt_ids": [r["prompt_id"] for r in rows]}
            append_jsonl(self.run.samples / "data_order.jsonl", order)
            if self.samples_every and step % self.samples_every == 0:
                write_stories(
                    self.run.samples / f"train_step_{step:06d}.jsonl", top_bottom(rows, self.samples_k, step)
                )
        return metrics


def per_source(rows: list[dict]) -> dict[str, float]:
    """Mean total reward, words and tokens per prompt source: `source/<name>/{reward,words,tokens}`."""
    out = {}
    for name in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == name]
        out[f"source/{name}/reward"] = sum(r["reward"] for r in mine) / len(mine)
        out[f"source/{name}/words"] = sum(len(r["text"].split()) for r in mine) / len(mine)
        out[f"source/{name}/tokens"] = sum(r["tokens"] for r in mine) / len(mine)
    return out


def top_bottom(rows: list[dict], k: int, step: int) -> list[dict]:
    """The k highest and k lowest total-reward completions as story records (meta: reward, rank)."""
    order = sorted(range(len(rows)), key=lambda i: rows[i]["reward"], reverse=True)
    picks = [(i, "top") for i in order[:k]] + [(i, "bottom") for i in order[::-1][:k] if i not in order[:k]]
    out = []
    for i, rank in picks:
        r = rows[i]
        meta = {key: r[key] for key in ("reward", "rewards", "tokens", "truncated")}
        rec = {
            "id": f"{r['prompt_id']}#{i}",
            "prompt": r["prompt"],
            "story": r["text"] or "(empty)",
            "system": "reference" if r.get("reference") else f"policy@{step}",
            "step": step,
            "source": r["source"],
            "meta": {"rank": rank, **meta},
        }
        if r.get("agents_room"):
            rec["meta"]["agents_room"] = r["agents_room"]
        rec.update({k2: r[k2] for k2 in ("min_words", "max_words") if r.get(k2) is not None})
        out.append(rec)
    return out
