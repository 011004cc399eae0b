"""The outcome study's stages: which recipe runs with which settings (`wire`, `proxy_stage`, `seeded`), the runs and
their proxies, the checks of the study's own keys, and the RM table's proxy rows. Functions here take the study's
config (`rlcw.recipes.outcome.OutcomeConfig`) or its sections: they are the study's stage definitions."""

from __future__ import annotations

import copy

from rlcw.config import assign
from rlcw.errors import RlcwError
from rlcw.measure.monitors import validate_rules
from rlcw.outcome.monitors import MEASURED
from rlcw.outcome.report import StudySetup
from rlcw.rewards.anchored import default_references
from rlcw.sampling import DRAWS

GRPO_RUNS = ("grpo", "grpo_lc", "grpo_ens", "grpo_odin", "grpo_par", "grpo_kl", "grpo_default", "grpo_refs")
TRAINED = (*GRPO_RUNS, "ppo", "dpo")
RUNS = (*TRAINED, "best_of_n")
# grpo_ens needs an ensemble proxy (proxy_ensembles), grpo_odin a two-head one (proxy_length_heads)
DEFAULT_RUNS = ("grpo", "grpo_lc", "ppo", "dpo", "best_of_n")
# configs/grpo/cpu.yaml's monitor.warn: the thresholds the lead-time table tests by default
SHIPPED_WARN = {
    "max_cap_share": 0.95,
    "max_rep_intra": 0.15,
    "min_distinct_group": 0.6,
    "max_reward_length_corr": 0.8,
    "max_kl_to_start": 0.5,
    "max_slop": 15.0,
}
GOLD_REWARDS = (
    "It was trained to tell TELL ME A STORY's human-written stories from the start model's own stories for the "
    "same prompts, both cut to the same length: it rewards text that reads like those human writers' rather "
    "than the start model's, which is not the same as a better story for a reader."
)


STAGE_NAMES = ("gold_pairs", "gold_rm", "gold2_pairs", "gold2_rm", "proxy_rm", *GRPO_RUNS, "ppo", "dpo")


def wire(cfg, root: str) -> None:
    """Point every stage at the shared model, seed and this study's folder, and chain their files.

    Every key set here is derived: setting one yourself (YAML or command line) to another value is an
    error naming it (`rlcw.config.assign`), never a silent reset. Each proxy's train-rm config is a copy of
    `proxy_rm` with its own run name and `data.max_train_pairs` (`proxy_stage`)."""

    def put(key: str, value) -> None:
        assign(cfg, key, value)

    for name in STAGE_NAMES:
        put(f"{name}.output_dir", root), put(f"{name}.seed", cfg.seed)
        if name != "proxy_rm":
            put(f"{name}.run_name", name)
    section = type(cfg.model)  # the model section: stages get copies, the RMs the name and dtype alone
    base = section(**vars(cfg.model))
    halves = cfg.gold2.enabled  # each gold on its own half of the prompts
    for gold, half in (("gold", "half_a"), ("gold2", "half_b")):
        put(f"{gold}_pairs.data.kind", "human_vs_model")
        put(
            f"{gold}_pairs.data.stories",
            f"{root}/gold_samples/" + (f"halves/{half}.jsonl" if halves else "stories.jsonl"),
        )
        put(f"{gold}_rm.model", section(name=cfg.model.name, dtype=cfg.model.dtype))
        put(f"{gold}_rm.data.train_file", f"{root}/{gold}_pairs/pairs/train.jsonl")
        put(f"{gold}_rm.data.eval_file", f"{root}/{gold}_pairs/pairs/eval.jsonl")
    default_references(cfg.grpo_par.reward.specs, f"{root}/proxy_data/samples.jsonl")  # PAR on the start's stories
    put("proxy_rm.model", section(name=cfg.model.name, dtype=cfg.model.dtype))
    put("proxy_rm.data.train_file", f"{root}/proxy_data/pairs/train.jsonl")
    put("proxy_rm.data.eval_file", f"{root}/proxy_data/pairs/eval.jsonl")
    for rl in (*GRPO_RUNS, "ppo"):
        put(f"{rl}.model", base), put(f"{rl}.reward.rm_path", f"{root}/proxy_rm_{run_proxy(cfg, rl)}/model")
        put(f"{rl}.data.prompts", cfg.data.prompts), put(f"{rl}.data.train_split", cfg.data.rl_split)
        put(f"{rl}.eval.every_steps", 0)  # the study measures every checkpoint itself
    put("dpo.model", base), put("dpo.eval.every_steps", 0)
    put("dpo.data.train_file", f"{root}/dpo_pairs/pairs/train.jsonl")
    put("dpo.data.eval_file", f"{root}/dpo_pairs/pairs/eval.jsonl")


def run_proxy(cfg, run: str) -> str:
    """The proxy a trained run optimises: `ens_proxy` for grpo_ens, `odin_proxy` for grpo_odin, `rl_proxy` for
    the others."""
    return {"grpo_ens": cfg.ens_proxy, "grpo_odin": cfg.odin_proxy}.get(arm_of(cfg, run)[0], cfg.rl_proxy)


def proxy_stage(cfg, name: str):
    """The train-rm config of proxy `name`: `proxy_rm` with run name proxy_rm_<name> and its pair budget
    (and `rm.ensemble.size` when `proxy_ensembles` names it, `rm.length_head` when `proxy_length_heads` does)."""
    out = copy.deepcopy(cfg.proxy_rm)
    out.run_name, out.data.max_train_pairs = f"proxy_rm_{name}", cfg.proxies[name]
    out.rm.ensemble.size = cfg.proxy_ensembles.get(name, out.rm.ensemble.size)
    out.rm.length_head = out.rm.length_head or name in cfg.proxy_length_heads
    return out


def seeded(cfg, run: str, seed: int):
    """Trained run `run` (after `wire`) with another seed, in its own folder <run>_seed<k>."""
    out = copy.deepcopy(getattr(cfg, run))
    out.run_name, out.seed = f"{run}_seed{seed}", seed
    return out


def seed_runs(cfg) -> dict[str, tuple[str, int]]:
    """<run>_seed<k> -> (run, k) for every extra seed of `seeds`, in training order."""
    return {f"{r}_seed{k}": (r, k) for r, ks in cfg.seeds.items() for k in ks}


def trained_runs(cfg) -> list[str]:
    """Every trained run's name, in training order: `runs`, then each run's extra seeds."""
    return [r for r in cfg.runs if r in TRAINED] + list(seed_runs(cfg))


def arm_of(cfg, name: str) -> tuple[str, int]:
    """(the run a trained run belongs to, its seed): (grpo, seed) for grpo, (grpo, 1) for grpo_seed1, ..."""
    return seed_runs(cfg).get(name) or (name, getattr(cfg, name).seed)


def check(ok: bool, message: str, where: str, hint: str | None = None) -> None:
    if not ok:
        raise RlcwError(message, where=where, hint=hint)


def check_study_keys(cfg) -> None:
    """The study's own keys: runs, proxies, best-of-n sizes, sample counts and batch sizes."""
    unknown = sorted(set(cfg.runs) - set(RUNS))
    check(not unknown, f"unknown run(s) {unknown}", "runs", f"choose from {', '.join(RUNS)}")
    for name, n in cfg.proxies.items():
        ok = isinstance(n, int) and not isinstance(n, bool) and n >= 0
        check(ok, f"proxy {name!r} needs >= 1 training pair (0 drops it), got {n!r}", f"proxies.{name}")
    # 0 pairs drops a proxy: a config file's mapping adds to the defaults' (small, large), so this is how it leaves one out
    cfg.proxies = {name: n for name, n in cfg.proxies.items() if n != 0}
    check(bool(cfg.proxies), "no proxy to train", "proxies", "e.g. proxies={small: 80, large: 640}")
    check(cfg.rl_proxy in cfg.proxies, f"{cfg.rl_proxy!r} is not a proxy", "rl_proxy", f"one of {list(cfg.proxies)}")
    for name, k in cfg.proxy_ensembles.items():
        check(name in cfg.proxies, f"{name!r} is not a proxy", f"proxy_ensembles.{name}", "add it to proxies")
        check(isinstance(k, int) and k >= 2, f"an ensemble needs >= 2 members, got {k!r}", f"proxy_ensembles.{name}")
    for name in cfg.proxy_length_heads:
        check(name in cfg.proxies, f"{name!r} is not a proxy", "proxy_length_heads", "add it to proxies")
    special = (
        (
            "grpo_ens",
            "ens_proxy",
            cfg.proxy_ensembles,
            "an ensemble",
            '"proxies={small: 80, large: 640, ens: 640}" "proxy_ensembles={ens: 4}"',
        ),
        (
            "grpo_odin",
            "odin_proxy",
            cfg.proxy_length_heads,
            "a two-head",
            '"proxies={small: 80, large: 640, odin: 640}" "proxy_length_heads=[odin]"',
        ),
    )
    for run, key, kinds, kind, example in special:  # a run against a special proxy needs that proxy to be one
        if run in cfg.runs:
            proxy = getattr(cfg, key)
            check(proxy in kinds, f"{run} optimises {proxy!r}, which is not {kind} proxy", key, f"e.g. {example}")
    for run, seeds in cfg.seeds.items():
        where = f"seeds.{run}"
        ok = not seeds or (run in cfg.runs and run in TRAINED)  # an empty list asks for nothing
        check(ok, f"{run!r} is not a trained run of `runs`", where, f"runs: {cfg.runs}")
        ok = all(isinstance(k, int) for k in seeds) and len(set(seeds)) == len(seeds) and cfg.seed not in seeds
        check(ok, f"seeds must be distinct integers other than seed={cfg.seed}, got {seeds}", where)
    check(all(d > 0 for d in cfg.measure.matched_d), "every d must be > 0", "measure.matched_d", "e.g. [2, 4, 6]")
    check(cfg.measure.residual_bins >= 1, "must be >= 1", "measure.residual_bins")
    check(
        not cfg.gold2.enabled or not cfg.gold.rm_path,
        "a second gold is trained on half of TELL ME A STORY, which a given gold.rm_path does not use",
        "gold2.enabled",
        "set gold2.enabled=false, or leave gold.rm_path empty",
    )
    validate_rules({k: v for k, v in cfg.monitor_rules.items() if k.partition("_")[2] != MEASURED}, "monitor_rules")
    for label in cfg.ensemble_bon_aggregates:
        parse_aggregate(label)
    sizes, m, d = cfg.best_of_n.sizes, cfg.measure, cfg.proxy_data
    check(bool(sizes) and all(isinstance(k, int) and k >= 1 for k in sizes), f"bad sizes {sizes}", "best_of_n.sizes")
    pool = max(sizes)
    check(pool >= 2, "a pool of 1 sample per prompt has no pairs", "best_of_n.sizes", "e.g. [1, 2, 4, 8, 16, 32]")
    for key, value in (
        ("measure.samples_per_prompt", m.samples_per_prompt),
        ("measure.batch_size", m.batch_size),
        ("measure.kl_batch_size", m.kl_batch_size),
        ("gold.batch_size", cfg.gold.batch_size),
        ("gold.samples_per_prompt", cfg.gold.samples_per_prompt),
    ):
        check(value >= 1, f"must be >= 1, got {value}", key)
    check(
        m.samples_per_prompt <= pool,
        f"{m.samples_per_prompt} start samples per prompt but the pool holds {pool}",
        "measure.samples_per_prompt",
        "the start's samples are the first of the best-of-n pool: raise max(best_of_n.sizes) or lower this",
    )
    check(m.draw in DRAWS, f"unknown draw {m.draw!r}", "measure.draw", " or ".join(DRAWS))
    check(d.samples_per_prompt >= 2, "pairs need >= 2 samples per prompt", "proxy_data.samples_per_prompt")
    check(0 < d.eval_fraction < 1, f"must be between 0 and 1, got {d.eval_fraction}", "proxy_data.eval_fraction")
    check(d.label_temperature >= 0, f"must be >= 0, got {d.label_temperature}", "proxy_data.label_temperature")


def parse_aggregate(label: str) -> tuple[str, float]:
    """'mean' | 'wco' | 'uwo:<lambda>' -> (aggregate, lambda); anything else is an error naming the key."""
    from rlcw.rm.aggregate import AGGREGATES

    how, _, lam = str(label).partition(":")
    try:
        value = float(lam) if lam else 0.0
    except ValueError:
        value = -1.0
    ok = how in AGGREGATES and value >= 0 and (how == "uwo" or not lam)
    check(ok, f"bad aggregate {label!r}", "ensemble_bon_aggregates", "mean, wco or uwo:<lambda >= 0>, e.g. uwo:1")
    return how, value


def monitor_proxy(cfg) -> str | None:
    """The ensemble proxy whose disagreement is measured on every checkpoint (`ens_proxy`, else the first)."""
    if not cfg.proxy_ensembles:
        return None
    return cfg.ens_proxy if cfg.ens_proxy in cfg.proxy_ensembles else next(iter(cfg.proxy_ensembles))


def study_setup(cfg, rows: list[dict], junk_floor: dict[str, float] | None = None) -> StudySetup:
    """What the report states about the gold, the prompts and the sampling; `junk_floor`: the screen's floors."""
    given = cfg.gold.rm_path
    return StudySetup(
        policy=cfg.model.name,
        gold=f"the RM `{given}` (given by gold.rm_path)" if given else "a BT reward model trained here (`gold_rm/`)",
        gold_rewards="What it rewards is what its own training data rewarded; this study does not check it."
        if given
        else GOLD_REWARDS,
        prompts=len(rows),
        samples_per_prompt=cfg.measure.samples_per_prompt,
        pool=max(cfg.best_of_n.sizes),
        max_new_tokens=cfg.measure.max_new_tokens,
        rl_proxy=f"proxy_{cfg.rl_proxy}",
        junk_floor=junk_floor,
    )


def proxy_rows(cfg, done: dict[str, dict], labels: dict) -> list[dict]:
    """The RM table's proxy rows: each proxy's role, pairs and accuracy on its eval pairs (`done`: each proxy's
    train-rm summary; `labels`: proxy_data's labels.json)."""
    rows = []
    for name, n in cfg.proxies.items():
        m = done[name]["metrics"]
        acc, n_eval = m.get("eval/accuracy", float("nan")), m.get("eval/pairs", 0)
        note = f"accuracy on its eval pairs (sampled gold labels, held-out RL prompts): {acc:.3f} ({n_eval:.0f} pairs)"
        if n > labels["train_pairs"]:
            note += f"; asked for {n} pairs, {labels['train_pairs']} exist"
        role = "proxy" + (" (RL, DPO)" if name == cfg.rl_proxy else "") + ", best-of-n"
        if name in cfg.proxy_ensembles:
            role = f"ensemble of {cfg.proxy_ensembles[name]} ({cfg.proxy_rm.rm.ensemble.aggregate}): " + role
            role += " (grpo_ens)" if name == cfg.ens_proxy and "grpo_ens" in cfg.runs else ""
        if name in cfg.proxy_length_heads:
            role = "two-head (ODIN), quality head: " + role
            role += " (grpo_odin)" if name == cfg.odin_proxy and "grpo_odin" in cfg.runs else ""
        rows.append(
            {
                "rm": f"proxy_{name}",
                "role": role,
                "train_pairs": min(n, labels["train_pairs"]),
                "label_noise": labels["label_noise"],
                "note": note,
            }
        )
    return rows
