"""What recipes share: config sections, prompts, config checks, the run lifecycle, model helpers."""
