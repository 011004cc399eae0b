"""The outcome study's own cached steps (`rlcw.pipelines.stages.Stages.cached`): the start model's samples for the
golds and the proxies, the best-of-n pool and every scorer's scores of it, DPO's pairs, and every checkpoint's
measurement; `Study` holds the models and scorers they share. Functions here take the study's config or its
sections (they are its stage definitions)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rlcw.data.prompts import load_prompts
from rlcw.data.records import write_preferences, write_stories
from rlcw.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from rlcw.outcome.measure import add_kl, add_scores, checkpoints_of, load_gold_scorer, sample_stories
from rlcw.outcome.pairs import labelled_pairs, split_by_prompt
from rlcw.pipelines.outcome_stages import check, run_proxy
from rlcw.pipelines.stages import Stages


def trained_at(run_dir: Path) -> float | None:
    """When the stage in `run_dir` started (its summary.json), or None: what a score made with its model depends on."""
    summary = run_dir / "summary.json"
    return json.loads(summary.read_text()).get("started_at") if summary.is_file() else None


class Study:
    """The models and scorers the study's own steps share, loaded once on first use."""

    def __init__(self, root: Path, model, measure, given_gold: str | None, second_gold: bool, proxies: list[str]):
        """`model` and `measure` are the study's sections; `given_gold` is gold.rm_path (None: trained here)."""
        self.root, self.model, self.measure, self.given_gold = root, model, measure, given_gold
        self.second_gold, self.proxies = second_gold, list(proxies)
        self._start, self._tok, self.scorers = None, None, {}

    @property
    def start(self):
        if self._start is None:
            from rlcw.models import load_causal_lm

            self._start = load_causal_lm(self.model.name, self.model.dtype)
        return self._start

    @property
    def tokenizer(self):
        if self._tok is None:
            from rlcw.models import load_tokenizer

            self._tok = load_tokenizer(self.model.name, padding_side="left")
        return self._tok

    def gold_path(self) -> str:
        return self.given_gold or str(self.root / "gold_rm" / "model")

    def golds(self) -> list[str]:
        """The scorers that measure: gold, and gold2 when the second gold is on."""
        return ["gold", "gold2"] if self.second_gold else ["gold"]

    def scorer(self, name: str):
        """The scorer called `name`: gold, gold2, or proxy_<name> (raw: a length-control fit shapes only grpo_lc's
        reward)."""
        if name not in self.scorers:
            if name == "gold":
                self.scorers[name] = load_gold_scorer(self.gold_path())
            elif name == "gold2":
                self.scorers[name] = load_gold_scorer(str(self.root / "gold2_rm" / "model"))
            else:
                from rlcw.rm.scoring import load_rm

                self.scorers[name] = load_rm(self.root / f"proxy_rm_{name[6:]}" / "model", length_control=False)
        return self.scorers[name]

    def sample(
        self, model, rows: list[dict], n: int, max_new_tokens: int, batch_size: int | None = None, logps: bool = False
    ) -> list[dict]:
        return sample_stories(
            model,
            self.tokenizer,
            rows,
            n_samples=n,
            max_new_tokens=max_new_tokens,
            seed=self.measure.seed,
            system_prompt=self.model.system_prompt,
            batch_size=batch_size or self.measure.batch_size,
            keep_logps=logps,
            draw=self.measure.draw,
        )

    def identity(self) -> dict:
        """What every score depends on: the gold and each proxy's training run."""
        gold = self.given_gold or trained_at(self.root / "gold_rm")
        golds = {"gold2": trained_at(self.root / "gold2_rm")} if self.second_gold else {}
        return {"gold": gold, **golds, **{p: trained_at(self.root / f"proxy_rm_{p}") for p in self.proxies}}


def study_rows(cfg) -> list[dict]:
    rows = load_prompts(cfg.data.prompts, cfg.data.study_split)[: cfg.data.max_study_prompts or None]
    check(len(rows) >= 2, f"{len(rows)} held-out prompts: the split-half test needs >= 2", "data.study_split")
    return rows


def gold_samples_step(cfg, st: Stages, study: Study) -> None:
    """The start model's stories for the default gold's TELL ME A STORY prompts (`gold_samples/`), and each half's
    when `gold2.enabled` (`gold_samples/halves/`)."""
    from rlcw.data.tmas import load_tmas, prompt_rows

    g, root = cfg.gold, study.root
    rows = prompt_rows(load_tmas(cfg.data.tmas, cfg.data.tmas_splits))[: g.max_prompts or None]
    key = {"model": asdict(cfg.model), "gold": asdict(g), "prompts": [r["id"] for r in rows], "seed": cfg.measure.seed}
    key.update(draw_key(cfg))

    def write(folder: Path) -> None:
        recs = study.sample(study.start, rows, g.samples_per_prompt, g.max_new_tokens, batch_size=g.batch_size)
        write_stories(folder / "stories.jsonl", [_story(r) for r in recs])

    st.cached("gold_samples", root / "gold_samples", key, write)
    if cfg.gold2.enabled:
        st.cached("gold_samples", root / "gold_samples" / "halves", {"samples": key, "seed": cfg.seed}, split_halves)


def split_halves(folder: Path) -> None:
    """gold_samples/halves/half_a.jsonl and half_b.jsonl: the start's TMAS stories of each half of the prompts (a seeded
    hash of the prompt ids, `split_prompts`); the first gold trains on half a, the second on half b."""
    from rlcw.metrics.overopt import split_prompts

    stories = read_jsonl(folder.parent / "stories.jsonl")

    def prompt_id(r: dict) -> str:  # ids are <prompt id>#<sample index>
        return r["id"].rsplit("#", 1)[0]

    first = set(split_prompts([prompt_id(r) for r in stories], seed=0)[0])
    write_stories(folder / "half_a.jsonl", [r for r in stories if prompt_id(r) in first])
    write_stories(folder / "half_b.jsonl", [r for r in stories if prompt_id(r) not in first])


def _story(rec: dict) -> dict:
    """A sampled record as a plain story record (the token ids stay in the study's own files)."""
    return {k: v for k, v in rec.items() if k not in ("prompt_ids", "completion_ids")}


def _scored(records: list[dict], study: Study, names: list[str]) -> list[dict]:
    return add_scores(records, {n: study.scorer(n) for n in names})


def proxy_data_step(cfg, st: Stages, study: Study, study_prompts: list[dict]) -> dict:
    """Gold-labelled pairs of the start's samples for the RL prompts (`proxy_data/`), every proxy's training data;
    returns their labels' summary (`labels.json`)."""
    root, d = study.root, cfg.proxy_data
    rl_rows = load_prompts(cfg.data.prompts, cfg.data.rl_split)[: d.max_prompts or None]
    check(len(rl_rows) >= 2, f"{len(rl_rows)} RL prompts: proxy pairs need >= 2", "data.rl_split")
    shared = sorted({r["prompt"] for r in rl_rows} & {r["prompt"] for r in study_prompts})
    check(not shared, f"{len(shared)} held-out prompts are also RL prompts, e.g. {shared[:1]}", "data.study_split")
    key = {"model": asdict(cfg.model), "data": asdict(d), "prompts": [r["id"] for r in rl_rows], **draw_key(cfg)}
    key.update(gold=study.identity()["gold"], seed=cfg.seed)

    def write_pairs(folder: Path) -> None:
        recs = _scored(study.sample(study.start, rl_rows, d.samples_per_prompt, d.max_new_tokens), study, ["gold"])
        atomic_write_jsonl(folder / "samples.jsonl", recs)
        pairs, info = labelled_pairs(
            recs,
            "gold",
            k=d.samples_per_prompt,
            per_prompt=d.pairs_per_prompt,
            temperature=d.label_temperature,
            seed=cfg.seed,
        )
        train, held = split_by_prompt(pairs, d.eval_fraction, cfg.seed)
        check(bool(train) and bool(held), "proxy pairs need both a train and an eval side", "proxy_data.eval_fraction")
        write_preferences(folder / "pairs" / "train.jsonl", train)
        write_preferences(folder / "pairs" / "eval.jsonl", held)
        atomic_write_json(folder / "labels.json", {**asdict(info), "train_pairs": len(train), "eval_pairs": len(held)})

    st.cached("proxy_data", root / "proxy_data", key, write_pairs)
    return json.loads((root / "proxy_data" / "labels.json").read_text())


def draw_key(cfg) -> dict:
    """The sampler's draw in a cached step's key when it is not the multinomial default (keys written before
    `measure.draw` existed stay valid)."""
    return {} if cfg.measure.draw == "multinomial" else {"draw": cfg.measure.draw}


def sampling_key(cfg, rows: list[dict]) -> dict:
    """What held-out samples depend on (not the statistics' settings: changing those re-samples nothing)."""
    m = cfg.measure
    return {
        "model": asdict(cfg.model),
        "max_new_tokens": m.max_new_tokens,
        "seed": m.seed,
        "batch_size": m.batch_size,
        "prompts": [r["id"] for r in rows],
        **draw_key(cfg),
    }


def pool_step(cfg, st: Stages, study: Study, rows: list[dict]) -> list[dict]:
    """max(best_of_n.sizes) start samples per held-out prompt (`pool/`), then each scorer's scores of them
    (`pool_scores/<gold|proxy_name>/`, one cached step per scorer: a new or retrained proxy scores the pool
    alone, without re-sampling it or re-scoring the others; `pool_scores/samples.jsonl` holds them all)."""
    n, root = max(cfg.best_of_n.sizes), study.root
    key = {**sampling_key(cfg, rows), "n": n}
    ids = study.identity()

    def sample(folder: Path) -> None:
        atomic_write_jsonl(folder / "samples.jsonl", study.sample(study.start, rows, n, cfg.measure.max_new_tokens))

    st.cached("pool", root / "pool", key, sample)
    pool = read_jsonl(root / "pool" / "samples.jsonl")
    for name in [*study.golds(), *[f"proxy_{p}" for p in cfg.proxies]]:

        def score(folder: Path, name=name) -> None:
            scorer, texts = study.scorer(name), ([r["prompt"] for r in pool], [r["story"] for r in pool])
            if hasattr(scorer, "score_with_members"):  # an ensemble: keep every member's scores (other aggregates)
                values, members = scorer.score_with_members(*texts)
                atomic_write_json(folder / "members.json", members)
            else:
                values = scorer.score(*texts)
            atomic_write_json(folder / "scores.json", [float(v) for v in values])

        folder = root / "pool_scores" / name
        st.cached("pool_scores", folder, {"pool": key, "scorer": ids[name.removeprefix("proxy_")]}, score)
        scores = json.loads((folder / "scores.json").read_text())
        check(len(scores) == len(pool), f"{len(scores)} scores for {len(pool)} pool samples", str(folder))
        for r, v in zip(pool, scores, strict=True):
            r.setdefault("scores", {})[name] = float(v)
    add_scores(pool, {})  # words and rep
    atomic_write_jsonl(root / "pool_scores" / "samples.jsonl", pool)  # the pool with every scorer's scores
    for r in pool:
        r["scores"]["length"] = float(r["words"])  # the length-only baseline of the agreement table
        r.update(kl_k3=0.0, kl_k1=0.0)  # the start itself
    return pool


def dpo_pairs_step(cfg, st: Stages, study: Study) -> None:
    """DPO's offline data: the start's samples for the RL prompts, each pair ordered by the RL proxy."""
    d, proxy = cfg.proxy_data, f"proxy_{cfg.rl_proxy}"
    key = {
        "samples": json.loads((study.root / "proxy_data" / "done.json").read_text())["key"],
        proxy: study.identity()[cfg.rl_proxy],
    }

    def write(folder: Path) -> None:
        recs = _scored(read_jsonl(study.root / "proxy_data" / "samples.jsonl"), study, [proxy])
        pairs, _ = labelled_pairs(
            recs, proxy, k=d.samples_per_prompt, per_prompt=d.pairs_per_prompt, temperature=0.0, seed=cfg.seed
        )
        train, held = split_by_prompt(pairs, d.eval_fraction, cfg.seed)
        write_preferences(folder / "pairs" / "train.jsonl", train)
        write_preferences(folder / "pairs" / "eval.jsonl", held)

    st.cached("dpo_pairs", study.root / "dpo_pairs", key, write)


def measure_run(cfg, st: Stages, study: Study, name: str, rows: list[dict]) -> list[tuple[int, list[dict]]]:
    """Every checkpoint of one trained run measured on the held-out prompts (cached per checkpoint)."""
    from rlcw.models import load_causal_lm

    proxy = run_proxy(cfg, name)
    m, names = cfg.measure, [*study.golds(), f"proxy_{proxy}"]  # what the analysis reads for an RL run
    run_dir = study.root / name
    out = []
    for step, path in checkpoints_of(run_dir):
        folder = study.root / "measure" / name / f"step_{step:06d}"
        key = {**sampling_key(cfg, rows), "samples": m.samples_per_prompt, "kl_batch_size": m.kl_batch_size}
        ids = study.identity()
        key.update(trained_at=trained_at(run_dir), scorers={**{g: ids[g] for g in study.golds()}, proxy: ids[proxy]})

        def write(folder: Path, path=path) -> None:
            policy = load_causal_lm(str(path), cfg.model.dtype, merge_lora=True)
            recs = study.sample(policy, rows, m.samples_per_prompt, m.max_new_tokens, logps=True)
            del policy  # the sampler's log-probs are the policy side of the KL
            tok = study.tokenizer
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            add_kl(recs, study.start, pad_id=pad, batch_size=m.kl_batch_size)
            for r in recs:
                r.pop("completion_logps")
            atomic_write_jsonl(folder / "samples.jsonl", _scored(recs, study, names))

        st.cached(f"measure_{name}", folder, key, write)
        out.append((step, read_jsonl(folder / "samples.jsonl")))
    return out
