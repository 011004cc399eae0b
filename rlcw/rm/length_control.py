"""Length-controlled reward: remove the part of an RM score that story length explains.

A least-squares line `score ~ a + b * f(words)` is fitted on the raw scores of a reference set
of stories (f = words or log(1 + words)); the controlled reward is the residual
`score - (a + b * f(words))`. An installed fit lives in the RM folder as `rlcw_length_control.json`
(next to `rlcw_rm.json`). Whether `rlcw.rm.scoring` applies it is a stated choice,
`length_control: auto | true | false` (`resolve_length_control`): auto = the installed fit if there is
one, true = the installed fit or an error, false = raw scores (`score(..., raw=True)` too). The choice a
run resolved to is reported by it. `rlcw eval-rm length_control.fit_on=FILE` writes the fit into its own
run folder and installs it into the RM folder only with `length_control.install=true`.

    rlcw eval-rm scorer.path=runs/train_rm/model length_control.fit_on=refs.jsonl length_control.install=true

    fit = fit_length_fit(scores=[1.0, 2.0, 3.0], words=[100, 200, 300], feature="words")
    fit.residuals([2.5], [200])                                                   # -> [0.5]

`fit_length_control` fits a scorer (anything with `score(prompts, stories, raw=True)`) on the stories of
`reference_stories`. Pure maths and JSON: no model code here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from rlcw.errors import RlcwError, location
from rlcw.io import atomic_write_json, read_table
from rlcw.metrics.text import count_words

LENGTH_CONTROL_FILE = "rlcw_length_control.json"
FEATURES = ("words", "log_words")


def length_feature(words: float, feature: str) -> float:
    """f(words): the length variable the fit is linear in."""
    if feature == "words":
        return float(words)
    if feature == "log_words":
        return math.log1p(max(0.0, float(words)))
    raise RlcwError(f"unknown length feature '{feature}'", hint=f"use one of {FEATURES}")


@dataclass
class LengthFit:
    """score ~ intercept + slope * f(words), fitted on `n` reference stories (r2 = explained share)."""

    intercept: float
    slope: float
    feature: str = "log_words"
    n: int = 0
    r2: float = 0.0
    source: str = ""

    def predict(self, words: list[float]) -> list[float]:
        return [self.intercept + self.slope * length_feature(w, self.feature) for w in words]

    def residuals(self, scores: list[float], words: list[float]) -> list[float]:
        if len(scores) != len(words):
            raise ValueError(f"{len(scores)} scores but {len(words)} word counts")
        return [s - p for s, p in zip(scores, self.predict(words), strict=False)]


def fit_length_fit(scores: list[float], words: list[float], feature: str = "log_words", source: str = "") -> LengthFit:
    """Ordinary least squares of scores on f(words); needs two or more distinct lengths."""
    if len(scores) != len(words):
        raise ValueError(f"{len(scores)} scores but {len(words)} word counts")
    xs = [length_feature(w, feature) for w in words]
    n = len(xs)
    if n < 2:
        raise RlcwError(f"a length-control fit needs at least 2 reference stories, got {n}")
    mx, my = sum(xs) / n, sum(scores) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise RlcwError(
            "all reference stories have the same length: cannot fit a length slope",
            hint="use a reference set with varied lengths",
        )
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, scores, strict=False))
    slope = sxy / sxx
    intercept = my - slope * mx
    syy = sum((y - my) ** 2 for y in scores)
    sse = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, scores, strict=False))
    r2 = 1.0 - sse / syy if syy > 0 else 0.0
    return LengthFit(intercept=intercept, slope=slope, feature=feature, n=n, r2=r2, source=source)


def save_length_fit(fit: LengthFit, rm_dir: str | Path) -> Path:
    return atomic_write_json(Path(rm_dir) / LENGTH_CONTROL_FILE, dataclasses.asdict(fit))


def load_length_fit(rm_dir: str | Path) -> LengthFit | None:
    """The fit saved in an RM folder, or None when the folder has none."""
    path = Path(rm_dir) / LENGTH_CONTROL_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fit = LengthFit(**{f.name: data[f.name] for f in dataclasses.fields(LengthFit) if f.name in data})
        length_feature(1.0, fit.feature)
        float(fit.intercept) + float(fit.slope)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError, KeyError) as exc:
        raise RlcwError(
            f"corrupt {LENGTH_CONTROL_FILE}: {exc}",
            where=str(path),
            hint="delete it, or refit with `rlcw eval-rm length_control.fit_on=FILE`",
        ) from None
    return fit


CHOICES = ("auto", "true", "false")


def resolve_length_control(choice: bool | str, rm_dir: str | Path) -> LengthFit | None:
    """The fit a scorer applies for `choice` (auto | true | false, or a bool): None = raw scores."""
    key = str(choice).lower() if isinstance(choice, bool | str) else None
    if key not in CHOICES:
        raise RlcwError(
            f"length_control={choice!r} is not a choice",
            where="length_control",
            hint="auto (the RM folder's fit when it has one), true (require it) or false (raw scores)",
        )
    if key == "false":
        return None
    fit = load_length_fit(rm_dir)
    if fit is None and key == "true":
        raise RlcwError(
            f"length_control=true but the RM folder has no {LENGTH_CONTROL_FILE}",
            where=str(rm_dir),
            hint="fit and install one: rlcw eval-rm length_control.fit_on=FILE length_control.install=true; "
            "or length_control=false for raw scores",
        )
    return fit


def reference_stories(path: str, limit: int | None) -> tuple[list[str], list[str]]:
    """(prompts, stories) of a story-record file, or of both sides of a pair file."""
    prompts, stories = [], []
    for line, row in read_table(path):
        keys = (
            ("story",) if "story" in row else ("chosen", "rejected") if "chosen" in row and "rejected" in row else ()
        )
        if not keys:
            raise RlcwError(
                "neither a story record nor a preference pair",
                where=location(path, line, "story"),
                hint="give story records (prompt, story) or preference records (prompt, chosen, rejected)",
            )
        for key in keys:
            if not isinstance(row[key], str) or not row[key].strip():
                raise RlcwError("empty or non-text story", where=location(path, line, key))
            prompts.append(str(row.get("prompt") or ""))
            stories.append(row[key])
    return prompts[: limit or None], stories[: limit or None]


def fit_length_control(
    scorer, fit_on: str, run_dir: Path, *, feature: str, max_stories: int | None, install: bool
) -> dict:
    """Fit the scorer's raw scores ~ words on the reference stories of `fit_on`, save the fit into `run_dir`
    (and with `install` into the scorer's RM folder) and apply it to the scorer; the fit's metrics."""
    prompts, stories = reference_stories(fit_on, max_stories)
    raw = scorer.score(prompts, stories, raw=True)
    fit = fit_length_fit(raw, [count_words(s) for s in stories], feature, source=str(fit_on))
    path = save_length_fit(fit, run_dir)  # never mutate an RM folder unless told to
    if install:
        shutil.copyfile(path, scorer.rm_dir / LENGTH_CONTROL_FILE)
    scorer.length_fit = fit
    return {
        "length_control/slope": fit.slope,
        "length_control/intercept": fit.intercept,
        "length_control/r2": fit.r2,
        "length_control/n": float(fit.n),
    }
