"""Agents' Room (Huot et al.): planning and writing agents sharing a labelled scratchpad.

scratchpad.py (the shared, labelled notes and how they are fitted into a context budget),
agents.py (the nine agents + finalizer + E2E, their labels and prompts), orchestrator.py (who
speaks next; the paper's fixed order by default), variants.py (e2e, plan, write, plan_write and
the batched run), backends.py (local transformers model with optional per-agent LoRA adapters,
or an OpenAI-compatible server), synthetic.py (teacher back-translation for agent training),
rl.py (a variant as the story producer inside RL).
"""
