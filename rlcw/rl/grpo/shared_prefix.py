"""Completion log-probs with each group's prompt run once: the GRPO loss forward without G copies of the prompt.

GRPO samples G completions per prompt, and TRL's loss forward runs every row as prompt + completion, so each
prompt passes through the model G times (2 prompts x 8 with ~58 prompt tokens against <= 88
completion tokens, so ~40% of the forward's tokens are repeated prompts). Under causal attention a prompt's
hidden states do not depend on what follows it, so rows with the same prompt share them exactly. Here, per group
of rows with the same prompt tokens: the prompt minus its last token runs once (one row, no padding) and returns
its key/value cache; the cache is expanded to the group's rows (a view: the backward sums every row's gradient
into the one prompt pass); the last prompt token and the completions, cut after the group's longest unmasked
completion token, run on top of it. On CPU the unmasked completion positions then go through rlcw's LM head
(rlcw.rl.fused_logprobs: chunked, and it keeps p @ W for the backward instead of recomputing the logits); on other
devices, or for a head with a bias, logit scaling or soft-capping, through TRL's fused LM head
(`trl.trainer.utils.add_fused_lm_head`: Triton kernels on CUDA/XPU, torch fallbacks with more passes over the
logits elsewhere). The result is TRL's `_get_per_token_logps_and_entropies` output, (B, T) log-probs and entropies
with zeros where the completion mask is 0, equal up to float rounding (tests/unit/test_shared_prefix.py checks the
log-probs, entropies and LoRA gradients of both heads against TRL's own path).

Used by rlcw.rl.grpo.trainer for the loss forward and the start model's forward (KL to the start), always where
it applies (no config key; `RlcwGRPOTrainer(shared_prefix=False)` runs TRL's path). `shared_prefix_logps` returns None where it does not apply, and the caller
runs TRL's path: no row shares its prompt, a multimodal batch, a model whose cache is not one plain
full-attention layer per decoder layer (sliding windows, linear attention), gradient checkpointing, or more than
one process (DDP prepares its gradient reduction once per forward call of the wrapped model; this runs several).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

from rlcw.rl.fused_logprobs import token_logprobs

# transformers renamed the forward's `past_key_values` (and the output's field) to `cache`
CACHE = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"
# config fields by which TRL's fused head scales or caps the logits; rlcw's head is the plain hidden @ W.T
LOGIT_TRANSFORMS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[tuple[list[int], torch.Tensor]]:
    """Rows grouped by their unpadded prompt tokens, in first-seen order: [(row indices, prompt tokens (n,))]."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (ids, mask) in enumerate(zip(prompt_ids.tolist(), prompt_mask.tolist(), strict=True)):
        groups.setdefault(tuple(t for t, m in zip(ids, mask, strict=True) if m), []).append(i)
    return [
        (rows, torch.tensor(key, dtype=prompt_ids.dtype, device=prompt_ids.device)) for key, rows in groups.items()
    ]


def _prefix_cache(model, prefix: torch.Tensor, rows: int) -> DynamicCache | None:
    """The prefix's key/value cache (one forward of one row), expanded to `rows` rows; None if the model's
    cache is not one plain full-attention layer per decoder layer."""
    cache = getattr(model(input_ids=prefix[None], use_cache=True, logits_to_keep=1), CACHE)
    if not isinstance(cache, DynamicCache) or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    return DynamicCache(
        ddp_cache_data=[
            (layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in cache.layers
        ]
    )


def own_head_applies(model, device: torch.device) -> bool:
    """Whether rlcw's LM head (rlcw.rl.fused_logprobs) can replace TRL's fused one and is the faster of the two:
    on CPU, for a head without bias whose config neither scales nor caps the logits (`train.lm_head=auto`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT's wrapper
    head, text = base.get_output_embeddings(), base.config.get_text_config()
    return (
        device.type == "cpu"
        and getattr(head, "bias", None) is None
        and all(getattr(text, k, None) is None for k in LOGIT_TRANSFORMS)
    )


def resolve_lm_head(choice: str, model, device: torch.device) -> tuple[bool, str]:
    """(whether rlcw's head runs, why) for `train.lm_head` = auto | trl | rlcw."""
    if choice == "trl":
        return False, "train.lm_head=trl"
    if choice == "rlcw":
        return True, "train.lm_head=rlcw"
    if own_head_applies(model, device):
        return True, "auto: CPU, a plain linear head"
    return False, "auto: " + ("not on CPU" if device.type != "cpu" else "the head has a bias or a logit transform")


def _suffix_logps(
    model, suffix, labels, cache, temperature: float, compute_entropy: bool, own_head: bool, end_ids=None
):
    """(n, L - 1) log-probs of `suffix`'s next tokens on top of `cache`, entropies or None, and the log-probability
    of ending (any of `end_ids`) at each position or None; zero where `labels` (n, L) is -100."""
    if not own_head:
        if end_ids:
            raise ValueError("the end log-probs need rlcw's LM head")
        out = model(input_ids=suffix, labels=labels, fused_lm_head=True, **{CACHE: cache})
        return out.log_probs, out.entropy if compute_entropy else None, None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.base_model(input_ids=suffix, use_cache=False, **{CACHE: cache}).last_hidden_state[:, :-1]
    targets = labels[:, 1:]  # (n, L - 1)
    mask = targets != -100
    weight = base.get_output_embeddings().weight  # (V, H)
    logp, ent = token_logprobs(hidden[mask], weight, targets[mask], temperature, entropy=compute_entropy)
    end = None
    if end_ids:  # log sum_e p(e): one more pass of the head per end id, its target that id at every position
        h = hidden[mask]
        ends = [token_logprobs(h, weight, torch.full_like(targets[mask], e), temperature)[0] for e in end_ids]
        end = torch.logsumexp(torch.stack(ends), 0)
    # masked_scatter keeps a group with no unmasked token connected to the graph (a zero gradient, not an error)
    return tuple(None if x is None else x.new_zeros(mask.shape).masked_scatter(mask, x) for x in (logp, ent, end))


def shared_prefix_logps(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float,
    compute_entropy: bool = False,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    own_head: bool | None = None,
    end_ids: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor] | None:
    """(B, T) log-probs of the last `logits_to_keep` tokens of `input_ids` (prompt + completion, the prompt
    left-padded by `attention_mask`) at `temperature`, and entropies if asked, with each distinct prompt run once;
    None when no two rows share a prompt or the model's cache does not allow it (the caller then runs TRL's path).
    `model` carries TRL's fused LM head at the same temperature; `autocast` makes the accelerator's autocast context
    (entered per group); `own_head`: rlcw's LM head instead of TRL's (None: where `own_head_applies`). With
    `end_ids` (rlcw's head only) a third (B, T) tensor: log sum_e p(e) at each position, the log-probability of
    ending there instead of drawing the completion's token, with its gradient."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT's wrapper
    name = "is_activation_checkpointing"  # transformers' newer name; the older one warns
    if getattr(base, name if name in dir(type(base)) else "is_gradient_checkpointing", False):
        return None
    width = input_ids.size(1) - logits_to_keep
    groups = prompt_groups(input_ids[:, :width], attention_mask[:, :width])
    if len(groups) == input_ids.size(0) or any(p.numel() == 0 for _, p in groups):
        return None
    if own_head is None:
        own_head = own_head_applies(model, input_ids.device)
    comp, cmask = input_ids[:, width:], attention_mask[:, width:]
    order, logps, entropies, ends = [], [], [], []
    for rows, prompt in groups:
        idx = torch.tensor(rows, device=input_ids.device)
        used = cmask[idx].any(0).nonzero()
        keep = int(used[-1]) + 1 if used.numel() else 1  # the group's completions, cut after its last real token
        with autocast():
            cache = None
            if prompt.numel() > 1:
                cache = _prefix_cache(model, prompt[:-1], len(rows))
                if cache is None:
                    return None
            suffix = torch.cat([prompt[-1:].expand(len(rows), 1), comp[idx, :keep]], dim=1)  # (n, 1 + keep)
            labels = suffix.masked_fill(torch.cat([cmask.new_ones(len(rows), 1), cmask[idx, :keep]], 1) == 0, -100)
            logp, ent, end = _suffix_logps(
                model, suffix, labels, cache, temperature, compute_entropy, own_head, end_ids
            )
        order += rows
        logps.append(torch.nn.functional.pad(logp, (0, logits_to_keep - keep)))  # zeros after the cut
        if compute_entropy:
            entropies.append(torch.nn.functional.pad(ent, (0, logits_to_keep - keep)))
        if end_ids:
            ends.append(torch.nn.functional.pad(end, (0, logits_to_keep - keep)))
    back = torch.argsort(torch.tensor(order, device=input_ids.device))  # the groups' rows back in batch order
    out = torch.cat(logps)[back], (torch.cat(entropies)[back] if compute_entropy else None)
    return (*out, torch.cat(ends)[back]) if end_ids else out
