"""LLM judges: clients (OpenAI-compatible, local, scripted), protocol templates, strict parsers,
reply cache, aggregation, the `rlcw judge` stage's library and the RL evaluator hook."""
