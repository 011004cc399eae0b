"""The bundled prompt splits: sizes, disjointness, and ranges an 88-token cap can hold."""

from rlcw.data.bundled import PROMPT_SPLITS
from rlcw.data.prompts import load_prompts
from rlcw.rewards.length import range_fits_cap


def test_split_sizes_styles_and_disjointness():
    splits = {name: load_prompts("bundled", name) for name in PROMPT_SPLITS}
    assert {k: len(v) for k, v in splits.items()} == PROMPT_SPLITS
    texts = {name: {" ".join(r["prompt"].lower().split()) for r in rows} for name, rows in splits.items()}
    names = list(texts)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not texts[a] & texts[b], (a, b)
    for name in ("heldout", "study"):
        styles = [r["style"] for r in splits[name]]
        assert styles.count("tmas") == styles.count("wp") == len(styles) // 2
        assert all(range_fits_cap(r["max_words"], 88) for r in splits[name])
        tmas = [r for r in splits[name] if r["style"] == "tmas"]
        assert all(str(r["min_words"]) in r["prompt"] and str(r["max_words"]) in r["prompt"] for r in tmas)
