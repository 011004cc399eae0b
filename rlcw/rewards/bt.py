"""A Bradley-Terry RM folder as a TRL reward function (`type: bt` reward specs).

    reward = BTScorer(load_rm("runs/qs/rm/model"))        # rlcw.rm.scoring.load_rm
    reward(prompts, completions)                          # -> list[float]: the RM's score of each story
    GRPOTrainer(reward_funcs=[reward], ...)

A `type: bt` reward spec's options are those of `rlcw.rm.scoring.load_rm` (batching, `length_control`, a two-head
RM's `head`, an ensemble's `aggregate` / `uwo_lambda`, `precision` fp32 | bf16 | auto; `rlcw.rewards.factory` loads
the scorer with them, and the log says when it scores in bf16);
`reward.scorer` is the loaded scorer and `reward.length_fit` what `length_control` resolved to (None = raw), which
a run reports. An ensemble's reward also logs each member's
mean and the disagreement (std across members) through TRL's `log_metric` when the trainer passes one.
"""

from __future__ import annotations

from pathlib import Path

from rlcw.data.records import message_text
from rlcw.logs import say
from rlcw.rm.aggregate import member_summary
from rlcw.rm.length_control import LengthFit
from rlcw.rm.scoring import EnsembleScorer, RMScorer


class BTScorer:
    """TRL's reward signature over a loaded scorer of a BT RM folder written by `rlcw train-rm`."""

    def __init__(self, scorer: RMScorer):
        self.scorer = scorer
        rm_dir = Path(scorer.rm_dir)
        self.__name__ = f"rm_{rm_dir.parent.name or rm_dir.name}"
        if scorer.precision == "bf16":
            say("reward", f"{self.__name__} scores in bf16 ({scorer.precision_why})")

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
