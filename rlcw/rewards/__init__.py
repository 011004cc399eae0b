"""Rewards: reward callables with TRL's signature, their spec parser (factory), the reward server and client."""
