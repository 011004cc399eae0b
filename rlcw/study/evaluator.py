"""The "study" evaluator: at each periodic evaluation of an RL run, export a blinded human-study
packet of the candidates vs the baseline (the starting model) on the same prompts.

    ev = make_study_evaluator({"raters_per_item": 3, "attention_checks": 1}, {})
    ev.evaluate(candidates, baseline, run.samples)   # -> {"pairs": 8.0, "packets": 6.0, ...}

Options (all optional): raters_per_item (1), per_sitting (5), attention_checks (0), formats
(["html", "csv", "labelstudio"]), study (name shown to raters; default "rl-eval"), max_pairs
(all). The context may carry "run_name" and "run_dir". Packets go to `<out_dir>/study/step_<step>/`
(step from the candidates' `step` field, else a call counter; out_dir is the shared `samples/`),
each key to `<run_dir>/private/study/step_<step>/key.json` (mode 0600; without run_dir, a `private/`
beside out_dir), never beside the packets; `rlcw study-ingest key=... answers=[...]` analyses the
answers. Ids and A/B sides come from `secrets` (`rlcw.study.blinding`), not from any seed.
"""

from __future__ import annotations

from pathlib import Path

from rlcw.errors import RlcwError
from rlcw.study.packets import FORMATS, export_packet
from rlcw.study.selection import system_pairs

OPTIONS = ("raters_per_item", "per_sitting", "attention_checks", "formats", "study", "max_pairs")


class StudyEvaluator:
    """Writes a packet per evaluation and reports its size (what a run can log)."""

    name = "study"

    def __init__(
        self,
        raters_per_item: int = 1,
        per_sitting: int = 5,
        attention_checks: int = 0,
        formats: tuple[str, ...] = FORMATS,
        study: str = "rl-eval",
        max_pairs: int | None = None,
        key_dir: str | Path | None = None,
    ):
        self.options = {
            "raters_per_item": raters_per_item,
            "per_sitting": per_sitting,
            "attention_checks": attention_checks,
            "formats": tuple(formats),
        }
        self.study, self.max_pairs = study, max_pairs
        self.key_dir = Path(key_dir) if key_dir is not None else None
        self.calls = 0

    def evaluate(self, candidates: list[dict], baseline: list[dict], out_dir: Path) -> dict[str, float]:
        self.calls += 1
        if not baseline:
            return {"pairs": 0.0}
        step = candidates[0].get("step") if candidates else None
        tag = f"step_{int(step):06d}" if step is not None else f"eval_{self.calls:03d}"
        base_name = baseline[0]["system"]
        cand = [{**c, "system": c["system"] if c["system"] != base_name else "candidate"} for c in candidates]
        pairs = system_pairs(cand, baseline, where="study evaluator")[: self.max_pairs or None]
        key_dir = self.key_dir if self.key_dir is not None else Path(out_dir).parent / "private" / "study"
        result = export_packet(
            pairs,
            Path(out_dir) / "study" / tag,
            study=f"{self.study}-{tag}",
            key_path=key_dir / tag / "key.json",
            **self.options,
        )
        return {k: float(v) for k, v in result["counts"].items()}


def make_study_evaluator(options: dict, context: dict) -> StudyEvaluator:
    """Build the evaluator from `eval` options (unknown keys are an error naming them)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise RlcwError(
            f"unknown study evaluator option(s) {unknown}",
            where="eval.study",
            hint=f"valid options: {', '.join(OPTIONS)}",
        )
    opts = dict(options)
    if context.get("run_dir") is not None:
        opts["key_dir"] = Path(context["run_dir"]) / "private" / "study"
    opts.setdefault("study", str(context.get("run_name", "rl-eval")))
    if "formats" in opts:
        opts["formats"] = tuple(opts["formats"])
    return StudyEvaluator(**opts)
