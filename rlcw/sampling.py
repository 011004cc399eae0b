"""Sampling maths both RL algorithms and every measurement use: left padding, per-token log-probs and
entropies, KL per token, and a lean sampling loop that returns each sampled token's log-prob.

    ids, mask = left_pad([[1, 2], [3]], pad_id=0)                       # (B, P) ids and attention mask
    logp = logprobs_from_logits(logits, labels)                          # (B, T)
    kl = kl_per_token(logp, ref_logp, kind="k3")                         # (B, T)
    completions, logps = sample_with_logprobs(model, prompt_ids, gen_cfg, eos_ids=[2], pad_id=0)
    sample_with_logprobs(..., min_words=[40, 0], words=WordCounts.of(tokenizer))   # no ending before 40 words
"""

from __future__ import annotations

from itertools import pairwise

import torch


def left_pad(
    seqs: list[list[int]], pad_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into (B, P) ids and attention mask, on `device`."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(seqs), width), dtype=torch.long, device=device)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long, device=device)
        mask[i, width - len(s) :] = 1
    return ids, mask


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per position: logits (B, T, V), labels (B, T) -> (B, T)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return torch.gather(logp, -1, labels.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution per position: (B, T, V) -> (B, T), in nats.

    H = logsumexp(z) - sum_i softmax(z)_i z_i."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def kl_per_token(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled tokens' log-probs: (B, T) -> (B, T).

    k1 = log p - log q (unbiased, can be negative per token); k3 = (q/p - 1) - log(q/p)
    (unbiased, always >= 0, lower variance; Schulman's "Approximating KL divergence")."""
    log_ratio = logp - ref_logp
    if kind == "k1":
        return log_ratio
    if kind == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise ValueError(f"unknown KL estimator '{kind}' (use k1 or k3)")


def logits_processors(cfg):
    """The sampling transforms `generate` applies for `cfg` (a GenerationConfig), in its order."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    out = LogitsProcessorList()
    if cfg.repetition_penalty is not None and cfg.repetition_penalty != 1.0:
        out.append(RepetitionPenaltyLogitsProcessor(penalty=cfg.repetition_penalty))
    if cfg.do_sample:
        if cfg.temperature is not None and cfg.temperature != 1.0:
            out.append(TemperatureLogitsWarper(cfg.temperature))
        if cfg.top_k is not None and cfg.top_k != 0:
            out.append(TopKLogitsWarper(top_k=cfg.top_k, min_tokens_to_keep=1))
        if cfg.top_p is not None and cfg.top_p < 1.0:
            out.append(TopPLogitsWarper(top_p=cfg.top_p, min_tokens_to_keep=1))
        if cfg.min_p is not None:
            out.append(MinPLogitsWarper(min_p=cfg.min_p, min_tokens_to_keep=1))
    return out


@torch.inference_mode()
def sample(model, prompt_ids: list[list[int]], cfg, *, eos_ids: list[int], pad_id: int) -> list[list[int]]:
    """One completion per prompt row (token ids, cut after the first EOS, at most cfg.max_new_tokens)."""
    return sample_with_logprobs(model, prompt_ids, cfg, eos_ids=eos_ids, pad_id=pad_id)[0]


def inverse_cdf_draw(probs: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of probs (B, V) by inverse-CDF sampling: one uniform per row (`u` (B, 1) in [0, 1), drawn
    here if None), the first token whose cumulative probability passes it (a zero-probability token is never
    drawn). Same distribution as `torch.multinomial(probs, 1)`, which on CPU draws an exponential for every
    vocabulary entry (B x V random numbers a step; ~20% of a bf16 decode step of the embedded model at batch 16)."""
    cdf = probs.cumsum(-1)  # (B, V)
    if u is None:
        u = torch.rand((probs.size(0), 1), device=probs.device, dtype=cdf.dtype)
    return torch.searchsorted(cdf, u.to(cdf.dtype) * cdf[:, -1:], right=True).squeeze(1).clamp(max=probs.size(1) - 1)


DRAWS = ("multinomial", "inverse_cdf")


class WordCounts:
    """Whitespace-separated word counts (rlcw.metrics.text.count_words) of completions as they are sampled, token by
    token, from three facts of each vocabulary entry's text: how many words start inside it after its first
    character, whether its first character is a non-space (a word starts there when the text before it is empty or
    ends in whitespace) and whether it ends in whitespace. Empty texts (special tokens) change nothing.

        counts = WordCounts.of(tokenizer)              # or WordCounts([" Once", " upon", "\n", "The"])
        words, after_space = counts.start(rows)        # (R,) zeros, (R,) True
        words, after_space = counts.step(tokens, words, after_space)
    """

    def __init__(self, texts: list[str], size: int | None = None):
        size = max(size or 0, len(texts))
        inner, first, ends, empty = (
            torch.zeros(size, dtype=d) for d in (torch.long, torch.bool, torch.bool, torch.bool)
        )
        empty[len(texts) :] = True
        for i, t in enumerate(texts):
            if not t:
                empty[i] = True
                continue
            first[i], ends[i] = not t[0].isspace(), t[-1].isspace()
            inner[i] = sum(1 for a, b in pairwise(t) if a.isspace() and not b.isspace())
        self.inner, self.first, self.ends, self.empty = inner, first, ends, empty

    @classmethod
    def of(cls, tokenizer, size: int | None = None) -> WordCounts:
        """Each id's text as `tokenizer.decode([id])`; `size` (the model's vocabulary) pads ids the tokenizer lacks."""
        return cls([tokenizer.decode([i]) for i in range(len(tokenizer))], size)

    def to(self, device) -> WordCounts:
        for name in ("inner", "first", "ends", "empty"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def start(self, rows: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(rows, dtype=torch.long, device=device), torch.ones(rows, dtype=torch.bool, device=device)

    def step(
        self, tokens: torch.Tensor, words: torch.Tensor, after_space: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The counts and end-in-whitespace flags after appending `tokens` (R,) to rows with `words`, `after_space`."""
        words = words + self.inner[tokens] + (self.first[tokens] & after_space).long()
        return words, torch.where(self.empty[tokens], after_space, self.ends[tokens])

    def before(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) long: the words of the text of completions `ids` (B, T) before each position, as count_words
        counts that text (a story ending at position t holds this many words)."""
        count, after_space = self.start(ids.size(0), ids.device)
        out = torch.zeros(ids.shape, dtype=torch.long, device=ids.device)
        for t in range(ids.size(1)):
            out[:, t] = count
            count, after_space = self.step(ids[:, t], count, after_space)
        return out


def _growing_cache(config, capacity: int):
    """transformers' DynamicCache whose plain layers hold keys and values in buffers of `capacity` positions,
    allocated at the first write: a decode step writes its token in place instead of concatenating the whole cache
    (the same values; a cache with any other kind of layer is returned as transformers builds it)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.device, self.is_initialized, self.length = key_states.device, True, 0
                shape = (*key_states.shape[:2], capacity)
                self.kbuf = key_states.new_empty((*shape, key_states.size(-1)))
                self.vbuf = value_states.new_empty((*shape, value_states.size(-1)))
            end = self.length + key_states.size(-2)
            self.kbuf[..., self.length : end, :] = key_states
            self.vbuf[..., self.length : end, :] = value_states
            self.length = end
            return self._views()

        def _views(self):
            self.keys, self.values = self.kbuf[..., : self.length, :], self.vbuf[..., : self.length, :]
            return self.keys, self.values

        def reorder_cache(self, beam_idx):
            self.kbuf, self.vbuf = self.kbuf.index_select(0, beam_idx), self.vbuf.index_select(0, beam_idx)
            self._views()

        def batch_select_indices(self, indices):
            self.kbuf, self.vbuf = self.kbuf[indices], self.vbuf[indices]
            self._views()

    kv = DynamicCache(config=config)
    if kv.layers and all(type(layer) is DynamicLayer for layer in kv.layers):
        kv.layers = [GrowingLayer() for _ in kv.layers]
    return kv


@torch.inference_mode()
def sample_with_logprobs(
    model,
    prompt_ids: list[list[int]],
    cfg,
    *,
    eos_ids: list[int],
    pad_id: int,
    cache: str = "dynamic",
    draw: str = "multinomial",
    compact: bool | None = None,
    uniforms: torch.Tensor | None = None,
    compact_after: int = 1,
    min_words: list[int] | None = None,
    words: WordCounts | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """(completions, log-probs): token ids cut after the first EOS, and each sampled token's log-prob under
    the distribution it was drawn from (the processed scores: temperature, top-k/p, ...; vLLM's
    "processed_logprobs"), one float per completion token. Every tensor lives on the model's device.

    cache: "dynamic" (transformers' DynamicCache, its plain layers writing into buffers of prompt + max_new_tokens
    positions instead of concatenating every layer's keys and values each step; rows can leave it) or
    "static" (allocated once for prompt + max_new_tokens, written in place; same samples, no faster at the
    quickstart's sizes in scripts/bench_rollout.py, what a compiled decode step would need).
    draw: "multinomial" (`torch.multinomial`, as `generate`) or "inverse_cdf" (`inverse_cdf_draw`: the same
    distribution from B instead of B x V random numbers a step, so other samples for the same seed).
    compact: rows that drew an EOS leave the batch (their cache rows are dropped), so a step costs the rows still
    decoding. The inverse-CDF draw still takes a uniform for every batch row, so its samples are those of the
    uncompacted batch (up to float rounding of batch-size-dependent kernels; common random numbers hold); the
    multinomial draw's are other samples of the same distribution once a row has ended (and rows no longer read
    fixed noise: no common random numbers). None = on for the dynamic cache with the inverse-CDF draw.
    compact_after: compact once at least this many ended rows are in the batch (each compaction copies the cache of
    the rows kept; at a large batch, waiting for a few rows to end costs less than copying at every ending).
    uniforms: (B, max_new_tokens) the inverse-CDF draw's uniforms, row b's at step t (None: `torch.rand` of the
    global generator, (B, 1) a step); given, a row's sample depends only on its own prompt and uniforms, so rows
    of several seeds can share one batch (`rlcw.measure.heldout.crn_completions`).
    min_words: (B,) no row may end (draw an EOS id) before its completion holds this many words (0: no bound),
    counted by `words` (`WordCounts`); the EOS ids are masked out of the processed scores, so the returned
    log-probs are those of the distribution drawn from."""
    from transformers import StaticCache

    if cache not in ("static", "dynamic") or draw not in DRAWS:
        raise ValueError(f"cache must be 'static' or 'dynamic' and draw one of {DRAWS}, got {cache!r}, {draw!r}")
    compact = cache == "dynamic" and draw == "inverse_cdf" if compact is None else compact
    if uniforms is not None and (
        draw != "inverse_cdf" or tuple(uniforms.shape) != (len(prompt_ids), cfg.max_new_tokens)
    ):
        raise ValueError(
            f"uniforms must be ({len(prompt_ids)}, {cfg.max_new_tokens}) with draw='inverse_cdf', got "
            f"{tuple(uniforms.shape)} with {draw!r}"
        )
    if compact and cache == "static":
        raise ValueError("compact=True needs the dynamic cache (a static cache keeps its rows)")
    if min_words is not None and (words is None or len(min_words) != len(prompt_ids)):
        raise ValueError(f"min_words needs `words` (WordCounts) and one bound a row ({len(prompt_ids)})")
    device = model.device
    uniforms = uniforms.to(device) if uniforms is not None else None
    unique = list(dict.fromkeys(tuple(r) for r in prompt_ids))  # identical prompts are prefilled once
    row_of = torch.tensor([unique.index(tuple(r)) for r in prompt_ids], device=device)  # (B,)
    ids, mask = left_pad([list(u) for u in unique], pad_id, device=device)  # (U, L)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    with torch.device(device):  # StaticCache makes its length counter without naming a device
        kv = (
            StaticCache(config=model.config, max_cache_len=ids.size(1) + cfg.max_new_tokens)
            if cache == "static"
            else _growing_cache(model.config, ids.size(1) + cfg.max_new_tokens)
        )
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=kv, use_cache=True, logits_to_keep=1
    ).logits[:, -1]  # (U, V)
    if len(unique) < len(prompt_ids):
        kv.reorder_cache(row_of)
    # the whole (B, L + max_new_tokens) mask at once: future positions are hidden by causality, and the
    # attention reads only the first L + t columns of it (transformers slices a longer padding mask)
    full = torch.cat([mask[row_of], mask.new_ones((len(prompt_ids), cfg.max_new_tokens))], 1)
    logits, pos = logits[row_of].float(), pos[row_of, -1:]
    procs = logits_processors(cfg)
    history = ids[row_of] if procs else None  # (B, L + t): the repetition penalty reads prompt and completion
    eos = torch.tensor(eos_ids, device=device)
    rows = torch.arange(len(prompt_ids), device=device)  # the batch rows still decoding
    tokens = torch.full((len(prompt_ids), cfg.max_new_tokens), pad_id, device=device)  # (B, T)
    token_logps = torch.zeros(tokens.shape, device=device)
    done = torch.zeros(len(prompt_ids), dtype=torch.bool, device=device)  # (R,): ended rows still in the batch
    if min_words is not None:  # (B,) bounds, counts and flags, indexed by `rows`
        low = torch.tensor(min_words, dtype=torch.long, device=device)
        count, after_space = words.to(device).start(len(prompt_ids), device)
        is_eos = torch.zeros(logits.size(-1), dtype=torch.bool, device=device)
        is_eos[eos] = True
    for step in range(cfg.max_new_tokens):
        scores = procs(history, logits) if procs else logits  # (R, V) fp32
        if min_words is not None:
            scores = scores.masked_fill((count[rows] < low[rows])[:, None] & is_eos, float("-inf"))
        if cfg.do_sample:
            probs = torch.softmax(scores, -1)  # (R, V)
            if draw == "inverse_cdf":  # a uniform for every batch row, used or not: compacting keeps the samples
                u = torch.rand((len(prompt_ids), 1), device=device) if uniforms is None else uniforms[:, step, None]
                nxt = inverse_cdf_draw(probs, u[rows])
            else:
                nxt = torch.multinomial(probs, 1).squeeze(1)
            logp = probs.gather(1, nxt[:, None]).squeeze(1).log()  # (R,): the draw's own probability
        else:
            nxt = scores.argmax(-1)
            logp = torch.log_softmax(scores, -1).gather(1, nxt[:, None]).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)  # ended rows feed padding (compact: none)
        tokens[rows, step], token_logps[rows, step] = nxt, logp
        if min_words is not None:
            count[rows], after_space[rows] = words.step(nxt, count[rows], after_space[rows])
        done |= torch.isin(nxt, eos)
        if bool(done.all()) or step == cfg.max_new_tokens - 1:
            break
        if history is not None:
            history = torch.cat([history, nxt[:, None]], 1)
        if compact and int(done.sum()) >= compact_after:  # ended rows leave the batch: later steps cost the rows left
            keep = (~done).nonzero().squeeze(1)
            kv.batch_select_indices(keep)
            rows, nxt, pos, full, done = rows[keep], nxt[keep], pos[keep], full[keep], done[keep]
            history = history[keep] if history is not None else None
        pos = pos + 1
        logits = (
            model(input_ids=nxt[:, None], attention_mask=full, position_ids=pos, past_key_values=kv, use_cache=True)
            .logits[:, -1]
            .float()
        )
    result, result_logps = [], []
    for row, lp in zip(tokens.tolist(), token_logps.tolist(), strict=True):
        cut = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
        result.append(row[:cut])
        result_logps.append(lp[:cut])
    return result, result_logps
