"""Pipelines: commands that chain other recipes' stages (the quickstart, the outcome study) share one stage runner
(`rlcw.pipelines.stages`) and keep their stage definitions here."""
