"""A length-disentangled Bradley-Terry reward model (ODIN, Chen et al. 2024): a quality head and a length
head on one backbone; RL uses the quality head and drops the length head.

The model is an ordinary HF `AutoModelForSequenceClassification` with `num_labels=2`: its score layer
`W` (2, hidden) holds the quality head in row 0 and the length head in row 1 (`HEADS`; the RM folder's
`rlcw_rm.json` says so in `extra.heads`, and `config.id2label` names them). For a batch of B pairs with
head outputs r = (r_Q, r_L) and word counts L of the 2B stories, the loss is

    loss = -mean log sigma((r_Q + r_L)(chosen) - (r_Q + r_L)(rejected) - margin)    Bradley-Terry on the sum
         - length_weight        * rho(r_L, L)          ties the length head to length
         + decorrelation_weight * |rho(r_Q, L)|        frees the quality head from length
         + orthogonality_weight * |cos(W_Q, W_L)|      the two head weights orthogonal (normalised: shrinking the
                                                       heads cannot satisfy it)
         + quality_bt_weight    * -mean log sigma(r_Q(chosen) - r_Q(rejected) - margin)   (optional, default 0)

with rho the Pearson correlation over the 2B stories of the batch plus a window of earlier stories (0 when every
story has the same length or a head is constant: there is nothing to tie or free). A 16-story batch alone gives a
correlation with a standard error near 0.25; `window` keeps the head outputs and word counts of the last stories
(earlier micro-batches, and every rank's, gathered), detached, so the correlation is taken over `window` + 2B
stories while the gradient flows through this batch's. Defaults are 1, 1, 1 (ODIN's lambda_L = lambda_Q = 1) and
a window of 256 stories. Length is counted in words (`rlcw.metrics.text.count_words`), the unit of the prompts'
ranges. The last term is not ODIN's: on pairs where length
carries no preference (rlcw's length-matched corruption pairs) BT on the sum lets either head carry the
preference, and the length head, tied to length only by a correlation, carried part of it; a BT term on the
quality head alone asks it to rank the pairs by itself.

    loss, parts = odin_loss(chosen, rejected, chosen_words, rejected_words, head_weight, OdinWeights())
    select_head(logits, HEADS, "quality")     # (B, 2) -> (B,); also "length" and "sum"
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rlcw.errors import RlcwError

HEADS = ("quality", "length")  # the score layer's rows, in order
HEAD_CHOICES = ("quality", "length", "sum")  # what a scorer may return


@dataclass
class OdinWeights:
    length: float = 1.0  # - weight x Pearson(length head, words)
    decorrelation: float = 1.0  # + weight x |Pearson(quality head, words)|
    orthogonality: float = 1.0  # + weight x |w_quality . w_length|
    quality_bt: float = 0.0  # + weight x Bradley-Terry on the quality head alone (not in ODIN; 0 = off)
    window: int = 256  # earlier stories (detached) the correlations are also taken over; 0 = this batch only


def pearson(x: torch.Tensor, y: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Pearson correlation of two (N,) tensors, differentiable; 0 when either is constant."""
    xc, yc = x - x.mean(), y - y.mean()
    denom = xc.norm() * yc.norm()
    if denom.item() < eps:
        return (xc * 0).sum()  # 0, still attached to the graph
    return (xc * yc).sum() / denom


def odin_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    chosen_words: torch.Tensor,
    rejected_words: torch.Tensor,
    head_weight: torch.Tensor,
    weights: OdinWeights,
    margin: torch.Tensor | None = None,
    past: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The ODIN loss (module docstring) and its parts. chosen, rejected: (B, 2) head outputs [quality,
    length]; *_words: (B,); head_weight: (2, hidden), the score layer's weight; `past`: ((M, 2) head outputs,
    (M,) words) of earlier stories, taken into the correlations without gradient."""
    diff = chosen.sum(-1) - rejected.sum(-1)  # (B,)
    bt = -F.logsigmoid(diff - margin if margin is not None else diff).mean()
    r = torch.cat([chosen, rejected]).float()  # (2B, 2)
    words = torch.cat([chosen_words, rejected_words]).to(r)  # (2B,)
    if past is not None and len(past[1]):
        r = torch.cat([r, past[0].detach().to(r)])  # (2B + M, 2)
        words = torch.cat([words, past[1].to(r)])
    rho_q, rho_l = pearson(r[:, 0], words), pearson(r[:, 1], words)
    w_q, w_l = head_weight[0].float(), head_weight[1].float()
    dot = (w_q * w_l).sum()
    cos = dot / (w_q.norm() * w_l.norm()).clamp_min(1e-12)
    diff_q = chosen[:, 0] - rejected[:, 0]  # (B,)
    bt_q = -F.logsigmoid(diff_q - margin if margin is not None else diff_q).mean()
    loss = bt - weights.length * rho_l + weights.decorrelation * rho_q.abs() + weights.orthogonality * cos.abs()
    loss = loss + weights.quality_bt * bt_q
    parts = {"bt_loss": bt, "quality_bt_loss": bt_q, "rho_quality": rho_q, "rho_length": rho_l, "head_dot": dot}
    return loss, {**parts, "head_cos": cos}


class ScoreWindow:
    """The last `size` stories' head outputs (N, 2) and word counts (N,), detached: `past` for `odin_loss`."""

    def __init__(self, size: int):
        self.size = size
        self.scores, self.words = torch.zeros(0, len(HEADS)), torch.zeros(0)

    @property
    def past(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return (self.scores, self.words) if self.size > 0 and len(self.words) else None

    def add(self, scores: torch.Tensor, words: torch.Tensor) -> None:
        if self.size <= 0:
            return
        self.scores = torch.cat([scores.detach().float().cpu(), self.scores])[: self.size]
        self.words = torch.cat([words.detach().float().cpu(), self.words])[: self.size]


def check_head(head: str, heads: list[str] | tuple[str, ...]) -> str:
    """`head` if an RM with these heads can answer it (quality | length | sum), else a clear error. A one-head
    RM (heads ["score"]) answers quality and sum with its score and has no length head."""
    if head not in HEAD_CHOICES:
        raise RlcwError(f"unknown RM head '{head}'", where="head", hint=f"use one of {', '.join(HEAD_CHOICES)}")
    if head == "length" and "length" not in heads:
        raise RlcwError(
            "this reward model has no length head",
            where="head",
            hint="train one with rm.length_head=true, or use head=quality",
        )
    return head


def select_head(logits: torch.Tensor, heads: list[str] | tuple[str, ...], head: str) -> torch.Tensor:
    """(B, H) RM outputs -> (B,) scores of `head` (see `check_head`)."""
    check_head(head, heads)
    if logits.shape[-1] != len(heads):
        raise RlcwError(f"the RM returns {logits.shape[-1]} scores but its rlcw_rm.json names heads {list(heads)}")
    if len(heads) == 1:
        return logits[:, 0]
    if head == "sum":
        return logits.sum(-1)
    return logits[:, list(heads).index(head)]


def head_weight_param(model) -> torch.nn.Parameter:
    """The trainable (2, hidden) score-layer weight of a two-head model (plain or PEFT-wrapped)."""
    found = [
        p
        for name, p in model.named_parameters()
        if p.requires_grad
        and p.ndim == 2
        and p.shape[0] == len(HEADS)
        and name.split(".")[-2:-1] != ["lora_B"]
        and any(part in name for part in ("score", "classifier"))
    ]
    if len(found) != 1:
        raise RlcwError(
            f"expected one trainable ({len(HEADS)}, hidden) score layer, found {len(found)}",
            hint="rm.length_head=true needs a sequence-classification model with a `score` or `classifier` layer",
        )
    return found[0]
