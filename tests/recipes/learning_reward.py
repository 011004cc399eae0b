"""A dense programmatic reward for the learning test, given to `rlcw grpo` by import path.

`half_vocab_share(..., model_dir=...)`: the share of a completion's tokens that fall in a fixed half of
the vocabulary: the tokens whose input embedding in the START model (read once from `model_dir`) has
a first coordinate above its median. A random-weight policy samples about 0.5. The half is fixed
for the whole run (it is read from the saved start model, never from the policy), and the policy
can reach it the way real RL moves a model: by shifting its hidden states (a random split such as
even token ids has no direction in a random embedding, so no small model could learn it quickly).
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=4)
def _half(model_dir: str) -> frozenset[int]:
    from safetensors.torch import load_file

    weights = load_file(f"{model_dir}/model.safetensors")
    emb = next(v for k, v in weights.items() if k.endswith("embed_tokens.weight"))  # (V, H)
    first = emb[:, 0]
    return frozenset((first > first.median()).nonzero().flatten().tolist())


def half_vocab_share(prompts, completions, completion_ids=None, model_dir: str = "", **kwargs) -> list[float]:
    if completion_ids is None:
        raise ValueError("half_vocab_share needs completion_ids (TRL passes them)")
    half = _half(model_dir)
    return [sum(1 for t in ids if t in half) / len(ids) if len(ids) else 0.0 for ids in completion_ids]


def completion_tokens(prompts, completions, completion_ids=None, **kwargs) -> list[float]:
    """A cost for the constraint's resume tests: each completion's token count (never 0 for long, so a held limit
    of 0 keeps the multiplier rising and every step's reward depends on the state a checkpoint carries)."""
    if completion_ids is None:
        raise ValueError("completion_tokens needs completion_ids (TRL passes them)")
    return [float(len(ids)) for ids in completion_ids]
