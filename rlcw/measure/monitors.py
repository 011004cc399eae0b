"""Reward-hacking monitors: per-step statistics of the rollouts, thresholds, and a stopping callback.

    stats = step_stats(texts, token_lengths, truncated, rewards, group_size=4)   # pure maths
    check_rules(stats, {"max_cap_share": 0.9, "min_distinct_batch": 0.3})       # -> broken rules
    MonitorCallback(warn={...}, stop={...}, patience=2)                          # in a Trainer

What each statistic catches (all logged as `monitor/<name>`):
- `words_mean`, `words_std`, `tokens_mean`: length drift (RMs often reward length);
- `cap_share`: share of completions cut by the completion cap (no EOS): the policy stopped
  finishing stories;
- `rep_intra`: share of a story's trigrams repeating an earlier trigram of the same story
  (loops, refrains), mean over stories;
- `distinct_group` / `distinct_batch`: distinct trigrams / all trigrams within each group of
  completions for one prompt (mean over groups) and over the whole batch: collapse to one story;
- `shared_ngrams`: share of a story's distinct trigrams that also occur in another story of the
  batch (mean over stories): the same stock phrases everywhere;
- `reward_length_corr`: Spearman correlation of the total reward with words in the batch: the
  reward is paying for length;
- `kl_to_start`: KL of the policy to the starting model (computed by the trainer);
- `slop`: mean share (%) of a story's words inside phrases the batch over-uses against a human
  baseline (rlcw.metrics.slop; computed by the trainer when `monitor.slop_human` is set).

A rule is `max_<stat>` or `min_<stat>` with a threshold. `MonitorCallback` warns when a warn
rule breaks, and stops the run (with `stop_reason`) when a stop rule breaks on `patience`
consecutive logged steps after `min_steps`.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from transformers import TrainerCallback

from rlcw.errors import RlcwError
from rlcw.logs import say
from rlcw.metrics.agreement import spearman
from rlcw.metrics.text import count_words, distinct_n, ngrams, repetition_rate, tokens

NAN = float("nan")

STATS = (
    "words_mean",
    "words_std",
    "tokens_mean",
    "cap_share",
    "rep_intra",
    "distinct_group",
    "distinct_batch",
    "shared_ngrams",
    "reward_length_corr",
    "kl_to_start",
    "slop",
)
PREFIX = "monitor/"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def shared_ngram_share(texts: list[str], n: int = 3) -> float:
    """Mean over stories of: distinct n-grams of the story also found in another story / its distinct n-grams."""
    sets = [set(ngrams(tokens(t), n)) for t in texts]
    df = Counter(g for s in sets for g in s)  # in how many stories each n-gram occurs
    shares = [sum(1 for g in s if df[g] > 1) / len(s) for s in sets if s]
    return _mean(shares) if shares else 0.0


def group_distinct(texts: list[str], group_size: int, n: int = 3) -> float:
    """Mean over consecutive groups of `group_size` texts of `distinct_n` within the group."""
    groups = [texts[i : i + group_size] for i in range(0, len(texts), group_size)]
    return _mean([distinct_n(g, n) for g in groups])


def step_stats(
    texts: list[str],
    token_lengths: list[int],
    truncated: list[bool],
    rewards: list[float],
    group_size: int,
    n: int = 3,
) -> dict[str, float]:
    """Every monitor statistic of one batch of completions (groups are consecutive, as GRPO orders them)."""
    words = [float(count_words(t)) for t in texts]
    return {
        "words_mean": _mean(words),
        "words_std": _std(words),
        "tokens_mean": _mean([float(x) for x in token_lengths]),
        "cap_share": _mean([1.0 if t else 0.0 for t in truncated]),
        "rep_intra": _mean([repetition_rate(t, n) for t in texts]),
        "distinct_group": group_distinct(texts, group_size, n),
        "distinct_batch": distinct_n(texts, n),
        "shared_ngrams": shared_ngram_share(texts, n),
        # < 3 points: undefined here (two points always give +-1)
        "reward_length_corr": spearman(list(rewards), words, undefined=NAN) if len(words) >= 3 else NAN,
    }


def validate_rules(rules: dict[str, float], where: str) -> None:
    for key in rules:
        kind, _, stat = key.partition("_")
        if kind not in ("max", "min") or stat not in STATS:
            raise RlcwError(
                f"unknown monitor rule '{key}'",
                where=where,
                hint=f"rules are max_<stat> or min_<stat>; stats: {', '.join(STATS)}",
            )


def check_rules(stats: dict[str, float], rules: dict[str, float]) -> list[str]:
    """The rules `stats` breaks, as readable messages (a NaN or missing statistic breaks nothing)."""
    broken = []
    for key, limit in rules.items():
        kind, _, stat = key.partition("_")
        value = stats.get(stat)
        if value is None or value != value:
            continue
        if (kind == "max" and value > limit) or (kind == "min" and value < limit):
            broken.append(f"{stat}={value:.3g} {'>' if kind == 'max' else '<'} {limit:g} ({key})")
    return broken


class MonitorCallback(TrainerCallback):
    """Reads `monitor/<stat>` from each trainer log; warns, and stops the run on persistent breaks."""

    def __init__(
        self,
        warn: dict[str, float] | None = None,
        stop: dict[str, float] | None = None,
        patience: int = 2,
        min_steps: int = 0,
        run=None,
    ):
        self.warn, self.stop = dict(warn or {}), dict(stop or {})
        validate_rules(self.warn, "monitor.warn")
        validate_rules(self.stop, "monitor.stop")
        self.patience, self.min_steps, self.run = max(1, patience), min_steps, run
        self.streak: Counter = Counter()
        self.stop_reason: str | None = None
        self.alerts: list[dict] = []

    def observe(self, step: int, stats: dict[str, float]) -> str | None:
        """Update streaks with one step's statistics; the stop reason when the run must stop."""
        for message in check_rules(stats, self.warn):
            self.alerts.append({"step": step, "level": "warn", "message": message})
            say("monitor", f"alert at step {step}: {message}")
        broken = {m.rsplit("(", 1)[1].rstrip(")"): m for m in check_rules(stats, self.stop)}
        for key in self.stop:  # a statistic not measured this step (e.g. KL every N steps) leaves its streak as it was
            value = stats.get(key.split("_", 1)[1])
            if key in broken:
                self.streak[key] += 1
            elif value is not None and value == value:
                self.streak[key] = 0
        if step < self.min_steps:
            return None
        for key, message in broken.items():
            if self.streak[key] >= self.patience:
                return (
                    f"stopped by reward-hacking monitor at step {step}: {message} for {self.streak[key]} logged steps"
                )
        return None

    def state_dict(self) -> dict:
        """Streaks, alerts and stop reason: what a resumed run needs to warn and stop as an uninterrupted one."""
        return {"streak": dict(self.streak), "alerts": list(self.alerts), "stop_reason": self.stop_reason}

    def load_state_dict(self, state: dict) -> None:
        self.streak = Counter(state.get("streak", {}))
        self.alerts = list(state.get("alerts", []))
        self.stop_reason = state.get("stop_reason")

    def on_log(self, args, state, control, logs=None, **kwargs):
        stats = {k[len(PREFIX) :]: v for k, v in (logs or {}).items() if k.startswith(PREFIX)}
        if not stats or self.stop_reason:
            return
        reason = self.observe(state.global_step, stats)
        if reason:
            self.stop_reason = reason
            self.alerts.append({"step": state.global_step, "level": "stop", "message": reason})
            if state.is_world_process_zero:
                print(f"[rlcw] {reason}", flush=True)
            control.should_training_stop = True


# (title, y-axis label, {legend: stat}): one quantity per axis
MONITOR_PANELS = (
    ("story length", "words", {"mean": "words_mean", "std": "words_std"}),
    ("completion length", "tokens", {"mean": "tokens_mean"}),
    ("completions cut at the token cap", "share of completions", {"cap share": "cap_share"}),
    (
        "trigram repetition",
        "share of trigrams",
        {"within a story": "rep_intra", "shared across stories": "shared_ngrams"},
    ),
    (
        "diversity (distinct trigrams)",
        "distinct-3 share",
        {"in a prompt's group": "distinct_group", "in the batch": "distinct_batch"},
    ),
    ("does the reward pay for length?", "Spearman rho (reward, words)", {"correlation": "reward_length_corr"}),
    ("KL to the starting model", "nats / token", {"KL to start": "kl_to_start"}),
    ("slop: words in phrases over-used against human text", "% of words", {"slop": "slop"}),
)


def plot_monitors(
    rows: list[dict], path: Path, warn: dict[str, float] | None = None, stop: dict[str, float] | None = None
) -> Path:
    """The monitor statistics of metrics.jsonl rows, one quantity per panel in a grid, with the warn/stop
    thresholds of `monitor.warn` / `monitor.stop` drawn and the steps that broke a warn or stop rule marked."""
    from rlcw.report import Panel, plot_lines, series

    panels = []
    for title, ylabel, stats in MONITOR_PANELS:
        lines = {label: series(rows, PREFIX + stat) for label, stat in stats.items()}
        thresholds, marks = {}, []
        for kind, rules in (("warn", warn or {}), ("stop", stop or {})):
            for rule, y in rules.items():
                side, _, stat = rule.partition("_")
                if stat not in stats.values():
                    continue
                thresholds[f"{kind}: {side} {stat}"] = y
                xs, ys = series(rows, PREFIX + stat)
                marks += [
                    (x, v, "rule broken") for x, v in zip(xs, ys, strict=False) if check_rules({stat: v}, {rule: y})
                ]
        panels.append(Panel(title, lines, ylabel, thresholds, marks))
    return plot_lines(panels, path, title="Reward-hacking monitors (per logged step)")
