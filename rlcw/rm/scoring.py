"""Scoring with a Bradley-Terry RM folder: one loader, one class per kind of model.

    rm = load_rm("runs/qs/rm/model")                 # RMScorer | TwoHeadScorer | EnsembleScorer
    rm.score(["prompt"], ["story"])                  # -> [float]
    rm.score(["prompt"], ["story"], raw=True)        # ignore a length-control fit
    rm.score_heads(prompts, stories)                 # raw scores by head: {"score": ...} (+ each head and "sum")

The folder says which kind it is: `rlcw_ensemble.json` -> `EnsembleScorer` (`rlcw.rm.ensemble`: `score` is the
manifest's aggregate, or the `aggregate` / `uwo_lambda` given here; `score_members` gives every member's score),
two heads named in `rlcw_rm.json` -> `TwoHeadScorer` (`rlcw.rm.odin`: `score` is the quality head unless `head`
says `length` or `sum`), else `RMScorer` (one score). Every kind renders with `encode_for_rm` (the folder's own
rendering) and scores in length-bucketed batches: inputs are sorted by token count and cut into batches of at
most `batch_size` rows, at most `token_budget` padded tokens and at most `max_padding` padding overhead (defaults
by device, `BATCH_DEFAULTS`), so long stories never form huge (B, T) blocks and CPU time is not spent on
padding. `length_control` (auto | true | false, `rlcw.rm.length_control`) decides whether `score` returns the
residual after removing what length explains with the folder's installed fit; `length_fit` (None = raw) is the
resolved choice. A failure raises: a scorer never returns a silent default.

The TRL reward callable over these is `rlcw.rewards.bt.BTScorer`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlcw.cpu_isa import resolve_cpu_precision
from rlcw.errors import RlcwError
from rlcw.metrics.text import count_words
from rlcw.rm.aggregate import AGGREGATES
from rlcw.rm.ensemble import EnsembleManifest, EnsembleRM, aggregate_rows, is_ensemble
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
# pure waste, and on a small CPU even an unpadded batch of two long rows can run slower than the rows
# one by one, so only short rows share a batch there. GPUs gain from wide batches.
BATCH_DEFAULTS = {"cpu": (512, 0.05), "cuda": (32768, 0.25)}


class RMScorer:
    """A one-score BT RM: (prompt, story) -> its score. The base of the other kinds."""

    heads: list[str] = ["score"]  # the score layer's rows, as rlcw_rm.json names them

    def __init__(
        self,
        rm_dir: str | Path,
        model,
        tokenizer,
        spec: RMSpec,
        *,
        batch_size: int = 16,
        device: str | None = None,
        token_budget: int | None = None,
        max_padding: float | None = None,
        length_fit: LengthFit | None = None,
        precision: str = "fp32",
    ):
        self.rm_dir, self.model, self.tokenizer, self.spec = Path(rm_dir), model, tokenizer, spec
        self.head = "quality"  # a one-score RM answers quality (and sum) with its score
        self.device = device or next(model.parameters()).device
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        budget, padding = BATCH_DEFAULTS["cuda" if str(self.device).startswith("cuda") else "cpu"]
        self.token_budget = token_budget if token_budget is not None else budget  # max padded tokens per batch
        self.max_padding = max_padding if max_padding is not None else padding  # max padded/real - 1 per batch
        self.length_fit = length_fit  # None: raw scores; see rlcw.rm.length_control
        self.progress = False  # a tqdm bar over batches (evaluation); off for RL rewards
        self.truncation = TruncationCount()  # inputs cut to spec.max_length, warned once above 5%
        # fp32 | bf16 | auto (bf16 where AMX runs bf16 matmuls or they timed faster): bf16 holds the weights in bf16 (cast once: under
        # autocast alone every batch re-casts them) and runs the forward under bf16 autocast
        self.precision, self.precision_why = resolve_cpu_precision(precision)
        if self.precision == "bf16":
            self.model.to(torch.bfloat16)

    @property
    def width(self) -> int:
        """How many numbers the model gives per input."""
        return len(self.heads)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask).logits  # (B, H)

    @torch.inference_mode()
    def logits(self, encoded: list[list[int]]) -> torch.Tensor:
        """(N, width) model outputs of already-encoded inputs, in input order."""
        out = torch.zeros((len(encoded), self.width))
        pad_id = self.tokenizer.pad_token_id
        batches = length_batches([len(e) for e in encoded], self.batch_size, self.token_budget, self.max_padding)
        if self.progress and len(batches) > 1:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc=f"scoring {len(encoded)} stories", unit="batch")
        bf16 = self.precision == "bf16"
        for idx in batches:
            ids, mask = pad_batch([encoded[i] for i in idx], pad_id)
            with torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16, enabled=bf16):
                logits = self._forward(ids.to(self.device), mask.to(self.device))
            if logits.isnan().any():
                raise RlcwError("reward model returned NaN", where=str(self.rm_dir))
            if logits.shape[-1] != self.width:
                raise RlcwError(
                    f"the RM returns {logits.shape[-1]} scores but its rlcw_rm.json names heads {self.heads}",
                    where=str(self.rm_dir),
                    hint="re-save the RM with `rlcw train-rm`",
                )
            out[idx] = logits.float().cpu()
        return out

    def score_ids(self, encoded: list[list[int]]) -> list[float]:
        """Raw scores of already-encoded inputs (what `score` runs after `encode_for_rm`)."""
        return self.logits(encoded)[:, 0].tolist()

    def score(self, prompts: list[str], stories: list[str], raw: bool = False) -> list[float]:
        """One score per (prompt, story); the length-controlled residual when a fit is loaded and not raw."""
        scores = self.score_ids(encode_for_rm(self.spec, self.tokenizer, prompts, stories, self.truncation))
        return self.controlled(scores, stories, raw)

    def controlled(self, scores: list[float], stories: list[str], raw: bool = False) -> list[float]:
        """`scores` less what length explains, when a fit is loaded and not raw."""
        if self.length_fit is None or raw:
            return scores
        return self.length_fit.residuals(scores, [count_words(s) for s in stories])

    def score_heads(self, prompts: list[str], stories: list[str]) -> dict[str, list[float]]:
        """Raw scores by head: {"score": ...} for a one-score RM."""
        return {"score": self.score_ids(encode_for_rm(self.spec, self.tokenizer, prompts, stories))}


class TwoHeadScorer(RMScorer):
    """A length-disentangled RM (ODIN, `rlcw.rm.odin`): `score` gives `head` (quality | length | sum)."""

    def __init__(self, rm_dir, model, tokenizer, spec: RMSpec, *, head: str = "quality", **batching):
        self.heads = list(spec.extra["heads"])
        super().__init__(rm_dir, model, tokenizer, spec, **batching)
        self.head = check_head(head, self.heads)

    def score_ids(self, encoded: list[list[int]]) -> list[float]:
        return select_head(self.logits(encoded), self.heads, self.head).tolist()

    def score_heads(self, prompts: list[str], stories: list[str]) -> dict[str, list[float]]:
        """Raw scores of every head and of their sum, from one pass."""
        logits = self.logits(encode_for_rm(self.spec, self.tokenizer, prompts, stories))
        return {name: logits[:, i].tolist() for i, name in enumerate(self.heads)} | {"sum": logits.sum(-1).tolist()}


class EnsembleScorer(RMScorer):
    """k BT members in one folder (`rlcw.rm.ensemble`): `score` gives their `aggregate` (mean | wco | uwo)."""

    def __init__(
        self, rm_dir, ensemble: EnsembleRM, tokenizer, spec: RMSpec, *, aggregate: str, uwo_lambda: float, **batching
    ):
        self.ensemble = ensemble
        self.aggregate, self.uwo_lambda = aggregate, uwo_lambda
        super().__init__(rm_dir, self.ensemble, tokenizer, spec, **batching)

    @property
    def width(self) -> int:
        return self.ensemble.size

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask)  # (B, k), centred

    def score_ids(self, encoded: list[list[int]]) -> list[float]:
        """The aggregate of the members' scores."""
        return aggregate_rows(self.logits(encoded).tolist(), self.aggregate, self.uwo_lambda)

    def score_with_members(
        self, prompts: list[str], stories: list[str], raw: bool = False
    ) -> tuple[list[float], list[list[float]]]:
        """`score` and the (k, n) member scores it aggregated, from one pass."""
        members = self.logits(encode_for_rm(self.spec, self.tokenizer, prompts, stories, self.truncation))  # (N, k)
        scores = aggregate_rows(members.tolist(), self.aggregate, self.uwo_lambda)
        return self.controlled(scores, stories, raw), members.T.tolist()

    def score_members(self, prompts: list[str], stories: list[str]) -> list[list[float]]:
        """(k, n): every member's (centred) score of each (prompt, story)."""
        return self.logits(encode_for_rm(self.spec, self.tokenizer, prompts, stories)).T.tolist()


def load_rm(
    rm_dir: str | Path,
    *,
    batch_size: int = 16,
    device: str | None = None,
    token_budget: int | None = None,
    max_padding: float | None = None,
    length_control: bool | str = "auto",
    head: str = "quality",
    aggregate: str | None = None,
    uwo_lambda: float | None = None,
    precision: str = "fp32",
) -> RMScorer:
    """The scorer of a BT RM folder written by `rlcw train-rm`, of the folder's kind (see the module docstring).

    `aggregate` / `uwo_lambda` apply to ensembles only and `head` to two-head RMs (a one-score RM answers
    quality and sum with its score); a choice the folder cannot answer is a ValueError or an RlcwError.
    `precision`: fp32, bf16 (bf16 weights, the forward under bf16 autocast: faster where bf16 matmuls run natively,
    scores close to fp32's; docs/results/speed.md) or auto (bf16 where AMX runs it or it timed faster, fp32 elsewhere; `rlcw.cpu_isa`)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rm_dir = Path(rm_dir)
    spec = load_spec(rm_dir)
    if spec.type != "bt":
        raise RlcwError(
            f"expected a bt reward model, this one is '{spec.type}'",
            where=str(rm_dir),
            hint="load it with rlcw.rewards.scorers.load_scorer(kind='auto', ...)",
        )
    heads = list(spec.extra.get("heads", ["score"]))
    head = check_head(head, heads)
    tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    batching = {
        "batch_size": batch_size,
        "device": device,
        "token_budget": token_budget,
        "max_padding": max_padding,
        "precision": precision,
    }
    if is_ensemble(rm_dir):
        ensemble = EnsembleRM(rm_dir)
        how, lam = _aggregate_choice(rm_dir, heads, ensemble.manifest, aggregate, uwo_lambda)
        scorer = EnsembleScorer(rm_dir, ensemble, tokenizer, spec, aggregate=how, uwo_lambda=lam, **batching)
    else:
        if aggregate is not None or uwo_lambda is not None:
            raise ValueError(f"aggregate/uwo_lambda apply to RM ensembles; {rm_dir} is a single RM")
        model = AutoModelForSequenceClassification.from_pretrained(rm_dir)
        if len(heads) > 1:
            scorer = TwoHeadScorer(rm_dir, model, tokenizer, spec, head=head, **batching)
        else:
            scorer = RMScorer(rm_dir, model, tokenizer, spec, **batching)
    scorer.length_fit = resolve_length_control(length_control, rm_dir)
    return scorer


def _aggregate_choice(
    rm_dir: Path, heads: list[str], manifest: EnsembleManifest, how: str | None, lam: float | None
) -> tuple[str, float]:
    """The ensemble's aggregate and UWO lambda: the given ones, else its manifest's."""
    if len(heads) != 1:
        raise ValueError(f"an RM ensemble has one head per member; {rm_dir} names heads {heads}")
    how = how or manifest.aggregate
    lam = manifest.uwo_lambda if lam is None else float(lam)
    if how not in AGGREGATES or lam < 0:
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)} and uwo_lambda >= 0, got {how}, {lam}")
    return how, lam
