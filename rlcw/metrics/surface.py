"""Surface metrics of stories: the columns of the Agents' Room paper's Table 2 (pure maths).

Per story, then averaged over a system's stories (percentages in 0-100 as the paper prints them):

- `words`: whitespace-separated words (`rlcw.metrics.text.count_words`, the project's one word count).
- `paragraphs`: non-empty newline-separated lines (TELL ME A STORY separates paragraphs by single
  newlines; counting blank-line blocks would see one paragraph per story).
- `article_pct` / `pronoun_pct`: share of sentences (`split_sentences`) whose first word
  (`tokens`, so leading quotes are skipped) is an article (a, an, the) / a personal pronoun
  (subject and object forms: i, you, he, she, it, we, they, me, him, her, us, them; possessives
  and demonstratives do not count). Mean of per-story shares.
- `unique_pct`: distinct whitespace words / words (case and attached punctuation kept: the plain
  `len(set(text.split())) / len(text.split())`).
- `intra_trigram_rep_pct`: share of a story's word trigrams that repeat an earlier trigram of the
  same story (Yao et al. 2019 intra-story repetition over the whole story; `repetition_rate`).
- `inter_trigram_rep_pct`: share of a story's word-trigram occurrences that also occur in another
  story of the same system (Yao et al. 2019 / Goldfarb-Tarrant et al. 2020 inter-story repetition,
  per story instead of per sentence position, since the stories are long). It grows with the
  number of stories compared: compare systems on the same prompts.
- `prompt_trigram_overlap`: distinct story trigrams also in the prompt / distinct story trigrams
  (a proportion, 0-1).
- `rouge_l`: ROUGE-L F1 x 100 against the record's `reference` (rouge-score, stemming on); absent
  without references. `bertscore_f1` (optional extra): `bertscore_f1s` with the `bert_score` package.

Calibration on the TELL ME A STORY train+validation human stories (175) against the Humans row of
Table 2 (test split, 55 stories): words 1,485 (1,439), paragraphs 36.6 (32.91), article 9.35
(10.01), pronoun 32.05 (32.37), unique 47.63 (50.35), intra 2.75 (15.53), inter 18.99 (19.24;
10.84 on the 52 validation stories alone), overlap .0042 (.0020). Intra cannot be matched with
word trigrams (lower-cased words give 2.8; bigrams 14.3, model-tokenizer trigrams 7.1): the paper's
unit is not stated, so rlcw keeps the documented word-trigram definition.

    from rlcw.metrics.surface import system_metrics, markdown_table
    table = {name: system_metrics(records) for name, records in by_system.items()}
"""

from __future__ import annotations

import functools
from collections import Counter

from rlcw.metrics.text import count_words, ngrams, repetition_rate, split_sentences, tokens

ARTICLES = frozenset({"a", "an", "the"})
PRONOUNS = frozenset({"i", "you", "he", "she", "it", "we", "they", "me", "him", "her", "us", "them"})
COLUMNS = (
    "words",
    "paragraphs",
    "article_pct",
    "pronoun_pct",
    "unique_pct",
    "intra_trigram_rep_pct",
    "inter_trigram_rep_pct",
    "prompt_trigram_overlap",
    "rouge_l",
    "bertscore_f1",
)


def paragraphs(text: str) -> int:
    """Non-empty lines."""
    return sum(1 for line in text.split("\n") if line.strip())


def sentence_start_pct(text: str, first_words: frozenset[str]) -> float:
    """Percentage of sentences whose first word is in `first_words` (0 for a text without sentences)."""
    starts = [t[0] for t in (tokens(s) for s in split_sentences(text)) if t]
    return 100.0 * sum(w in first_words for w in starts) / len(starts) if starts else 0.0


def unique_pct(text: str) -> float:
    words = text.split()
    return 100.0 * len(set(words)) / len(words) if words else 0.0


def intra_trigram_rep_pct(text: str) -> float:
    return 100.0 * repetition_rate(text, 3)


def inter_trigram_rep_pcts(texts: list[str]) -> list[float]:
    """Per text: percentage of its trigram occurrences that occur in at least one other text."""
    grams = [ngrams(tokens(t), 3) for t in texts]
    df: Counter = Counter()
    for g in grams:
        df.update(set(g))
    out = []
    for g in grams:
        shared = sum(1 for x in g if df[x] > 1)  # x is in this text, so df > 1 means another text has it
        out.append(100.0 * shared / len(g) if g else 0.0)
    return out


def prompt_trigram_overlap(story: str, prompt: str) -> float:
    story_grams = set(ngrams(tokens(story), 3))
    if not story_grams:
        return 0.0
    return len(story_grams & set(ngrams(tokens(prompt), 3))) / len(story_grams)


@functools.cache
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(story: str, reference: str) -> float:
    """ROUGE-L F1 x 100 (rouge-score's tokenizer, Porter stemming)."""
    return 100.0 * _rouge().score(reference, story)["rougeL"].fmeasure


def bertscore_f1s(stories: list[str], references: list[str], model_type: str) -> list[float]:
    """BERTScore F1 per story (optional extra: needs `pip install bert-score` and the model locally)."""
    from bert_score import score

    _, _, f1 = score(stories, references, model_type=model_type, verbose=False)
    return [float(x) for x in f1]


def story_metrics(story: str, prompt: str, reference: str | None = None) -> dict[str, float]:
    """Every per-story column except the cross-story ones (inter repetition, BERTScore)."""
    out = {
        "words": float(count_words(story)),
        "paragraphs": float(paragraphs(story)),
        "article_pct": sentence_start_pct(story, ARTICLES),
        "pronoun_pct": sentence_start_pct(story, PRONOUNS),
        "unique_pct": unique_pct(story),
        "intra_trigram_rep_pct": intra_trigram_rep_pct(story),
        "prompt_trigram_overlap": prompt_trigram_overlap(story, prompt),
    }
    if reference:
        out["rouge_l"] = rouge_l(story, reference)
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def system_metrics(records: list[dict], bertscore_model: str | None = None) -> dict[str, float]:
    """Means over one system's story records (`story`, `prompt`, optional `reference`) + `stories`."""
    rows = [story_metrics(r["story"], r["prompt"], r.get("reference")) for r in records]
    for row, inter in zip(rows, inter_trigram_rep_pcts([r["story"] for r in records]), strict=False):
        row["inter_trigram_rep_pct"] = inter
    out: dict[str, float] = {"stories": float(len(records))}
    for col in COLUMNS:
        values = [row[col] for row in rows if col in row]
        if values and len(values) == len(rows):  # rouge_l only when every record has a reference
            out[col] = _mean(values)
    refs = [r.get("reference") for r in records]
    if bertscore_model and all(refs):
        out["bertscore_f1"] = _mean(bertscore_f1s([r["story"] for r in records], refs, bertscore_model))
    return out


def _fmt(col: str, value: float | None) -> str:
    if value is None:
        return "-"
    if col in ("words", "stories"):
        return f"{value:,.0f}"
    if col in ("prompt_trigram_overlap", "bertscore_f1"):
        return f"{value:.4f}"
    return f"{value:.2f}"


def markdown_table(results: dict[str, dict[str, float]]) -> str:
    """One row per system, the Table 2 columns that any system has."""
    cols = ["stories"] + [c for c in COLUMNS if any(c in r for r in results.values())]
    lines = ["| system | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(c, r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"
