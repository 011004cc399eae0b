"""A Bradley-Terry reward model as a scorer and as a TRL reward function.

    scorer = BTScorer("runs/qs/rm/model")
    scorer.score(["prompt"], ["story"])                 # -> [float]
    scorer.score(["prompt"], ["story"], raw=True)       # ignore a length-control fit
    GRPOTrainer(reward_funcs=[scorer], ...)            # (prompts, completions, **kw) -> list[float]

Scores use `encode_for_rm` (the RM folder's own rendering) and length-bucketed batches: inputs
are sorted by token count and cut into batches of at most `batch_size` rows, at most `token_budget`
padded tokens and at most `max_padding` padding overhead (defaults by device, `BATCH_DEFAULTS`),
so long stories never form huge (B, T) blocks and CPU time is not spent on padding. `length_control`
(auto | true | false, see `rlcw.rm.length_control`) decides whether `score` returns the residual
after removing what length explains with the RM folder's installed fit; `raw=True` always gives raw
scores, and `scorer.length_fit` (None = raw) is what a run reports as its resolved choice.
A two-head RM (`rm.length_head=true`, `rlcw.rm.odin`) scores with its quality head unless `head`
says `length` or `sum`; `score_heads` gives every head's raw scores.
A failure raises: a reward function never returns a silent default.

An ensemble folder (`rlcw train-rm rm.ensemble.size=k`, see `rlcw.rm.ensemble`) loads here like a
single RM: `score` returns the manifest's aggregate (or the `aggregate` / `uwo_lambda` given here),
`score_members` every member's score, and as a reward function it logs each member's mean and the
disagreement (std across members) through TRL's `log_metric` when the trainer passes one.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlcw.data.records import message_text
from rlcw.errors import RlcwError
from rlcw.metrics.text import count_words
from rlcw.rm.aggregate import AGGREGATES, member_summary
from rlcw.rm.length_control import LengthFit, resolve_length_control
from rlcw.rm.odin import check_head, select_head
from rlcw.rm.render import RMSpec, TruncationCount, encode_for_rm, load_spec


def pad_batch(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists into (B, T) ids and attention mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def length_batches(
    lengths: list[int], batch_size: int, token_budget: int | None = None, max_padding: float | None = None
) -> list[list[int]]:
    """Indices sorted by length, cut into batches of <= batch_size rows, <= token_budget padded tokens, and
    padded tokens <= (1 + max_padding) x real tokens. A single row over the budget forms its own batch."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0
    for i in order:  # ascending, so the newest row is the widest of its batch
        padded = (len(current) + 1) * lengths[i]
        full = (
            len(current) >= batch_size
            or (token_budget is not None and padded > token_budget)
            or (max_padding is not None and padded > (1 + max_padding) * (real + lengths[i]))
        )
        if current and full:
            batches.append(current)
            current, real = [], 0
        current.append(i)
        real += lengths[i]
    if current:
        batches.append(current)
    return batches


# Batching defaults by device: (token_budget, max_padding). CPU prefill is compute-bound: padding is
# pure waste, and on the 2-core dev machine even an unpadded batch of two 600-token rows ran slower
# than the rows one by one (11.1 s vs 8.6 s), so only short rows share a batch there. GPUs gain from
# wide batches.
BATCH_DEFAULTS = {"cpu": (512, 0.05), "cuda": (32768, 0.25)}


class BTScorer:
    """Scores (prompt, story) pairs with a BT reward model folder written by `rlcw train-rm`."""

    def __init__(
        self,
        rm_dir: str | Path,
        batch_size: int = 16,
        device: str | None = None,
        model=None,
        tokenizer=None,
        *,
        token_budget: int | None = None,
        max_padding: float | None = None,
        length_control: bool | str = "auto",
        spec: RMSpec | None = None,
        head: str = "quality",
        aggregate: str | None = None,
        uwo_lambda: float | None = None,
    ):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from rlcw.rm.ensemble import EnsembleRM, is_ensemble

        self.rm_dir = Path(rm_dir)
        self.spec = spec or load_spec(self.rm_dir)
        if self.spec.type != "bt":
            raise RlcwError(
                f"expected a bt reward model, this one is '{self.spec.type}'",
                where=str(self.rm_dir),
                hint="load it with rlcw.rewards.scorers.load_scorer(kind='auto', ...)",
            )
        self.heads: list[str] = list(self.spec.extra.get("heads", ["score"]))  # the score layer's rows
        self.head = check_head(head, self.heads)  # what `score` returns: quality | length | sum
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.rm_dir)
        self.ensemble = EnsembleRM(self.rm_dir) if model is None and is_ensemble(self.rm_dir) else None
        self.aggregate, self.uwo_lambda = self._aggregate_choice(aggregate, uwo_lambda)
        self.last_members: list[list[float]] = []  # (k, n) member scores of the last scoring call
        self.model = model or self.ensemble or AutoModelForSequenceClassification.from_pretrained(self.rm_dir)
        self.device = device or next(self.model.parameters()).device
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        budget, padding = BATCH_DEFAULTS["cuda" if str(self.device).startswith("cuda") else "cpu"]
        self.token_budget = token_budget if token_budget is not None else budget  # max padded tokens per batch
        self.max_padding = max_padding if max_padding is not None else padding  # max padded/real - 1 per batch
        self.progress = False  # a tqdm bar over batches (evaluation); off for RL rewards
        # auto | true | false -> the fit applied (None: raw scores); see rlcw.rm.length_control
        self.length_fit: LengthFit | None = resolve_length_control(length_control, self.rm_dir)
        self.__name__ = f"rm_{self.rm_dir.parent.name or self.rm_dir.name}"
        self.truncation = TruncationCount()  # inputs cut to spec.max_length, warned once above 5%

    def _aggregate_choice(self, how: str | None, lam: float | None) -> tuple[str | None, float | None]:
        if self.ensemble is None:
            if how is not None or lam is not None:
                raise ValueError(f"aggregate/uwo_lambda apply to RM ensembles; {self.rm_dir} is a single RM")
            return None, None
        if len(self.heads) != 1:
            raise ValueError(f"an RM ensemble has one head per member; {self.rm_dir} names heads {self.heads}")
        how = how or self.ensemble.manifest.aggregate
        lam = self.ensemble.manifest.uwo_lambda if lam is None else float(lam)
        if how not in AGGREGATES or lam < 0:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)} and uwo_lambda >= 0, got {how}, {lam}")
        return how, lam

    def head_logits(self, encoded: list[list[int]]) -> torch.Tensor:
        """(N, heads) raw outputs of already-encoded inputs, in input order; an ensemble's aggregate as (N, 1)."""
        if self.ensemble is None:
            return self._logits(encoded, len(self.heads))
        from rlcw.rm.ensemble import aggregate_rows

        members = self._logits(encoded, self.ensemble.size)  # (N, k)
        self.last_members = members.T.tolist()
        return torch.tensor(aggregate_rows(members.tolist(), self.aggregate, self.uwo_lambda)).reshape(-1, 1)

    def score_members(self, prompts: list[str], stories: list[str]) -> list[list[float]]:
        """(k, n): every member's (centred) score of each (prompt, story); [scores] for a single RM."""
        encoded = encode_for_rm(self.spec, self.tokenizer, prompts, stories)
        if self.ensemble is None:
            return [self.score_ids(encoded)]
        return self._logits(encoded, self.ensemble.size).T.tolist()

    @torch.inference_mode()
    def _logits(self, encoded: list[list[int]], width: int) -> torch.Tensor:
        """(N, width) model outputs in input order: the heads of one RM, or an ensemble's k member scores."""
        out = torch.zeros((len(encoded), width))
        pad_id = self.tokenizer.pad_token_id
        batches = length_batches([len(e) for e in encoded], self.batch_size, self.token_budget, self.max_padding)
        if self.progress and len(batches) > 1:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc=f"scoring {len(encoded)} stories", unit="batch")
        for idx in batches:
            ids, mask = pad_batch([encoded[i] for i in idx], pad_id)
            out_b = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))
            logits = out_b if self.ensemble is not None else out_b.logits  # (B, k) | (B, H)
            if logits.isnan().any():
                raise RlcwError("reward model returned NaN", where=str(self.rm_dir))
            if logits.shape[-1] != width:
                raise RlcwError(
                    f"the RM returns {logits.shape[-1]} scores but its rlcw_rm.json names heads {self.heads}",
                    where=str(self.rm_dir),
                    hint="re-save the RM with `rlcw train-rm`",
                )
            out[idx] = logits.float().cpu()
        return out

    def score_ids(self, encoded: list[list[int]]) -> list[float]:
        """Raw scores of `self.head` for already-encoded inputs (what `score` runs after `encode_for_rm`)."""
        return select_head(self.head_logits(encoded), self.heads, self.head).tolist()

    def score_heads(self, prompts: list[str], stories: list[str]) -> dict[str, list[float]]:
        """Raw scores of every head (a one-head RM: {"score": ...}), and of their sum when there are two."""
        logits = self.head_logits(encode_for_rm(self.spec, self.tokenizer, prompts, stories))
        out = {name: logits[:, i].tolist() for i, name in enumerate(self.heads)}
        if len(self.heads) > 1:
            out["sum"] = logits.sum(-1).tolist()
        return out

    def score(self, prompts: list[str], stories: list[str], raw: bool = False) -> list[float]:
        """One score per (prompt, story); the length-controlled residual when a fit is loaded and not raw."""
        scores = self.score_ids(encode_for_rm(self.spec, self.tokenizer, prompts, stories, self.truncation))
        if self.length_fit is None or raw:
            return scores
        return self.length_fit.residuals(scores, [count_words(s) for s in stories])

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        scores = self.score([message_text(p) for p in prompts], [message_text(c) for c in completions])
        log = kwargs.get("log_metric")  # TRL's reward-function logging hook (rlcw's PPO passes one too)
        if self.ensemble is not None and log is not None:
            for key, value in member_summary(self.last_members).items():
                log(f"rewards/{self.__name__}/{key}", value)
        return scores
