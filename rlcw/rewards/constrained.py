"""A cost held at or under a limit by a Lagrange multiplier (constrained RLHF: Moskovitz et al., 2024,
"Confronting Reward Model Overoptimization with Constrained RLHF").

    short = ConstrainedReward(EndedShortCost(max_tokens=88), limit="start", lr=2.0)
    short(prompts, completions, min_words=..., completion_ids=...)   # -> -multiplier * cost, per completion

Each call is one RL batch: the batch's mean cost (over every rank) takes one dual-ascent step,
multiplier <- clip(multiplier + lr * (mean cost - limit), 0, max_multiplier), and each completion gets
`-multiplier * its cost`. The multiplier starts at 0, so the term pays nothing while the cost stays under its limit;
when the policy pushes the cost above it, the price rises batch by batch until the cost comes back under, then
falls again. A fixed price high enough to stop a behaviour (a large `miss` for stories that end short) also stops
the behaviour's useful neighbour (ending at all); a price that tracks the limit is paid only while it is exceeded.

`limit`: a number in the cost's units, or "start": the mean cost of the first `start_calls` batches (the start
policy's own rate; the multiplier stays 0 meanwhile), so the constraint reads "no worse than where training began".
The multiplier, the resolved limit and the batch count are the term's state (`state_dict`): checkpoints carry it
(rlcw.rl.aux_state), so a resumed run prices as the uninterrupted one would.

In a reward spec: `constrain: {limit: start, lr: 2.0}` on any spec whose value is a cost (higher is worse): the
`ended_short` type (1 for a story that ended below its prompt's word range) or `slop` (rlcw.rewards.factory).
Logged per batch through TRL's `log_metric`: `constraint/<name>/cost`, `.../limit`, `.../multiplier`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

CONSTRAIN_OPTIONS = ("limit", "lr", "start_calls", "max_multiplier")
# what a GRPO run says when a constraint meets group-scaled advantages (docs/concepts/rewards.md)
CONSTRAINED_UNDER_GROUP = (
    "a constrained reward with train.scale_rewards=group: each group's SD absorbs most of its price (once the costly "
    "stories are a group's worst, a higher price leaves their advantage where it was); train.scale_rewards=batch "
    "lets it reach the advantage"
)


def batch_mean(values: list[float]) -> tuple[float, int]:
    """(mean, count) of the finite values over every rank of an initialised process group (this process alone
    otherwise); NaN and None (a cost the term could not judge) are left out. (nan, 0) when nothing is left."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    total, count = sum(finite), len(finite)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        import torch

        device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
        both = torch.tensor([total, float(count)], dtype=torch.float64, device=device)
        dist.all_reduce(both)
        total, count = float(both[0]), int(both[1])
    return (total / count if count else math.nan), count


class ConstrainedReward:
    """TRL reward callable: `-multiplier * cost` with the multiplier set by dual ascent (module docstring)."""

    def __init__(
        self,
        cost: Callable,
        limit: float | str = "start",
        lr: float = 1.0,
        start_calls: int = 2,
        max_multiplier: float = 10.0,
    ):
        if limit != "start" and not (isinstance(limit, int | float) and not isinstance(limit, bool)):
            raise ValueError(f"constrain.limit must be a number or 'start', got {limit!r}")
        if not lr > 0 or not max_multiplier > 0:
            raise ValueError(f"constrain.lr and constrain.max_multiplier must be > 0, got {lr} and {max_multiplier}")
        if not isinstance(start_calls, int) or isinstance(start_calls, bool) or start_calls < 1:
            raise ValueError(f"constrain.start_calls must be an integer >= 1, got {start_calls!r}")
        self.cost, self.lr, self.start_calls, self.max_multiplier = cost, float(lr), start_calls, float(max_multiplier)
        self.limit = None if limit == "start" else float(limit)
        self.multiplier, self.calls, self._start = 0.0, 0, [0.0, 0]  # start: (sum, count) of the first batches
        self.__name__ = f"constrained_{getattr(cost, '__name__', 'cost')}"

    def step(self, mean: float, count: int) -> None:
        """One batch's dual step (or, while the limit is 'start' and unresolved, one batch towards it)."""
        self.calls += 1
        if count == 0:
            return
        if self.limit is None:
            self._start[0] += mean * count
            self._start[1] += count
            if self.calls >= self.start_calls:
                self.limit = self._start[0] / self._start[1]
            return
        self.multiplier = min(self.max_multiplier, max(0.0, self.multiplier + self.lr * (mean - self.limit)))

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        costs = self.cost(prompts, completions, **kwargs)
        mean, count = batch_mean(costs)
        self.step(mean, count)
        log = kwargs.get("log_metric")
        if log is not None:
            name = self.__name__
            log(f"constraint/{name}/cost", mean)
            log(f"constraint/{name}/multiplier", self.multiplier)
            if self.limit is not None:
                log(f"constraint/{name}/limit", self.limit)
        return [math.nan if c is None or not math.isfinite(float(c)) else -self.multiplier * float(c) for c in costs]

    def state_dict(self) -> dict:
        return {"multiplier": self.multiplier, "limit": self.limit, "calls": self.calls, "start": list(self._start)}

    def load_state_dict(self, state: dict) -> None:
        self.multiplier, self.limit, self.calls = float(state["multiplier"]), state["limit"], int(state["calls"])
        self._start = [float(state["start"][0]), int(state["start"][1])]
