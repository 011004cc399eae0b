"""GRPO calibration on the embedded model: one `rlcw grpo` run against a saved RM, then one held-out
measurement (start vs tuned, CRN samples, bootstrap over prompts); one row per run in a table.

    python scripts/calibrate_grpo.py NAME [key=value ...]      # grpo overrides on configs/grpo/cpu.yaml
    python scripts/calibrate_grpo.py --table                   # print runs/cal/calibration.md

Defaults: RM runs/cal/train_rm/model (the quickstart's build-pairs + train-rm settings), held-out
split `heldout` of the bundled prompts (32), 4 samples each, periodic evaluation off. A run whose
grpo summary says completed is not trained again, and a killed one resumes from its last checkpoint
(train.save_steps=4 in the config): re-running the same command continues where it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rlcw.config import load_config
from rlcw.data.prompts import load_prompts
from rlcw.io import jsonl_lines
from rlcw.measure.heldout import HeldoutSettings, measure_policies
from rlcw.recipes import grpo

ROOT = Path("runs/cal")
COLS = [
    ("rm_delta", "RM change [95% CI]"),
    ("win_rate", "win"),
    ("words_final", "words"),
    ("in_range_final", "in range"),
    ("finished_final", "ends"),
    ("rm_delta_both_finished", "RM change, both end"),
    ("rm_delta_from_ending", "explained by ending"),
]


def _ci(st: dict, k: str) -> str:
    return f"{st[k]:+.2f} [{st[k + '_lo']:+.2f}, {st[k + '_hi']:+.2f}]"


def table() -> str:
    rows = [json.loads(x) for x in jsonl_lines((ROOT / "calibration.jsonl").read_text(encoding="utf-8"))]
    s0 = rows[-1]["stats"]
    head = (
        f"start: words {s0['words_start']:.0f}, in range {s0['in_range_start']:.2f}, ends {s0['finished_start']:.2f}, "
        f"RM ended-minus-cut gap {s0['rm_gap_ended_minus_cut']:.2f}\n\n"
    )
    lines = [
        "| run | overrides | grpo s | KL/token | RM change [95% CI] | win | words | ends in range [CI of change] | in range by words | ends | RM change, both end | explained by ending | LC change |",
        "|---" * 13 + "|",
    ]
    for r in rows:
        st = r["stats"]
        lines.append(
            f"| {r['name']} | {' '.join(r['overrides'])} | {r['grpo_s']:.0f} | {r['kl']:.4f} | {_ci(st, 'rm_delta')} "
            f"| {st['win_rate']:.2f} | {st['words_final']:.0f} | {st['in_range_final']:.2f} "
            f"[{st['in_range_delta_lo']:+.2f}, {st['in_range_delta_hi']:+.2f}] "
            f"| {st.get('in_range_words_final', float('nan')):.2f} | {st['finished_final']:.2f} "
            f"| {st['rm_delta_both_finished']:+.2f} | {st['rm_delta_from_ending']:+.2f} "
            f"| {st['rm_delta_length_controlled']:+.2f} |"
        )
    note = (
        "\n\nRows whose 'in range by words' is nan were measured before 'in range' required the story to end:"
        " their 'ends in range' column is the share with a word count inside the range, cut stories included.\n"
    )
    return head + "\n".join(lines) + note


def last_kl(run_dir: Path) -> float:
    vals = [json.loads(x).get("monitor/kl_to_start") for x in jsonl_lines((run_dir / "metrics.jsonl").read_text())]
    vals = [v for v in vals if v is not None]
    return float(vals[-1]) if vals else float("nan")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--table"]:
        (ROOT / "calibration.md").write_text(table())
        print(table())
        return
    name, overrides = argv[0], argv[1:]
    base = [
        f"output_dir={ROOT}",
        f"run_name={name}",
        f"reward.rm_path={ROOT}/train_rm/model",
        "eval.every_steps=0",
    ]
    ckpts = sorted((ROOT / name / "checkpoints").glob("checkpoint-*")) if (ROOT / name).is_dir() else []
    if any((c / "trainer_state.json").is_file() for c in ckpts):
        base.append("train.resume=true")  # a killed run continues from its last checkpoint (every 4 steps)
    cfg = load_config(grpo.GRPORecipeConfig, "configs/grpo/cpu.yaml", base + overrides)
    run_dir = ROOT / name
    summary = run_dir / "summary.json"
    t0 = time.time()
    if not (summary.is_file() and json.loads(summary.read_text()).get("status") == "completed"):
        grpo.main(cfg)
    grpo_s = json.loads(summary.read_text()).get("wall_time_s", time.time() - t0)
    rows = load_prompts("bundled", "heldout")
    s = HeldoutSettings(max_new_tokens=cfg.train.max_completion_length, system_prompt=cfg.model.system_prompt)
    t1 = time.time()
    stats = measure_policies(
        cfg.model.name,
        str(run_dir / "checkpoints" / "final"),
        cfg.reward.rm_path,
        rows,
        s,
        run_dir / "heldout",
        start_cache=ROOT / "heldout_cache" / f"start_cache_{cfg.train.max_completion_length}.jsonl",
    )
    (run_dir / "heldout.json").write_text(json.dumps(stats, indent=1))
    row = {
        "name": name,
        "overrides": overrides,
        "grpo_s": float(grpo_s),
        "measure_s": time.time() - t1,
        "kl": last_kl(run_dir),
        "stats": stats,
    }
    with open(ROOT / "calibration.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({k: row[k] for k in ("name", "grpo_s", "measure_s", "kl")}))
    print({k: round(v, 3) for k, v in stats.items() if not k.endswith(("_lo", "_hi"))})


if __name__ == "__main__":
    main(sys.argv[1:])
