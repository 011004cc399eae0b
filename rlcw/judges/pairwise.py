"""An LLM judge as a pairwise preference scorer (LitBench protocol), e.g. for `rlcw eval-rm`.

    scorer = JudgePairwiseScorer({"base_url": "http://127.0.0.1:8000/v1", "model": "m"}, template="writerly")
    p = scorer.prefer_ordered(prompts, first, second)   # first shown as A: [1.0, 0.0, None, ...]
    q = scorer.prefer(prompts, first, second)           # both orders averaged: [1.0, 0.5, None, ...]

`prefer_ordered` asks once per pair with `first` shown as Response A: 1.0 when A is preferred,
0.0 when B is, None when the reply has no valid verdict (never a default). The caller runs the
other order itself (eval-rm does, to measure order consistency). `prefer` is the LitBench
protocol in one call: both orders, the mean over the valid ones (0.5 = the orders disagreed),
None when neither is valid. Raw verdict rows of the last call are kept in `last_rows`.
"""

from __future__ import annotations

from rlcw.judges.clients.base import ChatClient, ClientConfig
from rlcw.judges.clients.factory import make_client
from rlcw.judges.protocols import Pair, judge_side_by_side
from rlcw.judges.templates import load_template

_FIRST = {"A": 1.0, "B": 0.0}


class JudgePairwiseScorer:
    def __init__(
        self,
        client_cfg: ClientConfig | dict,
        template: str = "writerly",
        *,
        client: ChatClient | None = None,
        progress: bool = False,
    ):
        self.client = client or make_client(client_cfg)
        self.template = load_template(template, "litbench")
        self.progress = progress
        self.last_rows: list[dict] = []

    def _rows(self, prompts, first, second, orders: tuple[int, ...]) -> list[dict]:
        if not len(prompts) == len(first) == len(second):
            raise ValueError(f"{len(prompts)} prompts, {len(first)} first and {len(second)} second stories")
        pairs = [
            Pair(str(i), p, "first", f, "second", s)
            for i, (p, f, s) in enumerate(zip(prompts, first, second, strict=False))
        ]
        self.last_rows = judge_side_by_side(self.client, self.template, pairs, progress=self.progress, orders=orders)
        return self.last_rows

    def prefer_ordered(self, prompts: list[str], first: list[str], second: list[str]) -> list[float | None]:
        """P(first better) with `first` shown as A (1.0 / 0.0), None when the reply is invalid."""
        return [_FIRST.get(r["verdicts"]["preferred"]["value"]) for r in self._rows(prompts, first, second, (0,))]

    def prefer(self, prompts: list[str], first: list[str], second: list[str]) -> list[float | None]:
        """P(first better) from both orders' valid verdicts; None when neither is valid."""
        per_pair: dict[str, list[float]] = {}
        for r in self._rows(prompts, first, second, (0, 1)):
            v = _FIRST.get(r["verdicts"]["preferred"]["value"])
            if v is not None:
                per_pair.setdefault(r["prompt_id"], []).append(v if r["system_a"] == "first" else 1.0 - v)
        return [sum(v) / len(v) if (v := per_pair.get(str(i))) else None for i in range(len(prompts))]
