"""The table of `rlcw` commands: name -> (recipe module, config class, one-line help).

Read by the CLI (dispatch, the usage page) and by the recipes that start other commands (`rlcw sweep`); it names
modules as strings, so importing it loads no recipe.
"""

from __future__ import annotations

# command -> (module, config class, one-line help). A command whose module does not exist yet
# is listed as "not built yet". A config class of None means the module parses its own
# positional arguments: it defines `cli(argv: list[str]) -> int` (analysis commands).
COMMANDS: dict[str, tuple[str, str | None, str]] = {
    "prepare-model": (
        "rlcw.recipes.prepare_model",
        "PrepareModelConfig",
        "convert/cache the embedded model, check any model loads",
    ),
    "curate": ("rlcw.recipes.curate", "CurateConfig", "LitBench-style preference curation from upvoted stories"),
    "build-pairs": (
        "rlcw.recipes.build_pairs",
        "BuildPairsConfig",
        "preference pairs by controlled (length-matched) corruption",
    ),
    "train-rm": ("rlcw.recipes.train_rm", "TrainRMConfig", "train a reward model (rm.type=bt|genrm)"),
    "eval-rm": ("rlcw.recipes.eval_rm", "EvalRMConfig", "evaluate a BT RM, GenRM or judge on held-out pairs"),
    "serve-rm": ("rlcw.recipes.serve_rm", "ServeRMConfig", "serve a reward model over HTTP for RL jobs"),
    "grpo": ("rlcw.recipes.grpo", "GRPORecipeConfig", "GRPO with learned rewards + length control (TRL GRPOTrainer)"),
    "ppo": ("rlcw.recipes.ppo", "PPORecipeConfig", "PPO with a learned reward (policy + value model, GAE)"),
    "rloo": ("rlcw.recipes.rloo", "RLOORecipeConfig", "RLOO with learned rewards (TRL RLOOTrainer)"),
    "dpo": ("rlcw.recipes.dpo", "DPORecipeConfig", "offline DPO on preference pairs (TRL DPOTrainer)"),
    "generate": ("rlcw.recipes.generate", "GenerateConfig", "sample stories for prompts into story records"),
    "judge": ("rlcw.recipes.judge", "JudgeConfig", "LLM judges (Agents' Room, LitBench, TTCW) over story files"),
    "agreement": ("rlcw.recipes.agreement", None, "agreement of judge scores with human scores (CSV)"),
    "surface": ("rlcw.recipes.surface", None, "surface metrics of story files (Agents' Room Table 2)"),
    "study-export": (
        "rlcw.recipes.study_export",
        "StudyExportConfig",
        "blinded human-study packets (HTML, CSV, Label Studio)",
    ),
    "study-ingest": (
        "rlcw.recipes.study_ingest",
        "StudyIngestConfig",
        "validate, unblind and analyse human-study answers",
    ),
    "train-agents": (
        "rlcw.recipes.train_agents",
        "TrainAgentsConfig",
        "synthetic Agents' Room data and one LoRA per agent",
    ),
    "sweep": ("rlcw.recipes.sweep", None, "run override grids locally or as a Slurm job array"),
    "summarize": ("rlcw.recipes.summarize", None, "collect runs' summary.json into one table"),
    "export": ("rlcw.recipes.export", "ExportConfig", "merge LoRA, save for serving, check logits"),
    "plan": ("rlcw.recipes.plan", None, "check a training config for a world size: batch geometry, memory per GPU"),
    "configs": ("rlcw.recipes.configs", None, "list the shipped configs (first comment line); --copy NAME DEST"),
    "env": ("rlcw.recipes.env", None, "versions, CPU, cache and model state for a bug report (imports no torch)"),
    "quickstart": (
        "rlcw.recipes.quickstart",
        "QuickstartConfig",
        "the whole loop on the embedded model, with a report",
    ),
    "outcome": (
        "rlcw.recipes.outcome",
        "OutcomeConfig",
        "outcome study: proxy vs gold reward over RL runs and baselines, with a report",
    ),
}
