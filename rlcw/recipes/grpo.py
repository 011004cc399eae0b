"""GRPO with learned rewards (TRL GRPOTrainer; LoRA or full), length-bias control and monitors.

What it does: prompts mixed from several sources with weights (`data.sources`, e.g. TELL ME A
STORY-style and WritingPrompts-style), checked by content hash not to overlap the held-out
prompts or the RM's data (`data.no_overlap_with`), and filtered to ranges the completion cap can
reach (`data.fit_to_cap`); several rewards with weights (`reward.specs`: bt, genrm, remote,
length_range, overlong; see rlcw.rewards.factory); TRL's reward scaling, KL coefficient and loss
type; vLLM rollouts (`train.use_vllm`, colocate or server) where vLLM is installed. Logged per
step beyond TRL's own metrics: KL to the starting model (even at beta=0: one extra forward with
the LoRA adapter disabled, `train.log_kl_to_start`), entropy (TRL), reward and length per prompt
source, reward-hacking monitors (`monitor.*`, rlcw.rl.monitors: warn, and stop with the reason in
summary.json), the top and bottom scored stories (`samples/train_step_XXXXXX.jsonl`) and the
sampled prompt order (`samples/data_order.jsonl`). Every `eval.every_steps` rank 0 samples
held-out prompts and runs the evaluators (`eval.evaluators`, rlcw.rl.evaluation registry).
Checkpoints every `train.save_steps`; `train.resume=true` continues from the newest complete one
(model, optimizer, scheduler, RNG and data order restored). What it does not do: PPO (`rlcw ppo`).

Agents' Room rollouts (`agents.variant=e2e|plan|write|plan_write`; default none = one plain
completion per prompt): each rewarded story is written by that variant with the policy playing the
agents (rlcw.agents.rl). The trained sequence is one agent's call (`agents.train_agent`, or `cycle`:
the variant's writers in turn, one per step); every reward scores the whole story (RM and
length_range see the story, overlong counts the trained call's tokens against its cap). With
`agents.policy_plays=all` the policy is the writing agents' shared base (each agent's call uses
the same weights); with `train_agent` (LoRA only) just that agent's calls use the adapter, so the
adapter becomes that one agent's. Per-agent token caps are `agents.caps.*`; the trained call's cap
replaces `train.max_completion_length`, and held-out samples are written by the variant too (its
caps, not `eval.max_new_tokens`). Not with vLLM. Cost (embedded model, 4 completions a step,
1 thread on a busy 2-core CPU, so pessimistic): plan_write with caps 32/64 took ~122 s a step
(~230-word stories) against ~22 s for plain GRPO with a 64-token cap and ~63 s with a 320-token
cap: 9 sequential agent calls re-read a growing scratchpad; the backward pass is still one call.

    rlcw grpo --config configs/grpo/cpu.yaml reward.rm_path=runs/train_rm/model
    rlcw grpo --config configs/grpo/cpu.yaml train.resume=true      # after a crash or kill
    rlcw grpo --config configs/grpo/agents_room_cpu.yaml            # Agents' Room rollouts
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlcw.agents.variants import AgentCaps
from rlcw.data.prompts import find_overlap, load_prompts, mix_sources
from rlcw.data.records import write_stories
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, chat_messages
from rlcw.io import append_jsonl, atomic_write_json, read_table
from rlcw.models import BASE_FILE, load_causal_lm, load_tokenizer, save_lora_checkpoint
from rlcw.recipes.common import LoraSection, ModelConfig, MonitorSection, lora_config, stage_run, tensorboard_dir
from rlcw.rewards.bt import message_text
from rlcw.rewards.factory import build_rewards as build_reward_funcs
from rlcw.rewards.length import range_fits_cap
from rlcw.rl.callbacks import JsonlMetricsCallback
from rlcw.rl.evaluation import build_evaluators
from rlcw.rl.monitors import PREFIX, MonitorCallback, plot_monitors, step_stats
from rlcw.rl.periodic import PeriodicEvalCallback, story_sampler
from rlcw.rl.probe import LearningProbe, ProbeSection, probe_texts


@dataclass
class PromptDataConfig:
    prompts: str = "bundled"  # "bundled" or a jsonl/csv/parquet file of prompt rows (default for every source)
    train_split: str | None = "train"
    eval_split: str | None = "eval"
    eval_prompts: str | None = None  # held-out prompt file; None = data.prompts at eval_split
    max_train_prompts: int | None = None  # size of the (mixed) training set; None = every row once
    # name -> {prompts: file (default data.prompts), style: tmas|wp (keep only that style), weight: float}
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    fit_to_cap: str = "warn"  # filter | error | warn | ignore: prompts whose max_words cannot fit the completion cap
    tokens_per_word: float = 1.4
    no_overlap_with: list[str] = field(default_factory=list)  # files (RM pairs, other prompts) RL must not train on


@dataclass
class RewardSection:
    rm_path: str = "runs/train_rm/model"  # default RM folder of bt/genrm specs and the `rm` evaluator
    rm_batch_size: int = 16
    # name -> spec ({type: bt|genrm|remote|length_range|overlong, weight, ...options}); weight 0 drops one
    specs: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "rm": {"type": "bt", "weight": 1.0},
            "length_range": {"type": "length_range", "weight": 1.0, "clip": 2.0},
        }
    )
    aggregation: str = "sum_then_normalize"  # or normalize_then_sum (TRL multi_objective_aggregation)


@dataclass
class GRPOTrainSection:
    learning_rate: float = 1e-5
    lr_scheduler_type: str = "linear"  # any transformers SchedulerType: constant_with_warmup, cosine, ...
    warmup_steps: float = 0.0  # steps; a value below 1 is a ratio of max_steps (transformers 5)
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    epsilon: float = 0.2  # PPO-style clip range of the importance ratio (TRL `epsilon`)
    epsilon_high: float | None = None  # upper clip (DAPO: 0.28); None = epsilon
    max_steps: int = 20
    batch_size: int = 8  # completions per step per device (multiple of num_generations)
    gradient_accumulation_steps: int = 1
    num_generations: int = 4
    num_iterations: int = 1
    max_completion_length: int = 96
    temperature: float = 0.9
    top_p: float = 1.0
    top_k: int = 0  # 0 = the whole vocabulary (transformers would otherwise default to 50)
    beta: float = 0.0  # KL coefficient in the loss
    loss_type: str = "dapo"
    scale_rewards: str = "group"  # group | batch | none
    mask_truncated_completions: bool = False
    logging_steps: int = 1
    save_steps: int = 0  # 0 = only the final adapter (then a killed run cannot resume)
    save_total_limit: int | None = 2
    resume: bool = False
    log_kl_to_start: bool = True  # two extra no-grad forwards (policy, adapter disabled) on the logged steps
    log_kl_every: int = 1  # KL to the start every N steps (~23% of a quickstart step each time; monitors wait for it)
    samples_every: int = 1  # top/bottom scored stories every N steps (0 = never)
    samples_k: int = 2
    use_vllm: bool = False
    fast_rollout: bool = False  # rlcw.rl.rollout: merged-LoRA copy + shared prompt cache (~1.2x TRL's rollout on CPU)
    rollout_precision: str = "fp32"  # fp32 | bf16: the fast rollout's weight copy (bf16: ~1.7x faster decode on AMX/AVX512-BF16 CPUs; loss stays fp32)
    vllm_mode: str = "colocate"  # colocate | server
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = 0.3
    # DeepSpeed JSON, e.g. configs/deepspeed/zero2.json (launch with torchrun; see slurm/README.md)
    deepspeed: str | None = None


@dataclass
class EvalSection:
    every_steps: int = 10  # 0 disables periodic evaluation
    num_prompts: int = 8
    max_new_tokens: int = 96
    temperature: float = 0.8
    batch_size: int = 8
    evaluators: dict[str, dict[str, Any]] = field(default_factory=lambda: {"rm": {}, "length": {}, "repetition": {}})


@dataclass
class AgentsRLSection:
    variant: str | None = None  # None: plain generation; e2e | plan | write | plan_write: Agents' Room rollouts
    train_agent: str = "climax"  # the agent whose call is the trained sequence; cycle: the variant's writers in turn
    # all: policy = every agent (shared base); train_agent: only that agent uses the LoRA adapter
    policy_plays: str = "all"
    caps: AgentCaps = field(
        default_factory=AgentCaps
    )  # new-token caps per agent kind (planning, writing, finalizer, e2e)
    # prompt + scratchpad + new tokens must fit this (the scratchpad is shortened otherwise)
    context_tokens: int = 2048


@dataclass
class GRPORecipeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: PromptDataConfig = field(default_factory=PromptDataConfig)
    reward: RewardSection = field(default_factory=RewardSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: GRPOTrainSection = field(default_factory=GRPOTrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    agents: AgentsRLSection = field(default_factory=AgentsRLSection)
    probe: ProbeSection = field(default_factory=ProbeSection)  # rlcw.rl.probe: log-prob change on held-out texts
    output_dir: str = "runs"
    run_name: str = "grpo"
    seed: int = 0


# ---------------------------------------------------------------- prompts


def _fit(rows: list[dict], cap: int, cfg: PromptDataConfig, what: str) -> list[dict]:
    bad = [r for r in rows if not range_fits_cap(r.get("max_words"), cap, cfg.tokens_per_word)]
    if cfg.fit_to_cap not in ("filter", "error", "warn", "ignore"):
        raise RlcwError(
            f"data.fit_to_cap={cfg.fit_to_cap!r} is not a mode",
            where="data.fit_to_cap",
            hint="one of filter, error, warn, ignore",
        )
    if not bad or cfg.fit_to_cap == "ignore":
        return rows
    msg = (
        f"{len(bad)} of {len(rows)} {what} prompts ask for more words than {cap} tokens hold "
        f"(e.g. '{bad[0]['id']}': up to {bad[0]['max_words']} words at {cfg.tokens_per_word} tokens/word)"
    )
    if cfg.fit_to_cap == "error":
        raise RlcwError(
            msg,
            where="data.fit_to_cap",
            hint="raise the completion cap, pick shorter prompts, or data.fit_to_cap=filter",
        )
    if cfg.fit_to_cap == "warn":
        print(f"[rlcw] warning: {msg}; every such completion gets the same length penalty", flush=True)
        return rows
    kept = [r for r in rows if r not in bad]
    if not kept:
        raise RlcwError(
            msg + ": none left", where="data.fit_to_cap", hint="raise the completion cap or use shorter prompts"
        )
    return kept


def train_prompts(cfg: GRPORecipeConfig) -> list[dict]:
    """The mixed training prompt rows (`source` = the data.sources name)."""
    d = cfg.data
    if not d.sources:
        rows = _fit(load_prompts(d.prompts, d.train_split), story_cap(cfg), d, "training")
        return rows[: d.max_train_prompts or None]
    pools, weights = {}, {}
    for name, spec in d.sources.items():
        unknown = set(spec) - {"prompts", "style", "weight", "split"}
        if unknown:
            raise RlcwError(
                f"unknown option '{sorted(unknown)[0]}'",
                where=f"data.sources.{name}",
                hint="options: prompts, style, weight, split",
            )
        rows = load_prompts(spec.get("prompts", d.prompts), spec.get("split", d.train_split))
        if spec.get("style"):
            rows = [r for r in rows if r["style"] == spec["style"]]
        rows = _fit(rows, story_cap(cfg), d, f"'{name}'")
        if not rows:
            raise RlcwError(f"no prompts of style '{spec.get('style')}'", where=f"data.sources.{name}")
        pools[name] = [dict(r, source=name) for r in rows]
        weights[name] = float(spec.get("weight", 1.0))
    total = d.max_train_prompts or sum(len(p) for p in pools.values())
    return mix_sources(pools, weights, total, cfg.seed)


def eval_prompts(cfg: GRPORecipeConfig) -> list[dict]:
    rows = load_prompts(cfg.data.eval_prompts or cfg.data.prompts, cfg.data.eval_split)
    return _fit(rows, story_cap(cfg) if cfg.agents.variant else cfg.eval.max_new_tokens, cfg.data, "held-out")


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


def build_dataset(rows: list[dict], system_prompt: str):
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": chat_messages(system_prompt, r["prompt"]),
                "min_words": r["min_words"],
                "max_words": r["max_words"],
                "prompt_id": r["id"],
                "source": r["source"],
            }
            for r in rows
        ]
    )


# ---------------------------------------------------------------- rewards, args, trainer


def build_rewards(cfg: GRPORecipeConfig) -> tuple[list, list[float]]:
    defaults = {
        "rm_path": cfg.reward.rm_path,
        "num_generations": cfg.train.num_generations,
        "seed": cfg.seed,
        "max_tokens": completion_cap(cfg),
        "batch_size": cfg.reward.rm_batch_size,
    }
    return build_reward_funcs(cfg.reward.specs, defaults)


# ---------------------------------------------------------------- Agents' Room rollouts


def completion_cap(cfg: GRPORecipeConfig) -> int:
    """Token cap of the trained sequence: train.max_completion_length, or the trained agent's cap."""
    if not cfg.agents.variant:
        return cfg.train.max_completion_length
    from rlcw.agents.rl import trained_agents

    return max(cfg.agents.caps.for_agent(a) for a in trained_agents(cfg.agents.variant, cfg.agents.train_agent))


def story_cap(cfg: GRPORecipeConfig) -> int:
    """Most new tokens of a rewarded story (prompts asking for more words than it holds are fitted out)."""
    if not cfg.agents.variant:
        return cfg.train.max_completion_length
    from rlcw.agents.rl import story_tokens

    return story_tokens(cfg.agents.variant, cfg.agents.caps)


def check_agents(cfg: GRPORecipeConfig) -> None:
    """Reject agents settings that cannot work together, before anything slow loads."""
    a = cfg.agents
    if not a.variant:
        return
    from rlcw.agents.rl import POLICY_PLAYS, trained_agents

    trained_agents(a.variant, a.train_agent)  # unknown variant or agent -> RlcwError
    if a.policy_plays not in POLICY_PLAYS:
        raise RlcwError(
            f"unknown agents.policy_plays '{a.policy_plays}'",
            where="agents.policy_plays",
            hint=f"one of {', '.join(POLICY_PLAYS)}",
        )
    if a.policy_plays == "train_agent" and not cfg.lora.enabled:
        raise RlcwError(
            "agents.policy_plays=train_agent trains one agent's LoRA adapter, but lora.enabled=false",
            where="agents.policy_plays",
            hint="lora.enabled=true, or agents.policy_plays=all (the shared base)",
        )
    if a.policy_plays == "train_agent" and a.train_agent == "cycle":
        raise RlcwError(
            "agents.policy_plays=train_agent trains one agent's adapter; train_agent=cycle trains several",
            where="agents.train_agent",
            hint="name one agent, or agents.policy_plays=all to cycle over the shared base",
        )
    if cfg.train.use_vllm:
        raise RlcwError(
            "Agents' Room rollouts run on the trainer's own model, not vLLM",
            where="agents.variant",
            hint="train.use_vllm=false, or agents.variant=null for plain vLLM rollouts",
        )
    bad = [k for k in ("planning", "writing", "finalizer", "e2e") if getattr(a.caps, k) < 1]
    if bad or a.context_tokens < 1:
        raise RlcwError(
            f"agents.caps.{bad[0]} must be at least 1" if bad else "agents.context_tokens must be at least 1",
            where="agents",
        )


def agents_rollout(cfg: GRPORecipeConfig, tokenizer):
    from rlcw.agents.rl import make_rollout_func

    a, t = cfg.agents, cfg.train
    return make_rollout_func(
        tokenizer,
        variant=a.variant,
        train_agent=a.train_agent,
        caps=a.caps,
        context_tokens=a.context_tokens,
        system_prompt=cfg.model.system_prompt,
        temperature=t.temperature,
        top_p=t.top_p,
        batch_size=t.batch_size,
        policy_plays=a.policy_plays,
        seed=cfg.seed,
    )


def check_fast_rollout(cfg: GRPORecipeConfig) -> None:
    t = cfg.train
    if t.rollout_precision not in ("fp32", "bf16"):
        raise RlcwError(
            f"unknown train.rollout_precision {t.rollout_precision!r}",
            where="train.rollout_precision",
            hint="fp32 or bf16",
        )
    if t.rollout_precision != "fp32" and not t.fast_rollout:
        raise RlcwError(
            "train.rollout_precision applies to the fast rollout only",
            where="train.rollout_precision",
            hint="add train.fast_rollout=true, or leave train.rollout_precision=fp32",
        )
    if not t.fast_rollout:
        return
    clash = (
        "agents.variant"
        if cfg.agents.variant
        else "train.use_vllm"
        if t.use_vllm
        else "train.deepspeed (ZeRO-3)"
        if t.deepspeed and "zero3" in Path(t.deepspeed).name
        else None
    )
    if clash:
        raise RlcwError(
            f"train.fast_rollout cannot be combined with {clash}",
            where="train.fast_rollout",
            hint="train.fast_rollout=false (the fast sampler needs whole weights and plain rollouts)",
        )


def check_vllm(t: GRPOTrainSection) -> None:
    if not t.use_vllm:
        return
    if importlib.util.find_spec("vllm") is None:
        raise RlcwError(
            "train.use_vllm=true but vLLM is not installed",
            where="train.use_vllm",
            hint="pip install vllm (GPU hosts), or train.use_vllm=false to generate with transformers",
        )
    if t.vllm_mode not in ("colocate", "server"):
        raise RlcwError(f"unknown vllm_mode '{t.vllm_mode}'", where="train.vllm_mode", hint="colocate or server")


def build_args(cfg: GRPORecipeConfig, run, weights: list[float]):
    from trl import GRPOConfig

    t = cfg.train
    if t.batch_size % t.num_generations:
        raise RlcwError(
            f"train.batch_size={t.batch_size} must be a multiple of train.num_generations={t.num_generations}"
        )
    check_vllm(t)
    vllm = (
        {
            "use_vllm": True,
            "vllm_mode": t.vllm_mode,
            "vllm_gpu_memory_utilization": t.vllm_gpu_memory_utilization,
            "vllm_server_base_url": t.vllm_server_base_url,
        }
        if t.use_vllm
        else {}
    )
    return GRPOConfig(
        output_dir=str(run.checkpoints),
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type,
        warmup_steps=t.warmup_steps,
        max_grad_norm=t.max_grad_norm,
        weight_decay=t.weight_decay,
        epsilon=t.epsilon,
        epsilon_high=t.epsilon_high,
        per_device_train_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_generations=t.num_generations,
        num_iterations=t.num_iterations,
        max_completion_length=completion_cap(cfg),
        temperature=t.temperature,
        top_p=t.top_p,
        top_k=t.top_k,
        beta=t.beta,
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        mask_truncated_completions=t.mask_truncated_completions,
        reward_weights=weights,
        multi_objective_aggregation=cfg.reward.aggregation,
        logging_steps=t.logging_steps,
        save_strategy="steps" if t.save_steps else "no",
        save_steps=t.save_steps or 500,
        save_total_limit=t.save_total_limit,
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=not torch.cuda.is_available(),
        report_to=["tensorboard"],
        seed=cfg.seed,
        data_seed=cfg.seed,
        disable_tqdm=False,
        log_completions=False,
        remove_unused_columns=False,
        deepspeed=t.deepspeed,
        **vllm,
    )


def last_complete_checkpoint(folder: Path) -> Path:
    """Newest `checkpoint-N` with its trainer_state.json (written last, so a SIGKILL mid-save is skipped)."""
    done = [
        p
        for p in folder.glob("checkpoint-*")
        if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    if not done:
        raise RlcwError(
            "train.resume=true but there is no complete checkpoint",
            where=str(folder),
            hint="checkpoints are written every train.save_steps (0 = never); start without train.resume",
        )
    return max(done, key=lambda p: int(p.name.split("-")[-1]))


class StepLogger:
    """Per-step extras computed from a generated batch: KL to the start, per-source reward/length,
    monitor statistics, top/bottom samples and the data order. Called by the trainer below."""

    def __init__(self, cfg: GRPORecipeConfig, run):
        self.cfg, self.run = cfg, run
        self.ref_model = None  # a frozen copy, only for full fine-tuning with beta=0

    def kl_to_start(self, trainer, output) -> tuple[float, float]:
        """(k3, k1) KL estimates per completion token, policy vs the starting model, on the sampled tokens."""
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)  # (B, P+C)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        keep = output["completion_ids"].size(1)
        with torch.no_grad():
            logp = output.get("old_per_token_logps")
            if logp is None:
                logp = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)[0]  # (B, C)
            ref = output.get("ref_per_token_logps")
            if ref is None:
                ref = self._ref_logps(trainer, ids, mask, keep)
        cmask = output["completion_mask"].float()
        delta = ref - logp
        k3 = ((torch.exp(delta) - delta - 1) * cmask).sum()
        k1 = (-delta * cmask).sum()
        sums = trainer.accelerator.gather(torch.stack([k3, k1, cmask.sum()]).view(1, 3)).sum(0)
        return (sums[0] / sums[2].clamp(min=1)).item(), (sums[1] / sums[2].clamp(min=1)).item()

    def _ref_logps(self, trainer, ids, mask, keep):
        model = trainer.accelerator.unwrap_model(trainer.model)
        if hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                return trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)[0]
        if self.ref_model is None:
            from trl.trainer.grpo_trainer import add_fused_lm_head

            self.ref_model = load_causal_lm(self.cfg.model.name, self.cfg.model.dtype).to(ids.device).eval()
            self.ref_model.requires_grad_(False)
            # TRL's log-prob helper reads `log_probs` from a fused LM head, as it patches its own ref model
            add_fused_lm_head(
                self.ref_model, temperature=trainer.temperature, cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32
            )
        return trainer._get_per_token_logps_and_entropies(self.ref_model, ids, mask, keep)[0]

    def __call__(self, trainer, inputs: list[dict], output: dict, rewards_per_func: torch.Tensor) -> None:
        from accelerate.utils import gather_object

        step = trainer.state.global_step + 1  # the step this batch trains
        tok = trainer.processing_class
        comp = output["completion_ids"]  # (B, C), padded after the EOS
        is_end = (comp == tok.eos_token_id) | ((comp == tok.pad_token_id) if tok.pad_token_id is not None else False)
        finished = is_end.any(1)
        lengths = torch.where(
            finished, is_end.int().argmax(1) + 1, torch.full_like(finished, comp.size(1), dtype=torch.long)
        )
        texts = [tok.decode(c[:n], skip_special_tokens=True) for c, n in zip(comp, lengths.tolist(), strict=False)]
        # Agents' Room: the rewarded text is the whole story; tokens/truncated stay the trained agent's call
        local = [
            {
                "text": x.get("story", t).strip(),
                "tokens": int(n),
                "truncated": not bool(f),
                "prompt": message_text(x["prompt"]),
                "prompt_id": x["prompt_id"],
                "source": x["source"],
                "min_words": x.get("min_words"),
                "max_words": x.get("max_words"),
                **({"agents_room": dict(x["agents_room"], trained_text=t.strip())} if "agents_room" in x else {}),
            }
            for t, n, f, x in zip(texts, lengths.tolist(), finished.tolist(), inputs, strict=False)
        ]
        rows = gather_object(local)
        weights = trainer.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights.unsqueeze(0)).nansum(1).tolist()
        for r, value, per in zip(rows, total, rewards_per_func.tolist(), strict=False):
            r["reward"], r["rewards"] = value, dict(zip(trainer.reward_func_names, per, strict=False))
        metrics: dict[str, float] = {}
        if self.cfg.monitor.enabled:
            stats = step_stats(
                [r["text"] for r in rows],
                [r["tokens"] for r in rows],
                [r["truncated"] for r in rows],
                total,
                trainer.num_generations,
                self.cfg.monitor.ngram,
            )
            metrics.update({PREFIX + k: v for k, v in stats.items()})
        every = max(1, self.cfg.train.log_kl_every)
        if self.cfg.train.log_kl_to_start and (step % every == 0 or step == 1):
            k3, k1 = self.kl_to_start(trainer, output)
            metrics[PREFIX + "kl_to_start"], metrics["kl_to_start/k1"] = k3, k1
        metrics.update(per_source(rows))
        for key, value in metrics.items():
            trainer._metrics["train"][key].append(value)
        if trainer.accelerator.is_main_process:
            append_jsonl(
                self.run.samples / "data_order.jsonl", {"step": step, "prompt_ids": [r["prompt_id"] for r in rows]}
            )
            every = self.cfg.train.samples_every
            if every and step % every == 0:
                write_stories(
                    self.run.samples / f"train_step_{step:06d}.jsonl", top_bottom(rows, self.cfg.train.samples_k, step)
                )


def per_source(rows: list[dict]) -> dict[str, float]:
    """Mean total reward, words and tokens per prompt source: `source/<name>/{reward,words,tokens}`."""
    out = {}
    for name in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == name]
        out[f"source/{name}/reward"] = sum(r["reward"] for r in mine) / len(mine)
        out[f"source/{name}/words"] = sum(len(r["text"].split()) for r in mine) / len(mine)
        out[f"source/{name}/tokens"] = sum(r["tokens"] for r in mine) / len(mine)
    return out


def top_bottom(rows: list[dict], k: int, step: int) -> list[dict]:
    """The k highest and k lowest total-reward completions as story records (meta: reward, rank)."""
    order = sorted(range(len(rows)), key=lambda i: rows[i]["reward"], reverse=True)
    picks = [(i, "top") for i in order[:k]] + [(i, "bottom") for i in order[::-1][:k] if i not in order[:k]]
    out = []
    for i, rank in picks:
        r = rows[i]
        rec = {
            "id": f"{r['prompt_id']}#{i}",
            "prompt": r["prompt"],
            "story": r["text"] or "(empty)",
            "system": f"policy@{step}",
            "step": step,
            "source": r["source"],
            "meta": {
                "rank": rank,
                "reward": r["reward"],
                "rewards": r["rewards"],
                "tokens": r["tokens"],
                "truncated": r["truncated"],
            },
        }
        if r.get("agents_room"):
            rec["meta"]["agents_room"] = r["agents_room"]
        rec.update({k2: r[k2] for k2 in ("min_words", "max_words") if r.get(k2) is not None})
        out.append(rec)
    return out


def trainer_class():
    """GRPOTrainer with rlcw's per-step extras (defined lazily: importing trl is slow)."""
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    class EpochRepeatSampler(RepeatSampler):
        """TRL's sampler reseeded per epoch (seed + epoch): its own generator otherwise runs on across
        epochs, so a run resumed in a later epoch would draw a different prompt order."""

        epoch = 0

        def set_epoch(self, epoch: int) -> None:  # called by accelerate's DataLoaderShard.set_epoch
            self.epoch = epoch

        def __iter__(self):
            if self.seed is not None:
                self.generator.manual_seed(self.seed + self.epoch)
            return super().__iter__()

    class RlcwGRPOTrainer(GRPOTrainer):
        step_logger: StepLogger | None = None

        def _get_train_sampler(self, dataset=None):
            return EpochRepeatSampler(
                data_source=dataset if dataset is not None else self.train_dataset,
                mini_repeat_count=self.num_generations,
                batch_size=self.args.generation_batch_size // self.num_generations,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
                shuffle=self.shuffle_dataset,
                seed=self.args.seed,
            )

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            self._rlcw_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return self._rlcw_rewards

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            if self.step_logger is not None and self.model.training:
                self.step_logger(self, inputs, output, self._rlcw_rewards)
            return output

    return RlcwGRPOTrainer


def build_sampler(cfg: GRPORecipeConfig, tokenizer, eval_rows: list[dict]):
    e = cfg.eval

    if cfg.agents.variant:  # held-out stories written the way the training ones are
        from rlcw.agents.rl import PolicyBackend, trained_agents
        from rlcw.agents.variants import run_variant

        a = cfg.agents

        def sample_agents(model, step: int) -> list[dict]:
            backend = PolicyBackend(
                model,
                tokenizer,
                cfg.model.system_prompt,
                record=trained_agents(a.variant, a.train_agent)[0],
                policy_plays=a.policy_plays,
                temperature=e.temperature,
                batch_size=e.batch_size,
            )
            recs = run_variant(
                eval_rows,
                backend,
                a.variant,
                a.caps,
                context_tokens=a.context_tokens,
                seed=cfg.seed,
                system_name=f"{cfg.run_name}@{step}",
            )
            return [dict(r, step=step) for r in recs]

        return sample_agents

    return story_sampler(
        tokenizer,
        eval_rows,
        system_prompt=cfg.model.system_prompt,
        run_name=cfg.run_name,
        max_new_tokens=e.max_new_tokens,
        temperature=e.temperature,
        batch_size=e.batch_size,
        seed=cfg.seed,
    )


def main(cfg: GRPORecipeConfig) -> dict:
    with stage_run(cfg, "grpo") as run:
        check_agents(cfg)
        check_fast_rollout(cfg)
        train_rows = train_prompts(cfg)
        held_out = eval_prompts(cfg)
        check_overlap(train_rows, held_out, cfg.data.no_overlap_with)
        eval_rows = held_out[: cfg.eval.num_prompts]
        tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        funcs, weights = build_rewards(cfg)  # before the policy loads: a bad reward spec fails fast
        model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        args = build_args(cfg, run, weights)
        tensorboard_dir(run)
        scorer = next(
            (f for f in funcs if type(f).__name__ == "BTScorer" and str(f.rm_dir) == str(Path(cfg.reward.rm_path))),
            None,
        )
        extra = {}
        if cfg.train.fast_rollout:
            from rlcw.rl.rollout import make_fast_rollout_func

            extra = {"rollout_func": make_fast_rollout_func(cfg.train.rollout_precision)}
        if cfg.agents.variant:
            from rlcw.agents.rl import story_reward

            funcs, extra = [story_reward(f) for f in funcs], {"rollout_func": agents_rollout(cfg, tokenizer)}
        evaluators = build_evaluators(
            cfg.eval.evaluators,
            {"rm_path": cfg.reward.rm_path, "run_dir": run.path, "seed": cfg.seed, "scorer": scorer},
        )
        periodic = PeriodicEvalCallback(
            run, build_sampler(cfg, tokenizer, eval_rows), evaluators, cfg.eval.every_steps
        )
        monitor = MonitorCallback(cfg.monitor.warn, cfg.monitor.stop, cfg.monitor.patience, cfg.monitor.min_steps, run)
        p = cfg.probe
        probe = LearningProbe(
            tokenizer,
            probe_texts(p.texts, p.num_texts, p.max_words) if p.every_steps else [],
            cfg.model.system_prompt,
            p.every_steps,
            run.path / "probe.jsonl",
        )
        trainer = trainer_class()(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=build_dataset(train_rows, cfg.model.system_prompt),
            processing_class=tokenizer,
            peft_config=lora_config(cfg.lora, "CAUSAL_LM", model.config.num_hidden_layers)
            if cfg.lora.enabled
            else None,
            callbacks=[monitor, JsonlMetricsCallback(run), periodic, probe],
            **extra,
        )
        trainer.step_logger = StepLogger(cfg, run)
        resume = str(last_complete_checkpoint(run.checkpoints)) if cfg.train.resume else None
        trainer.train(resume_from_checkpoint=resume)
        final = run.checkpoints / "final"
        from transformers.integrations import is_deepspeed_zero3_enabled

        zero3 = is_deepspeed_zero3_enabled()
        if zero3:  # ZeRO-3 shards the weights: every rank joins the gather inside save_model
            trainer.save_model(str(final))
        if not trainer.accelerator.is_main_process:  # only rank 0 saves, plots and reports
            return run.write_summary("completed", {"train/steps": float(trainer.state.global_step)})
        if zero3:
            if cfg.lora.enabled:
                atomic_write_json(final / BASE_FILE, {"base": cfg.model.name})
        elif cfg.lora.enabled:
            save_lora_checkpoint(trainer.model, tokenizer, final, cfg.model.name)
        else:
            trainer.model.save_pretrained(final)
            tokenizer.save_pretrained(final)
        metrics = {"train/steps": float(trainer.state.global_step), "monitor/alerts": float(len(monitor.alerts))}
        if periodic.history:
            metrics.update({k: v for k, v in periodic.history[-1].items() if k != "step"})
        if probe.history:
            metrics.update({k: v for k, v in probe.history[-1].items() if k != "step"})
        plots = _plots(run)
        artifacts = {
            "policy": final,
            "samples": run.samples,
            "metrics": run.path / "metrics.jsonl",
            **{p.stem: p for p in plots},
        }
        run.write_report(_report(cfg, metrics, periodic.history, monitor, plots))
        if monitor.stop_reason:
            return run.write_summary("failed", metrics, artifacts, error=monitor.stop_reason)
        return run.write_summary("completed", metrics, artifacts)


def _plots(run) -> list[Path]:
    from rlcw.report import plot_lines, read_metrics, series

    rows = read_metrics(run.path / "metrics.jsonl")
    sources = sorted({k.split("/")[1] for r in rows for k in r if k.startswith("source/")})
    rewards = {k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean")}
    reward_plot = plot_lines(
        [
            (
                "reward per step",
                {"total": series(rows, "reward"), **{k.split("/")[1]: series(rows, k) for k in sorted(rewards)}},
            ),
            ("reward per prompt source", {s: series(rows, f"source/{s}/reward") for s in sources}),
            ("words per prompt source", {s: series(rows, f"source/{s}/words") for s in sources}),
            (
                "held-out RM score",
                {"policy": series(rows, "eval/rm/score"), "baseline": series(rows, "eval/rm/baseline_score")},
            ),
        ],
        run.path / "plots" / "reward.png",
    )
    from rlcw.rl.probe import plot_probe, read_probe

    probe = read_probe(run.path / "probe.jsonl")
    extra = [plot_probe(probe, run.path / "plots" / "probe.png")] if probe else []
    return [reward_plot, plot_monitors(rows, run.path / "plots" / "monitors.png"), *extra]


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) and not math.isnan(v) else str(v)


def _report(
    cfg: GRPORecipeConfig, metrics: dict, history: list[dict], monitor: MonitorCallback, plots: list[Path]
) -> str:
    specs = ", ".join(
        f"{name} ({s.get('type')}, weight {s.get('weight', 1.0)})" for name, s in cfg.reward.specs.items()
    )
    lines = [
        f"# GRPO run `{cfg.run_name}`",
        "",
        f"- policy start: `{cfg.model.name}`",
        f"- rewards: {specs}; default RM `{cfg.reward.rm_path}`",
        f"- steps: {int(metrics['train/steps'])}; beta {cfg.train.beta}, loss {cfg.train.loss_type}, scale_rewards {cfg.train.scale_rewards}",
        "",
    ]
    if monitor.stop_reason:
        lines += [f"**Stopped early:** {monitor.stop_reason}", ""]
    if "probe/abs_logp_change" in metrics:
        from rlcw.rl.probe import MIN_MOVE

        size = metrics["probe/abs_logp_change"]
        verdict = "**the policy did not move**" if size < MIN_MOVE else "the policy moved"
        lines += [
            f"Learning probe: mean |log-prob change| on held-out texts {size:.4f} nats/token: {verdict} "
            f"(threshold {MIN_MOVE}).",
            "",
        ]
    lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    if monitor.alerts:
        lines += (
            ["## Monitor alerts", ""]
            + [f"- step {a['step']} ({a['level']}): {a['message']}" for a in monitor.alerts[:30]]
            + [""]
        )
    if history:
        keys = [k for k in history[0] if k != "step"]
        lines += ["## Held-out evaluation", "", "| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        lines += [
            "| " + " | ".join([str(h["step"])] + [_fmt(h.get(k, float("nan"))) for k in keys]) + " |" for h in history
        ]
    return "\n".join(lines) + "\n"
