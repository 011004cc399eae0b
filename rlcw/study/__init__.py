"""Human studies: select story pairs, blind them, assign them to raters, export packets, ingest answers.

    selection.py    pairs to rate: RM best vs worst of n per prompt (LitBench), two systems (policy vs base)
    blinding.py     random A/B under a seed; the identities go to a key file with a checksum
    latin.py        Latin-square assignment: nobody sees a prompt twice, at most 5 items per sitting
    export_html.py  a self-contained offline HTML page per sitting that downloads answers.json
    export_csv.py   one row per item for survey platforms
    labelstudio.py  Label Studio tasks and labeling config
    ingest.py       validate answers, unblind, comparisons per dimension
    power.py        pairs needed to detect a win rate
    evaluator.py    the "study" evaluator hook for RL runs

Commands: `rlcw study-export`, `rlcw study-ingest` (rlcw/recipes/study_export.py, study_ingest.py).
"""

# Agents' Room rating dimensions (H3's judge keys) and the 3-point comparative scale.
DIMENSIONS = ("plot", "creativity", "development", "language_use", "overall")
LABELS = ("A", "same", "B")
