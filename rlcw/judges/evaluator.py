"""The judge as a periodic evaluator for RL runs (`rlcw.measure.evaluation.Evaluator`, name "judge").

    ev = make_judge_evaluator({"protocol": "agents_room", "client": {"base_url": "...", "model": "..."}}, {})
    ev.evaluate(candidates, baseline, out_dir)   # {"win_rate": ..., "invalid_share": ..., ...}

Options: `protocol` (agents_room | litbench; default litbench), `template` (default the
protocol's), `dimension` (agents_room: overall by default), `max_items` (judge the first N
prompts), `verdict` (text | logprobs: read from label probabilities, for a local judge),
`client` (ClientConfig keys; `cache_dir` defaults to `<out_dir>/judge_cache`).
Context: optional `script` (replies for a scripted client, for tests).
Each candidate is judged against the baseline story for the same prompt (matched by id, else by
prompt text) in both orders. Metrics: win_rate (candidate's mean outcome, Same = 0.5, over valid
verdicts), length_controlled_win_rate, order_consistency, position_bias (share of valid verdicts
for the story shown first), judgments, invalid, invalid_share, calls; with logprobs also
averaged_win_rate (both orders averaged per pair) and mean_margin. Verdicts go to `<out_dir>/judge_<system>.jsonl`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.io import atomic_write_jsonl
from rlcw.judges.aggregate import invalid_counts, length_controlled_win_rate, order_consistency, oriented
from rlcw.judges.clients.base import ClientConfig
from rlcw.judges.clients.factory import make_client
from rlcw.judges.position import logprob_summary, position_bias
from rlcw.judges.protocols import (
    DEFAULT_TEMPLATE,
    PAIRWISE_DIMENSIONS,
    VERDICTS,
    Pair,
    judge_side_by_side,
    pair_outcomes,
)
from rlcw.judges.templates import load_template

OPTIONS = ("protocol", "template", "dimension", "max_items", "client", "verdict")


class JudgeEvaluator:
    name = "judge"

    def __init__(
        self,
        protocol: str,
        template: str | None,
        dimension: str | None,
        max_items: int | None,
        client_cfg: ClientConfig,
        script=None,
        verdict: str = "text",
    ):
        if verdict not in VERDICTS:
            raise RlcwError(f"unknown verdict '{verdict}'", where="eval judge verdict", hint=f"one of {VERDICTS}")
        self.verdict = verdict
        if protocol not in PAIRWISE_DIMENSIONS:
            raise RlcwError(
                f"the judge evaluator runs side-by-side protocols, not '{protocol}'",
                where="eval judge protocol",
                hint=f"use one of {', '.join(PAIRWISE_DIMENSIONS)}",
            )
        self.protocol, self.max_items, self.client_cfg, self.script = protocol, max_items, client_cfg, script
        self.template = load_template(template or DEFAULT_TEMPLATE[protocol], protocol)
        self.dimension = dimension or PAIRWISE_DIMENSIONS[protocol][-1]
        if self.dimension not in PAIRWISE_DIMENSIONS[protocol]:
            raise RlcwError(
                f"unknown dimension '{dimension}'",
                where="eval judge dimension",
                hint=f"one of {PAIRWISE_DIMENSIONS[protocol]}",
            )
        self.client = None

    def _client(self, out_dir: Path):
        if self.client is None:
            cfg = (
                self.client_cfg
                if self.client_cfg.cache_dir
                else replace(self.client_cfg, cache_dir=str(Path(out_dir) / "judge_cache"))
            )
            self.client = make_client(cfg, script=self.script)
        return self.client

    def evaluate(self, candidates: list[dict], baseline: list[dict], out_dir: Path) -> dict[str, float]:
        if not baseline:
            return {}
        base_by_id = {b["id"]: b for b in baseline}
        base_by_prompt = {" ".join(b["prompt"].split()): b for b in baseline}
        pairs = []
        for c in candidates[: self.max_items or None]:
            b = base_by_id.get(c["id"]) or base_by_prompt.get(" ".join(c["prompt"].split()))
            if b is not None:
                pairs.append(Pair(str(c["id"]), c["prompt"], "candidate", c["story"], "baseline", b["story"]))
        if not pairs:
            return {"judgments": 0.0}
        client = self._client(out_dir)
        calls_before = client.stats["calls"]
        rows = judge_side_by_side(client, self.template, pairs, progress=False, verdict=self.verdict)
        system = candidates[0].get("system", "candidate")
        for r in rows:
            r["candidate_system"] = system
        atomic_write_jsonl(Path(out_dir) / f"judge_{re.sub(r'[^A-Za-z0-9_.-]+', '_', system)}.jsonl", rows)
        ys, ds = oriented(pair_outcomes(rows, self.dimension), "candidate")
        inv = invalid_counts(rows, self.dimension)
        bias = position_bias(rows, self.dimension)
        extra = {"position_bias": float("nan") if bias is None else bias}
        if self.verdict == "logprobs":
            lp = logprob_summary(rows, self.dimension)
            extra |= {"averaged_win_rate": lp["averaged_win_rate"].get("candidate", float("nan"))}
            extra |= {"mean_margin": lp["mean_margin"]}
        return extra | {
            "win_rate": sum(ys) / len(ys) if ys else float("nan"),
            "length_controlled_win_rate": length_controlled_win_rate(ys, ds),
            "order_consistency": order_consistency(rows, self.dimension)[0],
            "judgments": float(inv["judgments"]),
            "invalid": float(inv["invalid"]),
            "invalid_share": float(inv["invalid_share"]),
            "calls": float(client.stats["calls"] - calls_before),
        }


def make_judge_evaluator(options: dict, context: dict) -> JudgeEvaluator:
    """Build the "judge" evaluator from the RL config's options (see the module docstring)."""
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise RlcwError(
            f"unknown judge evaluator option(s) {sorted(unknown)}", where="eval", hint=f"valid: {', '.join(OPTIONS)}"
        )
    client = options.get("client") or {}
    if isinstance(client, dict):
        bad = set(client) - set(ClientConfig.__dataclass_fields__)
        if bad:
            raise RlcwError(
                f"unknown judge client option(s) {sorted(bad)}",
                where="eval judge client",
                hint=f"valid: {', '.join(ClientConfig.__dataclass_fields__)}",
            )
        client = ClientConfig(**client)
    return JudgeEvaluator(
        options.get("protocol", "litbench"),
        options.get("template"),
        options.get("dimension"),
        options.get("max_items"),
        client,
        script=(context or {}).get("script"),
        verdict=options.get("verdict", "text"),
    )
