"""`rlcw plan`: check a training config for a world size and print its geometry and memory, no GPU, no weights.

    rlcw plan --config configs/grpo/litbench_2node.yaml world_size=16
    rlcw plan --config my.yaml --command train-rm world_size=8 plan.global_batch=128
    rlcw plan --config configs/grpo/litbench_1node.yaml plan.model_config=/models/Llama-3.2-3B-Instruct

The recipe is the config's folder (`configs/<command>/...`, `train_rm` -> `train-rm`) unless
`--command` names it. Keys: `world_size=N` (default 8) and `plan.*` (below) are the plan's own;
every other `key=value` overrides the recipe config, which loads strictly as the recipe would.
It runs the recipe's validation (`validate_recipe`), then prints prompts, completions and tokens
per optimizer step and steps per epoch of the given data when countable (rlcw.cluster.geometry),
and per-GPU memory of weights, gradients and optimizer state by ZeRO stage, with DeepSpeed's own
estimate beside it and the vLLM share in colocate mode (rlcw.cluster.memory). Model shapes come
from `plan.model_config`, else the model folder's or the hub cache's config.json. Activations,
KV cache needs and the CUDA context are not estimated: keep headroom. Exit status 2 on an error.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from rlcw.cluster import geometry as G
from rlcw.cluster import memory as M
from rlcw.config import at_least, load_config
from rlcw.errors import RlcwError

# command -> (module, config class); the recipes `rlcw plan` knows how to plan.
PLANNABLE = {
    "grpo": ("rlcw.recipes.grpo", "GRPORecipeConfig"),
    "ppo": ("rlcw.recipes.ppo", "PPORecipeConfig"),
    "train-rm": ("rlcw.recipes.train_rm", "TrainRMConfig"),
}


@dataclass
class PlanOptions:
    world_size: int = at_least(1, 8)
    gpus_per_node: int = at_least(1, 8)
    gpu_memory_gib: float = 80.0  # H100 80 GB; 48 for the LitBench paper's A40s
    model_config: str | None = None  # config.json (or folder) of the trained model's shapes
    rm_model_config: str | None = None  # config.json of a colocated reward model (bt/genrm specs)
    global_batch: int | None = None  # reward models: the effective batch the run must have (LitBench: 128)
    precision: str = "auto"  # auto (train.bf16 or model.dtype bfloat16/float16 -> mixed, else fp32) | mixed | fp32


@dataclass
class Plan:
    command: str
    geometry: G.Geometry
    stage: int
    states: dict[int, M.StateMemory]  # ZeRO stage -> per-GPU model states
    deepspeed_bytes: int | None
    extras: dict[str, int]  # other per-GPU residents (vLLM share, reward model, reference copy)
    params: int
    trainable: int
    lines: list[str]
    units: tuple[str, str] = ("prompts", "completions")  # what a step counts: (items, sequences)
    notes: tuple[str, ...] = ()  # what validation could not check here


def command_for(config_file: str | None, command: str | None) -> str:
    """The recipe to plan: `--command`, else the config's folder name."""
    name = command or (Path(config_file).parent.name.replace("_", "-") if config_file else None)
    if name not in PLANNABLE:
        raise RlcwError(
            f"cannot tell which recipe to plan{f' (got {name!r})' if name else ''}",
            where=config_file,
            hint=f"--command {' | '.join(PLANNABLE)}, or keep the config under configs/<command>/",
        )
    return name


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(plan's own overrides without the `plan.` prefix, the recipe's)."""
    mine, theirs = [], []
    for item in overrides:
        key = item.split("=", 1)[0]
        if key == "world_size" or key.startswith("plan."):
            mine.append(item.removeprefix("plan."))
        else:
            theirs.append(item)
    return mine, theirs


def validate_recipe(command: str, cfg) -> list[str]:
    """Run the recipe's own `validate(cfg)` (no weights load) plus the checks only a plan can make without
    building anything: reward specs without constructing them, ZeRO-3 for train-rm. Returns notes on what
    was not checked here (vLLM's presence is a launch-time check of the machine, not of the config)."""
    module = importlib.import_module(PLANNABLE[command][0])
    module.validate(cfg)
    notes = []
    if command in ("grpo", "ppo"):
        check_reward_specs(cfg.reward.specs, cfg.reward.rm_path)
    if command == "grpo" and cfg.rollout.kind == "vllm" and importlib.util.find_spec("vllm") is None:
        notes.append("vLLM is not installed here: its presence is checked at launch")
    if command == "train-rm" and zero_stage(cfg.train.deepspeed) == 3:
        raise RlcwError(
            "train-rm does not support ZeRO-3 (the final LoRA merge needs whole weights)",
            where="train.deepspeed",
            hint="configs/deepspeed/zero2.json",
        )
    return notes


def check_reward_specs(specs: dict, rm_path: str) -> None:
    """Reward types and options as rlcw.rewards.factory checks them, without constructing (no weights)."""
    from rlcw.rewards import factory

    for name, spec in specs.items():
        where = f"reward.specs.{name}"
        if not isinstance(spec, dict) or spec.get("type") not in factory.REWARD_TYPES:
            raise RlcwError(
                f"unknown reward type {spec.get('type') if isinstance(spec, dict) else spec!r}",
                where=where,
                hint=f"known types: {', '.join(factory.REWARD_TYPES)}",
            )
        factory._options(spec["type"], spec, {"rm_path": rm_path}, where)
        factory.constrain_options(spec, factory.spec_weight(spec, where), where)


def zero_stage(deepspeed: str | None) -> int:
    """The ZeRO stage of a DeepSpeed JSON (0 = no DeepSpeed: plain DDP)."""
    if not deepspeed:
        return 0
    path = Path(deepspeed)
    if not path.is_file():
        raise RlcwError("DeepSpeed config not found", where=deepspeed, hint="e.g. configs/deepspeed/zero3.json")
    return int(json.loads(path.read_text()).get("zero_optimization", {}).get("stage", 0))


def model_shape(name: str, override: str | None, key: str) -> M.ModelShape:
    if override:
        return M.load_shape(override)
    found = M.find_config(name)
    if found is None:
        raise RlcwError(
            f"no config.json for '{name}' here (not a local folder, not in the hub cache)",
            where=key,
            hint=f"download it once (huggingface-cli download {name} config.json), or plan.model_config=PATH "
            "(tests/assets/model_shapes/ has the shipped configs' models)",
        )
    return M.load_shape(found)


def precision_of(dtype: str, option: str, bf16: bool = False) -> str:
    """`plan.precision`, with auto read from the recipe: `train.bf16` or a 16-bit `model.dtype` -> mixed."""
    if option != "auto":
        return option
    return "mixed" if bf16 or dtype in ("bfloat16", "bf16", "float16", "fp16") else "fp32"


def plan_precision(cfg, opts: PlanOptions) -> str:
    return precision_of(cfg.model.dtype, opts.precision, getattr(cfg.train, "bf16", False))


def precision_note(cfg, precision: str) -> list[str]:
    """What the plan says about a mixed-precision plan whose recipe does not turn on `train.bf16`."""
    if precision != "mixed" or getattr(cfg.train, "bf16", False):
        return []
    return [
        f"figures assume bf16 mixed precision as DeepSpeed counts it, but train.bf16 is off (model.dtype="
        f"{cfg.model.dtype}): set train.bf16=true for that run, or plan.precision=fp32 to plan an fp32 one"
    ]


def trainable_params(shape: M.ModelShape, lora, head: str = "lm") -> int:
    if not lora.enabled:
        return shape.params(head)
    modules = M.LINEAR_MODULES if lora.target_modules == "all-linear" else tuple(lora.target_modules.split(","))
    return shape.lora_params(lora.r, tuple(m.strip() for m in modules), lora.top_layers) + (
        shape.hidden if head == "score" else 0
    )


def count_rows(path: str, cap: int | None) -> tuple[int | None, str]:
    """Rows of a local jsonl/csv/parquet (capped), or None and why not."""
    if not Path(path).is_file():
        return None, f"not countable: {path} is not a local file here"
    from rlcw.io import read_table

    n = sum(1 for _ in read_table(path))
    return (min(n, cap) if cap else n), path


def _states(shape, trainable, world, precision, head) -> dict[int, M.StateMemory]:
    total = shape.params(head)
    return {s: M.model_states(total, trainable, world, s, precision, shape.largest_layer()) for s in (0, 1, 2, 3)}


def plan_grpo(cfg, opts: PlanOptions) -> Plan:
    t = cfg.train
    from rlcw.recipes import grpo

    rollout = grpo.rollout_seam(cfg)
    try:
        rows, counted = grpo.train_prompts(cfg, rollout), "training prompts"
    except RlcwError as exc:
        rows, counted = None, f"not countable: {str(exc).splitlines()[0]}"
    geo = G.grpo_geometry(
        opts.world_size,
        t.batch_size,
        t.num_generations,
        t.gradient_accumulation_steps,
        t.num_iterations,
        rollout.completion_cap,
        len(rows) if rows is not None else None,
    )
    shape = model_shape(cfg.model.name, opts.model_config, "model.name")
    precision, stage = (
        plan_precision(cfg, opts),
        zero_stage(t.deepspeed),
    )
    if stage == 3 and cfg.eval.every_steps > 0:  # measured on 2 CPU ranks: the step-0 baseline hangs
        raise RlcwError(
            "periodic evaluation samples on rank 0 only, which hangs under ZeRO-3 (a sharded forward needs every rank)",
            where="eval.every_steps",
            hint="eval.every_steps=0 and evaluate checkpoints afterwards (rlcw generate + rlcw judge), or ZeRO-2",
        )
    trainable = trainable_params(shape, cfg.lora)
    extras = {}
    vllm = cfg.rollout.vllm
    if cfg.rollout.kind == "vllm" and vllm.mode == "colocate":
        share = M.vllm_share(int(opts.gpu_memory_gib * M.GIB), vllm.gpu_memory_utilization, shape.params())
        if share.kv_cache <= 0:
            raise RlcwError(
                f"vLLM's share ({M.gib(share.reserved)}) cannot hold the policy's weights ({M.gib(share.weights)})",
                where="rollout.vllm.gpu_memory_utilization",
                hint=f"at least {share.weights / (opts.gpu_memory_gib * M.GIB) + 0.05:.2f}, or rollout.vllm.mode=server",
            )
        extras[
            f"vLLM colocate ({vllm.gpu_memory_utilization:.0%}: weights {M.gib(share.weights)}, KV {M.gib(share.kv_cache)})"
        ] = share.reserved
    weight_bytes = 2 if precision == "mixed" else 4
    if not cfg.lora.enabled and t.beta > 0:
        extras["reference model (TRL, beta > 0)"] = (
            weight_bytes * shape.params() // (opts.world_size if stage == 3 else 1)
        )
    elif not cfg.lora.enabled and t.log_kl_every:
        extras["reference copy for kl_to_start (rlcw, unsharded)"] = weight_bytes * shape.params()
    extras.update(colocated_rms(cfg.reward.specs, cfg.reward.rm_path, opts.rm_model_config))
    lines = [f"data: {counted}" if rows is None else f"training prompts: {len(rows)}"]
    return _finish("grpo", geo, stage, shape, trainable, precision, extras, opts, lines, "lm")


def colocated_rms(specs: dict, default_path: str, override: str | None) -> dict[str, int]:
    """Per-GPU bytes of reward models loaded on every rank (bt/genrm specs; `remote` ones cost nothing here)."""
    out = {}
    for name, spec in specs.items():
        if spec.get("type") not in ("bt", "genrm") or not spec.get("weight", 1.0):
            continue
        path = spec.get("rm_path", default_path)
        found = override or M.find_config(path)
        if found is None:
            out[f"reward '{name}' ({path})"] = 0
            continue
        shape = M.load_shape(found)
        # train-rm saves fp32 weights and BTScorer/GenRMScorer load them as saved
        out[f"reward '{name}' ({spec['type']}, fp32 weights on every rank)"] = 4 * shape.params(
            "score" if spec["type"] == "bt" else "lm"
        )
    return out


def plan_ppo(cfg, opts: PlanOptions) -> Plan:
    t = cfg.train
    n, counted = None, ""
    try:
        from rlcw.data.prompts import load_prompts

        rows = load_prompts(cfg.data.prompts, cfg.data.train_split)
        n = min(len(rows), cfg.data.max_train_prompts or len(rows))
    except RlcwError as exc:
        counted = f"not countable: {str(exc).splitlines()[0]}"
    geo = G.ppo_geometry(
        opts.world_size, t.batch_size, t.minibatch_size, t.micro_batch_size, t.ppo_epochs, t.max_new_tokens, n
    )
    shape = model_shape(cfg.model.name, opts.model_config, "model.name")
    precision = plan_precision(cfg, opts)
    extras = colocated_rms(cfg.reward.specs, cfg.reward.rm_path, opts.rm_model_config)
    value_path = cfg.value.path or (cfg.reward.rm_path if cfg.value.init == "rm" else cfg.model.name)
    found = (opts.rm_model_config if cfg.value.init == "rm" else None) or M.find_config(value_path)
    if found or cfg.value.init == "policy":
        v = M.load_shape(found) if found else shape
        vt = trainable_params(v, cfg.value.lora, "score") if cfg.value.backbone == "lora" else v.hidden
        extras["value model (fp32 weights, AdamW on its LoRA + head)"] = 4 * v.params("score") + 16 * vt
    else:
        extras[f"value model ({value_path})"] = 0
    lines = [f"data: {counted}"] if n is None else [f"training prompts: {n}"]
    return _finish("ppo", geo, 0, shape, trainable_params(shape, cfg.lora), precision, extras, opts, lines, "lm")


def plan_train_rm(cfg, opts: PlanOptions) -> Plan:
    t = cfg.train
    n, why = count_rows(cfg.data.train_file, cfg.data.max_train_pairs)
    per_pair = 2  # BT: chosen + rejected sequences; GenRM: both orders of the pair
    geo = G.rm_geometry(opts.world_size, t.batch_size, t.grad_accum, cfg.rm.max_length, per_pair, n, opts.global_batch)
    shape = model_shape(cfg.model.name, opts.model_config, "model.name")
    head = "score" if cfg.rm.type == "bt" else "lm"
    precision = plan_precision(cfg, opts)
    lines = [f"pairs: {n} ({why})" if n is not None else f"data: {why}"]
    units = ("pairs", "sequences (chosen + rejected)")
    if cfg.rm.type == "genrm":  # an example is one order of a pair: one sequence holding both stories
        lines.append("GenRM: every pair is trained in both orders, so an epoch is 2 x pairs examples")
        units = ("examples (one order of a pair)", "sequences")
        geo = G.rm_geometry(
            opts.world_size, t.batch_size, t.grad_accum, cfg.rm.max_length, 1, 2 * n if n else None, opts.global_batch
        )
    if geo.steps_per_epoch:
        lines.append(f"train.max_steps={t.max_steps} = {t.max_steps / geo.steps_per_epoch:.2f} epochs")
    plan = _finish(
        "train-rm",
        geo,
        zero_stage(t.deepspeed),
        shape,
        trainable_params(shape, cfg.lora, head),
        precision,
        {},
        opts,
        lines,
        head,
    )
    return dataclasses.replace(plan, units=units)


def _finish(command, geo, stage, shape, trainable, precision, extras, opts, lines, head) -> Plan:
    states = _states(shape, trainable, opts.world_size, precision, head)
    nodes = G.check_world(opts.world_size, opts.gpus_per_node)
    full = trainable == shape.params(head) and precision == "mixed"
    ds = (
        M.deepspeed_estimate(
            shape.params(head), shape.largest_layer(), min(opts.world_size, opts.gpus_per_node), nodes, stage
        )
        if full
        else None
    )
    return Plan(command, geo, stage, states, ds, extras, shape.params(head), trainable, lines)


def render(plan: Plan, opts: PlanOptions, precision: str) -> str:
    g = plan.geometry
    unit, seqs = plan.units
    out = [
        f"rlcw plan: {plan.command}, world_size={g.world} ({G.check_world(g.world, opts.gpus_per_node)} node(s) x "
        f"{min(g.world, opts.gpus_per_node)} GPUs), {opts.gpu_memory_gib:g} GiB per GPU",
        "",
        "batch per optimizer step:",
        f"  {unit}: {g.prompts}",
        f"  {seqs}: {g.sequences} ({g.micro_batch} per GPU per micro-batch)",
        f"  tokens: <= {g.max_tokens:,} ({'sequence' if plan.command == 'train-rm' else 'completion'} tokens at the cap)",
        f"  steps per epoch: {g.steps_per_epoch if g.steps_per_epoch is not None else 'not countable'}",
    ]
    out += [f"  {line}" for line in plan.lines + ([g.note] if g.note else [])]
    out += [
        "",
        f"model: {plan.params:,} parameters, {plan.trainable:,} trained; {precision} precision",
        "model states per GPU by ZeRO stage (weights + gradients + optimizer [+ gathered layer]):",
    ]
    for s, m in plan.states.items():
        mark = "  <- this config" if s == plan.stage else ""
        gathered = f" + {M.gib(m.gathered)}" if m.gathered else ""
        out.append(
            f"  ZeRO-{s}: {M.gib(m.weights)} + {M.gib(m.gradients)} + {M.gib(m.optimizer)}{gathered} = {M.gib(m.total)}{mark}"
        )
    if plan.deepspeed_bytes is not None:
        mine = plan.states[plan.stage].total
        out.append(
            f"  DeepSpeed's estimator (ZeRO-{plan.stage}, no offload): {M.gib(plan.deepspeed_bytes)} "
            f"(plan/DeepSpeed = {mine / plan.deepspeed_bytes:.3f})"
        )
    if plan.extras:
        out.append("also on every GPU:")
        unknown = "size unknown: no config.json there (plan.rm_model_config=PATH)"
        out += [f"  {name}: {M.gib(b) if b else unknown}" for name, b in plan.extras.items()]
    total = plan.states[plan.stage].total + sum(plan.extras.values())
    left = opts.gpu_memory_gib * M.GIB - total
    out.append(f"total before activations: {M.gib(total)}; left for activations and the CUDA context: {M.gib(left)}")
    if left < 0:
        out.append("WARNING: the model states alone do not fit; use a higher ZeRO stage, LoRA, or more GPUs")
    return "\n".join(out)


def step_line(command: str, cfg, world: int) -> str:
    """One line of a recipe's batch per optimizer step on `world` processes (`rlcw <command> --check`)."""
    t = cfg.train
    if command == "grpo":
        from rlcw.recipes import grpo

        cap = grpo.rollout_seam(cfg).completion_cap
        geo = G.grpo_geometry(
            world, t.batch_size, t.num_generations, t.gradient_accumulation_steps, t.num_iterations, cap
        )
    elif command == "ppo":
        geo = G.ppo_geometry(world, t.batch_size, t.minibatch_size, t.micro_batch_size, t.ppo_epochs, t.max_new_tokens)
    else:
        geo = G.rm_geometry(world, t.batch_size, t.grad_accum, cfg.rm.max_length, 2 if cfg.rm.type == "bt" else 1)
    items, seqs = ("pairs", "sequences") if command == "train-rm" else ("prompts", "completions")
    return (
        f"plan: {t.max_steps} steps of {geo.prompts} {items} / {geo.sequences} {seqs} "
        f"(<= {geo.max_tokens:,} tokens) on {world} process(es); `rlcw plan` for memory per GPU"
    )


def make_plan(command: str, cfg, opts: PlanOptions) -> Plan:
    """The plan of a loaded recipe config (the recipe's validation first)."""
    notes = validate_recipe(command, cfg)
    plan = {"grpo": plan_grpo, "ppo": plan_ppo, "train-rm": plan_train_rm}[command](cfg, opts)
    precision = plan_precision(cfg, opts)
    return dataclasses.replace(plan, notes=tuple(notes) + tuple(precision_note(cfg, precision)))


def cli(argv: list[str]) -> int:
    from rlcw.argv import split_args

    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    command = None
    if "--command" in argv:
        i = argv.index("--command")
        if i + 1 >= len(argv):
            raise RlcwError("--command needs a recipe name", hint=" | ".join(PLANNABLE))
        command, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    config, overrides = split_args(argv)
    mine, theirs = split_overrides(overrides)
    opts = load_config(PlanOptions, None, mine)
    G.check_world(opts.world_size, opts.gpus_per_node)  # a wrong world size fails before anything else
    command = command_for(config, command)
    module, cls = PLANNABLE[command]
    cfg = load_config(getattr(importlib.import_module(module), cls), config, theirs)
    plan = make_plan(command, cfg, opts)
    print(render(plan, opts, plan_precision(cfg, opts)))
    for note in plan.notes:
        print(f"note: {note}")
    return 0
