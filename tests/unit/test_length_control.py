"""Length control: a least-squares line of score on f(words), residuals, save/load (hand-worked numbers)."""

from __future__ import annotations

import math

import pytest

from rlcw.errors import RlcwError
from rlcw.rm.length_control import (
    LENGTH_CONTROL_FILE,
    fit_length_fit,
    length_feature,
    load_length_fit,
    save_length_fit,
)


def test_fit_on_words_by_hand():
    # x = 10, 20, 30, 40 (mean 25), y = 1, 2, 3, 5 (mean 2.75): sxx = 500, sxy = 65
    fit = fit_length_fit([1, 2, 3, 5], [10, 20, 30, 40], feature="words")
    assert fit.slope == pytest.approx(0.13) and fit.intercept == pytest.approx(-0.5)
    assert fit.residuals([1, 2, 3, 5], [10, 20, 30, 40]) == pytest.approx([0.2, -0.1, -0.4, 0.3])
    assert fit.r2 == pytest.approx(1 - 0.30 / 8.75)  # SSE 0.30, total 8.75
    assert fit.n == 4


def test_fit_on_log_words_by_hand():
    words = [0, math.e - 1, math.e**2 - 1]  # log1p -> 0, 1, 2
    fit = fit_length_fit([1, 3, 5], words, feature="log_words")
    assert (fit.slope, fit.intercept, fit.r2) == pytest.approx((2.0, 1.0, 1.0))
    assert fit.residuals([4.0], [math.e - 1]) == pytest.approx([1.0])


def test_bad_fits_are_clear_errors():
    with pytest.raises(RlcwError, match="same length"):
        fit_length_fit([1, 2], [50, 50])
    with pytest.raises(RlcwError, match="at least 2"):
        fit_length_fit([1], [50])
    with pytest.raises(RlcwError, match="unknown length feature"):
        length_feature(3, "chars")


def test_save_load_round_trip_and_corrupt_file(tmp_path):
    assert load_length_fit(tmp_path) is None
    fit = fit_length_fit([1, 2, 3, 5], [10, 20, 30, 40], feature="words", source="refs.jsonl")
    save_length_fit(fit, tmp_path)
    assert load_length_fit(tmp_path) == fit
    (tmp_path / LENGTH_CONTROL_FILE).write_text("{not json")
    with pytest.raises(RlcwError, match=LENGTH_CONTROL_FILE):
        load_length_fit(tmp_path)


def test_resolve_length_control_is_explicit(tmp_path):
    from rlcw.rm.length_control import resolve_length_control

    assert resolve_length_control("auto", tmp_path) is None  # nothing installed: raw
    assert resolve_length_control(False, tmp_path) is None
    with pytest.raises(RlcwError, match="length_control=true but the RM folder has no"):
        resolve_length_control(True, tmp_path)
    with pytest.raises(RlcwError, match="not a choice"):
        resolve_length_control("sometimes", tmp_path)
    save_length_fit(fit_length_fit([1.0, 2.0], [10, 20], "words"), tmp_path)
    for choice in ("auto", True, "true"):
        assert resolve_length_control(choice, tmp_path).slope == pytest.approx(0.1)
    assert resolve_length_control("false", tmp_path) is None
