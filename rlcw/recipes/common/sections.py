"""Config sections every recipe shares: the run keys every config opens with (`RunKeys`), `model.*`, `lora.*`,
and for grpo, rloo, ppo and dpo `data.*` prompts, `reward.*`, `eval.*`, `monitor.*` (`RLRecipeSections`: the
run keys and the first four sections of grpo, rloo and ppo).

The sections are plain dataclasses; recipes translate them into library arguments in their own builder
functions. One meaning per key: held-out prompts are `eval.prompts` / `eval.split`, the RM is
`reward.rm_path` (dpo, which has no reward: `eval.evaluators.rm.rm_path`), resuming is
`train.resume: false | true | auto` (rlcw.runs.resume_checkpoint), trackers are `train.report_to`
(`rlcw.recipes.common.run.stage_tracker`; TRL/HF's own `report_to` is always "none"), mixed precision is
`train.bf16` (`rlcw.recipes.common.checks.check_bf16`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcw.config import at_least, one_of
from rlcw.models import DTYPES, EMBEDDED_ALIAS

DEFAULT_SYSTEM_PROMPT = (
    "You are a skilled fiction writer. Write only the story the user asks for: no title, no preamble, "
    "no notes. Respect the requested length."
)


@dataclass
class RunKeys:
    """The top-level keys every recipe config opens with: its run folder <output_dir>/<run_name> (`rlcw.runs`), its
    seed, and what becomes of a used folder. A recipe's config repeats `run_name` with its own default (a repeated
    dataclass field keeps its base's place: these keys come first in every config, its dump and its help)."""

    output_dir: str = "runs"  # parent folder of the run folder <output_dir>/<run_name>
    run_name: str = "run"  # name of the run folder under output_dir
    seed: int = 0  # random seed of the run (torch, sampling, data order)
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>


@dataclass
class ModelConfig:
    """The model a stage loads: alias, hub id, local folder, or an rlcw LoRA checkpoint."""

    name: str = EMBEDDED_ALIAS  # model alias, HF hub id, local folder or an rlcw LoRA checkpoint
    dtype: str = one_of(DTYPES, "float32")  # weights dtype: float32 | bfloat16 | float16
    system_prompt: str = DEFAULT_SYSTEM_PROMPT  # sent as the system message for generation
    chat_template: str | None = None  # path to a Jinja template file; None = the tokenizer's own


@dataclass
class RubricSection:
    """A rubric scorer (rlcw.rewards.rubric): the options of a `type: rubric` reward spec, for best-of-n and eval-rm."""

    # ttcw (the 14 TTCW tests) | ttcw:<ids> | a YAML/JSON file | a list of questions or {question, name, weight}
    criteria: Any = "ttcw"
    verdict: str = "logprobs"  # logprobs: P(yes) from a local/openai judge | text: parsed Yes/No replies
    template: str = "ttcw_baseline"  # judge template of each (story, criterion) conversation
    max_tokens: int = 64  # verdict=text: the cap of each judge reply
    # judge client keys (kind, model, base_url, concurrency, cache_dir, script, ...); kind defaults to local,
    # {} = the embedded model
    client: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoraSection:
    enabled: bool = True  # train LoRA adapters; false = full fine-tuning
    r: int = 16  # LoRA rank
    alpha: int = 32  # LoRA scaling alpha (peft lora_alpha)
    dropout: float = 0.0  # dropout on the LoRA layers (peft lora_dropout)
    target_modules: str = "all-linear"  # or comma-separated module names, e.g. "q_proj,v_proj"
    top_layers: int | None = None  # adapt only the top N transformer layers: backprop stops early (much faster on CPU)


@dataclass
class MonitorSection:
    """Reward-hacking monitors of the RL stages (`rlcw.measure.monitors`); grpo and ppo share these keys."""

    enabled: bool = True  # compute the monitors' text statistics (n-gram stats, slop); false skips them
    ngram: int = 3  # n of the n-gram statistics (distinct-n, shared n-grams)
    warn: dict[str, float] = field(default_factory=dict)  # max_<stat> / min_<stat> -> threshold
    stop: dict[str, float] = field(default_factory=dict)  # max_<stat> / min_<stat> -> threshold that stops the run
    patience: int = 2  # consecutive logged steps a stop rule must break
    min_steps: int = 0  # steps before which no stop rule can stop the run
    # human stories the `slop` series is measured against: bundled | a story jsonl | null (off)
    slop_human: str | None = "bundled"


@dataclass
class PromptSection:
    """`data.*` of the online RL stages (grpo, ppo): training prompts, mixed from sources and fitted to the cap."""

    prompts: str = "bundled"  # "bundled" or a jsonl/csv/parquet file of prompt rows (default for every source)
    train_split: str | None = "train"  # split of data.prompts trained on; None = every row
    max_train_prompts: int | None = None  # size of the (mixed) training set; None = every row once
    # name -> {prompts: file (default data.prompts), style: tmas|wp (keep only that style), weight: float, split};
    # or {style: column, prompts: jsonl/csv/parquet/HF dataset, column: prompt, id_column, hf_split, weight}: any
    # prompt column, plain text or a conversation (used as the chat prompt as it is, system turn included)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    fit_to_cap: str = "warn"  # filter | error | warn | ignore: prompts whose max_words cannot fit the completion cap
    tokens_per_word: float = 1.4  # tokens per word assumed when checking a prompt's max_words against the cap
    no_overlap_with: list[str] = field(default_factory=list)  # files (RM pairs, other prompts) RL must not train on


@dataclass
class RewardSection:
    """`reward.*` of grpo and ppo: weighted reward functions (rlcw.rewards.factory)."""

    rm_path: str = "runs/train_rm/model"  # default RM of bt/genrm specs, the `rm` evaluator and ppo's value.init=rm
    rm_batch_size: int = 16  # completions scored per reward-model forward pass
    # name -> spec ({type: bt|genrm|remote|length_range|overlong, weight, ...options}); weight 0 drops one
    specs: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "rm": {"type": "bt", "weight": 1.0},
            "length_range": {"type": "length_range", "weight": 1.0, "clip": 2.0},
        }
    )


@dataclass
class EvalSection:
    """`eval.*` of grpo, ppo and dpo: held-out prompts sampled every `every_steps` and scored by the evaluators."""

    every_steps: int = at_least(0, 10)  # 0 disables periodic evaluation
    prompts: str | None = None  # held-out prompt file; None = data.prompts (grpo, ppo) or the bundled prompts (dpo)
    split: str | None = "eval"  # split of the held-out prompt file; None = every row
    column: str | None = None  # read eval.prompts as any table/HF dataset with this prompt column (split ignored)
    num_prompts: int = at_least(1, 8)  # held-out prompts sampled at each evaluation
    max_new_tokens: int = at_least(1, 96)  # completion cap of the evaluation samples (tokens)
    temperature: float = 0.8  # sampling temperature of the evaluation samples
    batch_size: int = at_least(1, 8)  # prompts generated per batch during evaluation
    # evaluator name -> its options (rlcw.measure.evaluation), e.g. rm: {rm_path}, judge: {judge}
    evaluators: dict[str, dict[str, Any]] = field(default_factory=lambda: {"rm": {}, "length": {}, "repetition": {}})


@dataclass
class RLRecipeSections(RunKeys):
    """The sections the online RL recipes (grpo, rloo, ppo) open their config with, after the run keys, in this
    order; each recipe's config adds its `train.*` section and the rest (grpo's `reward.*` adds `aggregation`)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: PromptSection = field(default_factory=PromptSection)
    reward: RewardSection = field(default_factory=RewardSection)
    lora: LoraSection = field(default_factory=LoraSection)


# Keys the RL recipes no longer have, as `rlcw.config.retired_keys` reads them from a recipe config's MOVED_KEYS
# and REMOVED_KEYS (old key -> its new spelling; old key -> why it went); docs/migration.md lists them.
RL_MOVED_KEYS = {
    "train.use_vllm": "rollout.kind=vllm",
    "train.vllm_mode": "rollout.vllm.mode",
    "train.vllm_server_base_url": "rollout.vllm.server_base_url",
    "train.vllm_gpu_memory_utilization": "rollout.vllm.gpu_memory_utilization",
    "train.log_kl_to_start": "train.log_kl_every=0 if it was false (true was the default: delete the key)",
}
GRPO_MOVED_KEYS = {
    **RL_MOVED_KEYS,
    "train.fast_rollout": "rollout.kind=fast",
    "train.rollout_precision": "rollout.precision",
    "train.rollout_draw": "rollout.draw",
    "train.rollout_is_cap": "rollout.is_cap",
}
GRPO_REMOVED_KEYS = {
    "train.shared_prefix": "the shared-prompt forward is always on where it applies; delete the key",
    "train.rollout_compact": "the fast rollout always drops ended rows with the inverse-CDF draw; delete the key",
    "train.rollout_prepack": "the fast rollout always packs its copy's weights on CPU; delete the key",
}
