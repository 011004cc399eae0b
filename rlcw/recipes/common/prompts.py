"""The RL stages' prompts: training prompts mixed from `data.sources` and fitted to the completion cap,
held-out prompts, chat messages of a prompt row, overlap checks, and the held-out evaluation sampler."""

from __future__ import annotations

from rlcw.data.prompts import COLUMN_OPTIONS, find_overlap, load_prompt_column, load_prompts, mix_sources, source_rows
from rlcw.errors import RlcwError
from rlcw.generation import chat_messages, prompt_token_ids
from rlcw.io import read_table
from rlcw.recipes.common.sections import EvalSection, PromptSection
from rlcw.rewards.length import range_fits_cap

FIT_MODES = ("filter", "error", "warn", "ignore")


def fit_to_cap(rows: list[dict], cap: int, mode: str, tokens_per_word: float, what: str) -> list[dict]:
    """Prompts whose stated max_words `cap` new tokens can hold: `mode` filter drops the rest, error
    raises, warn prints and keeps every row, ignore keeps every row."""
    bad = [r for r in rows if not range_fits_cap(r.get("max_words"), cap, tokens_per_word)]
    if not bad or mode == "ignore":
        return rows
    msg = (
        f"{len(bad)} of {len(rows)} {what} prompts ask for more words than {cap} tokens hold "
        f"(e.g. '{bad[0]['id']}': up to {bad[0]['max_words']} words at {tokens_per_word} tokens/word)"
    )
    if mode == "error":
        raise RlcwError(
            msg,
            where="data.fit_to_cap",
            hint="raise the completion cap, pick shorter prompts, or data.fit_to_cap=filter",
        )
    if mode == "warn":
        print(f"[rlcw] warning: {msg}; every such completion gets the same length penalty", flush=True)
        return rows
    kept = [r for r in rows if r not in bad]
    if not kept:
        raise RlcwError(
            msg + ": none left", where="data.fit_to_cap", hint="raise the completion cap or use shorter prompts"
        )
    return kept


def fit_to_context(
    rows: list[dict],
    tokenizer,
    system_prompt: str | None,
    cap: int,
    context: int | None,
    mode: str,
    what: str,
    cap_key: str,
) -> list[dict]:
    """Prompts whose chat-formatted tokens plus `cap` new tokens fit the model's `context` window (its
    max_position_embeddings, rlcw.models.context_length): `mode` filter drops the rest (counted), any other mode is
    an error naming the first prompt, its length and `cap_key`. `context` None: no limit known."""
    if context is None:
        return rows
    token_counts = [len(ids) for ids in prompt_token_ids(tokenizer, rows, system_prompt)]
    fits = [n + cap <= context for n in token_counts]
    if all(fits):
        return rows
    i = fits.index(False)
    row, n = rows[i], token_counts[i]
    where = f"{what} prompt '{row['id']}' of {row.get('source', '?')}"
    count = (
        f"{fits.count(False)} of {len(rows)} {what} prompts do not fit the model's context window of {context} tokens"
    )
    if mode != "filter":
        raise RlcwError(
            f"{n} prompt tokens + {cap_key}={cap} = {n + cap} > {context} ({count})",
            where=where,
            hint=f"shorten the prompt, lower {cap_key} (to at most {max(context - n, 0)}), "
            "or data.fit_to_cap=filter to drop such prompts",
        )
    kept = [r for r, ok in zip(rows, fits, strict=True) if ok]
    if not kept:
        raise RlcwError(f"{count}: none left", where=where, hint=f"lower {cap_key} or use shorter prompts")
    print(f"[rlcw] warning: {count}: dropped (data.fit_to_cap=filter)", flush=True)
    return kept


def train_prompts(data: PromptSection, cap: int, seed: int) -> list[dict]:
    """The training prompt rows (`source` = the data.sources name), mixed by weight and fitted to `cap` tokens."""
    if not data.sources:
        rows = fit_to_cap(
            load_prompts(data.prompts, data.train_split), cap, data.fit_to_cap, data.tokens_per_word, "training"
        )
        return rows[: data.max_train_prompts or None]
    pools, weights = {}, {}
    for name, spec in data.sources.items():
        check_source(name, spec)
        rows = source_rows(spec, data.prompts, spec.get("split", data.train_split))
        rows = fit_to_cap(rows, cap, data.fit_to_cap, data.tokens_per_word, f"'{name}'")
        if not rows:
            raise RlcwError(f"no prompts of style '{spec.get('style')}'", where=f"data.sources.{name}")
        pools[name] = [dict(r, source=name) for r in rows]
        weights[name] = float(spec.get("weight", 1.0))
    total = data.max_train_prompts or sum(len(p) for p in pools.values())
    return mix_sources(pools, weights, total, seed)


def held_out_prompts(data: PromptSection, ev: EvalSection, cap: int) -> list[dict]:
    """Every held-out prompt row (`eval.prompts` at `eval.split`), fitted to `cap` tokens as data.fit_to_cap says."""
    return fit_to_cap(eval_prompt_rows(ev, data.prompts), cap, data.fit_to_cap, data.tokens_per_word, "held-out")


def eval_prompt_rows(ev: EvalSection, default: str) -> list[dict]:
    """Held-out prompt rows: rlcw prompt rows of `eval.prompts` (or `default`) at `eval.split`, or with
    `eval.column` that column of any table or HF dataset (rlcw.data.prompts.load_prompt_column)."""
    if ev.column:
        return load_prompt_column(ev.prompts or default, column=ev.column)
    return load_prompts(ev.prompts or default, ev.split)


def prompt_messages(row: dict, system_prompt: str | None) -> list[dict]:
    """The chat prompt of a prompt row: its own conversation (a conversational `style: column` cell) as it
    is, else `model.system_prompt` + the prompt as the user turn."""
    return row.get("messages") or chat_messages(system_prompt, row["prompt"])


def check_source(name: str, spec: dict) -> None:
    """One `data.sources.<name>` entry's options (errors name `data.sources.<name>`); reads no file."""
    where = f"data.sources.{name}"
    unknown = sorted(set(spec) - set(COLUMN_OPTIONS))
    if unknown:
        raise RlcwError(f"unknown option '{unknown[0]}'", where=where, hint=f"options: {', '.join(COLUMN_OPTIONS)}")
    column_only = sorted(set(spec) & {"column", "id_column", "hf_split"})
    if spec.get("style") == "column":
        if not spec.get("prompts"):
            raise RlcwError(
                "style: column needs `prompts`", where=where, hint="a jsonl/csv/parquet file or a dataset id"
            )
    elif column_only:
        raise RlcwError(
            f"'{column_only[0]}' applies to style: column only", where=where, hint="add style: column, or drop it"
        )


def check_overlap(train_rows: list[dict], held_out: list[dict], files: list[str]) -> None:
    """Error naming the first overlap of training prompts with held-out prompts or RM data files."""
    others = {"held-out prompts": held_out}
    for path in files:
        others[path] = [
            {"id": f"line {line}", "prompt": row["prompt"]}
            for line, row in read_table(path)
            if isinstance(row.get("prompt"), str)
        ]
    hits = find_overlap(train_rows, others)
    if hits:
        tid, name, oid = hits[0]
        raise RlcwError(
            f"RL training prompt '{tid}' also appears in {name} ({oid}); {len(hits)} overlapping prompt(s) in all",
            where="data",
            hint="keep RL prompts apart from evaluation prompts and RM training data",
        )


def eval_sampler(e: EvalSection, tokenizer, rows: list[dict], *, system_prompt: str, run_name: str, seed: int):
    """`sample(model, step)` of the held-out evaluation of grpo, ppo and dpo (one plain story per prompt)."""
    from rlcw.measure.periodic import story_sampler  # torch + transformers: not at import of every recipe

    return story_sampler(
        tokenizer,
        rows,
        system_prompt=system_prompt,
        run_name=run_name,
        max_new_tokens=e.max_new_tokens,
        temperature=e.temperature,
        batch_size=e.batch_size,
        seed=seed,
    )
