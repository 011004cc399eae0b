"""Load any scorer `rlcw eval-rm` can evaluate, by kind.

- `bt`: a Bradley-Terry RM folder -> `rlcw.rm.scoring.load_rm` (pointwise: `.score(prompts, stories)`);
- `genrm`: a generative RM folder -> `rlcw.rewards.genrm.GenRMScorer` (pairwise);
- `judge`: a zero-shot LLM judge -> `rlcw.judges.pairwise.JudgePairwiseScorer` (pairwise; no folder);
- `rubric`: a judge's yes/no criteria -> `rlcw.rewards.rubric.RubricReward` (pointwise, 0..1, NaN when no
  criterion got a valid verdict; `rubric` = the options of a `type: rubric` reward spec; no folder);
- `auto`: `bt` or `genrm` from the folder's `rlcw_rm.json`.

Pairwise scorers share one method: `prefer_ordered(prompts, first, second) -> list[float | None]`,
the probability that the story shown FIRST is better (None = no valid verdict, never a tie).

    scorer = load_scorer("auto", "runs/train_rm/model")
    is_pairwise(scorer)   # False for bt
"""

from __future__ import annotations

from typing import Any

from rlcw.errors import RlcwError
from rlcw.rm.render import load_spec

KINDS = ("auto", "bt", "genrm", "judge", "rubric")


def is_pairwise(scorer) -> bool:
    return callable(getattr(scorer, "prefer_ordered", None))


def _folder_kind(path: str | None, kind: str) -> str:
    if not path:
        raise RlcwError(
            f"scorer kind '{kind}' needs an RM folder",
            where="scorer.path",
            hint="e.g. scorer.path=runs/train_rm/model",
        )
    found = load_spec(path).type  # raises with a hint when the folder is not an rlcw RM
    if kind != "auto" and found != kind:
        raise RlcwError(
            f"scorer.kind={kind} but this reward model is '{found}'",
            where=str(path),
            hint=f"use scorer.kind={found} or auto",
        )
    return found


def load_scorer(
    kind: str,
    path: str | None = None,
    *,
    batch_size: int = 16,
    device: str | None = None,
    length_control: bool | str = "auto",
    judge_client: dict[str, Any] | None = None,
    judge_template: str = "writerly",
    head: str = "quality",
    rubric: dict[str, Any] | None = None,
):
    """A pointwise (bt, rubric) or pairwise (genrm, judge) scorer; imports each kind's module only when asked."""
    if kind not in KINDS:
        raise RlcwError(f"unknown scorer kind '{kind}'", where="scorer.kind", hint=f"use one of {', '.join(KINDS)}")
    if kind == "rubric":
        from rlcw.rewards.rubric import rubric_scorer

        return rubric_scorer(dict(rubric or {}), "scorer.rubric")
    if kind == "judge":
        try:
            from rlcw.judges.pairwise import JudgePairwiseScorer
        except ImportError as exc:
            raise RlcwError(
                f"the judge scorer is not available: {exc}", hint="install rlcw with its judge dependencies"
            ) from None
        return JudgePairwiseScorer(dict(judge_client or {}), template=judge_template, progress=True)
    found = _folder_kind(path, kind)
    if found == "bt":
        from rlcw.rm.scoring import load_rm

        return load_rm(path, batch_size=batch_size, device=device, length_control=length_control, head=head)
    try:
        from rlcw.rewards.genrm import GenRMScorer
    except ImportError as exc:
        raise RlcwError(f"the genrm scorer is not available: {exc}") from None
    return GenRMScorer(path, batch_size=batch_size, device=device)
