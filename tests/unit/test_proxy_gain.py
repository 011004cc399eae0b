"""Surface explanation of a proxy gain: slopes and shares by hand."""

from __future__ import annotations

import pytest

from rlcw.metrics.proxy_gain import explain_proxy_gain, surface_slopes


def test_slopes_recover_an_exact_linear_proxy():
    # proxy = 1 + 0.1 words + 2 rep on four stories: [1 + 1 + 0, 1 + 2 + 2, 1 + 3 + 0, 1 + 4 + 2]
    words, rep = [10.0, 20.0, 30.0, 40.0], [0.0, 1.0, 0.0, 1.0]
    slopes = surface_slopes({"words": words, "rep": rep}, [2.0, 5.0, 4.0, 7.0])
    assert slopes["words"] == pytest.approx(0.1) and slopes["rep"] == pytest.approx(2.0)


def test_share_of_the_gain_length_would_buy():
    # slope 0.1 per word; the run wrote 5 more words (predicts +0.5) and gained 1.0: share 0.5 -> explains
    ex = explain_proxy_gain({"words": [10.0, 20.0, 30.0]}, [1.0, 2.0, 3.0], {"words": 5.0}, actual=1.0)
    assert ex.predicted["words"] == pytest.approx(0.5) and ex.share == pytest.approx(0.5) and ex.explains
    # gained 2.0 with the same length change: share 0.25, below the 0.5 rule
    assert not explain_proxy_gain({"words": [10.0, 20.0, 30.0]}, [1.0, 2.0, 3.0], {"words": 5.0}, 2.0).explains
    # no proxy gain: no share
    none = explain_proxy_gain({"words": [10.0, 20.0, 30.0]}, [1.0, 2.0, 3.0], {"words": 5.0}, actual=-0.1)
    assert none.share is None and not none.explains


def test_a_constant_feature_predicts_nothing_and_bad_input_is_refused():
    slopes = surface_slopes({"words": [1.0, 2.0, 3.0], "rep": [0.0, 0.0, 0.0]}, [2.0, 4.0, 6.0])
    assert slopes == {"words": pytest.approx(2.0), "rep": 0.0}
    with pytest.raises(ValueError):
        surface_slopes({"words": [1.0, 2.0]}, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        explain_proxy_gain({"words": [1.0, 2.0, 3.0]}, [1.0, 2.0, 3.0], {"rep": 1.0}, 1.0)
