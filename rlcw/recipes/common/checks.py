"""Config checks shared by recipes that read no file and load no model (`data.*`, `monitor.*`,
`eval.evaluators`, `train.report_to`, `train.bf16`), and `train.bf16` against this machine's CPU/GPU."""

from __future__ import annotations

from rlcw.errors import RlcwError
from rlcw.recipes.common.prompts import FIT_MODES, check_source
from rlcw.recipes.common.sections import MonitorSection, PromptSection
from rlcw.tracking import parse_report_to


def validate_rl_sections(data: PromptSection | None, monitor: MonitorSection | None, evaluators: dict) -> None:
    """Config checks of `data.*`, `monitor.*` and `eval.evaluators` that read no file and load no model."""
    from rlcw.measure.evaluation import EVALUATORS
    from rlcw.measure.monitors import validate_rules

    if data is not None and data.fit_to_cap not in FIT_MODES:
        raise RlcwError(
            f"data.fit_to_cap={data.fit_to_cap!r} is not a mode",
            where="data.fit_to_cap",
            hint=f"one of {', '.join(FIT_MODES)}",
        )
    for name, spec in (data.sources if data is not None else {}).items():
        check_source(name, spec)
    if monitor is not None:
        validate_rules(monitor.warn, "monitor.warn")
        validate_rules(monitor.stop, "monitor.stop")
    for name, options in (evaluators or {}).items():
        if name not in EVALUATORS and not (options or {}).get("factory"):
            raise RlcwError(
                f"unknown evaluator '{name}'",
                where=f"eval.evaluators.{name}",
                hint=f"known: {', '.join(EVALUATORS)}; or give options.factory='module:function'",
            )


def validate_train_keys(
    report_to: list[str] | str, bf16: bool, adam_betas: tuple[float, float] = (0.9, 0.999)
) -> None:
    """`train.report_to` names known trackers (an RlcwError listing them otherwise), `train.bf16` is a bool and
    `train.adam_beta1` / `adam_beta2` (`adam_betas`) lie in [0, 1), which torch's AdamW would refuse only after the
    models load."""
    parse_report_to(report_to)
    if not isinstance(bf16, bool):
        raise RlcwError(f"train.bf16 must be true or false, got {bf16!r}", where="train.bf16")
    for i, beta in enumerate(adam_betas, start=1):
        if not 0 <= beta < 1:
            raise RlcwError(
                f"train.adam_beta{i}={beta} must be in [0, 1)",
                where=f"train.adam_beta{i}",
                hint="AdamW's defaults: train.adam_beta1=0.9 train.adam_beta2=0.999",
            )


def check_tail_average(tail: int, max_steps: int, deepspeed: str | None) -> None:
    """`train.tail_average` (rlcw.rl.tail_average) averages at most the run's steps, over whole weights (not ZeRO's
    shards)."""
    if tail > max_steps:
        raise RlcwError(
            f"train.tail_average={tail} averages more steps than the run takes (train.max_steps={max_steps})",
            where="train.tail_average",
            hint=f"at most {max_steps}; 0 keeps the last step's weights",
        )
    if tail and deepspeed:
        raise RlcwError(
            "train.tail_average keeps its mean of the trainable weights in one process; ZeRO shards them",
            where="train.tail_average",
            hint="train.tail_average=0 with train.deepspeed",
        )


def check_bf16(bf16: bool) -> None:
    """This machine against `train.bf16=true` (run in main, not validate: `rlcw plan` checks GPU configs on CPU boxes).

    A CUDA device without bf16 is an error (the HF trainer would refuse later, after loading the model); without
    CUDA it is a warning: the HF trainer autocasts to bf16 on CPU, which runs but was slower than fp32 on the
    2-core CPUs the CPU configs were measured on, and is emulated on CPUs without AVX512-BF16/AMX."""
    import torch

    if not bf16:
        return
    if torch.cuda.is_available():
        if not torch.cuda.is_bf16_supported():
            raise RlcwError(
                f"train.bf16=true but {torch.cuda.get_device_name()} has no bf16 support",
                where="train.bf16",
                hint="train.bf16=false (fp32), or a GPU with bf16 (Ampere or newer)",
            )
        return
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    print(
        f"[rlcw] warning: train.bf16=true without a GPU: bf16 autocast on a CPU {'with' if native else 'WITHOUT'} "
        "native bf16; usually slower than fp32 on CPU (train.bf16=false)",
        flush=True,
    )
