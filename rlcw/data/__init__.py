"""Data: story and preference records, loaders, prompts, corruption pairs, bundled data."""
