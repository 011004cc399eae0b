"""A Bradley-Terry RM folder as a TRL reward function (`type: bt` reward specs).

    reward = BTScorer("runs/qs/rm/model")                 # loads `rlcw.rm.scoring.load_rm(...)`
    reward(prompts, completions)                          # -> list[float]: the RM's score of each story
    GRPOTrainer(reward_funcs=[reward], ...)

The options are those of `rlcw.rm.scoring.load_rm` (batching, `length_control`, a two-head RM's `head`, an
ensemble's `aggregate` / `uwo_lambda`); `reward.scorer` is the loaded scorer and `reward.length_fit` what
`length_control` resolved to (None = raw), which a run reports. An ensemble's reward also logs each member's
mean and the disagreement (std across members) through TRL's `log_metric` when the trainer passes one.
"""

from __future__ import annotations

from pathlib import Path

from rlcw.data.records import message_text
from rlcw.rm.aggregate import member_summary
from rlcw.rm.length_control import LengthFit
from rlcw.rm.scoring import EnsembleScorer, load_rm


class BTScorer:
    """TRL's reward signature over the scorer of a BT RM folder written by `rlcw train-rm`."""

    def __init__(
        self,
        rm_path: str | Path,
        batch_size: int = 16,
        device: str | None = None,
        *,
        token_budget: int | None = None,
        max_padding: float | None = None,
        length_control: bool | str = "auto",
        head: str = "quality",
        aggregate: str | None = None,
        uwo_lambda: float | None = None,
    ):
        self.scorer = load_rm(
            rm_path,
            batch_size=batch_size,
            device=device,
            token_budget=token_budget,
            max_padding=max_padding,
            length_control=length_control,
            head=head,
            aggregate=aggregate,
            uwo_lambda=uwo_lambda,
        )
        rm_dir = Path(rm_path)
        self.__name__ = f"rm_{rm_dir.parent.name or rm_dir.name}"

    @property
    def length_fit(self) -> LengthFit | None:
        return self.scorer.length_fit

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        prompts, stories = [message_text(p) for p in prompts], [message_text(c) for c in completions]
        log = kwargs.get("log_metric")  # TRL's reward-function logging hook (rlcw's PPO passes one too)
        if not isinstance(self.scorer, EnsembleScorer) or log is None:
            return self.scorer.score(prompts, stories)
        scores, members = self.scorer.score_with_members(prompts, stories)
        for key, value in member_summary(members).items():
            log(f"rewards/{self.__name__}/{key}", value)
        return scores
