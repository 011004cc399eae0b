"""The learning probe's story log-probs, computed through the LM head on story positions only, equal a full
forward's, for prompts of different lengths (right padding)."""

from __future__ import annotations

import torch


def test_story_logprobs_equal_the_full_forward(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    from rlcw.generation import chat_messages
    from rlcw.measure.probe import sequence_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    stories = [
        {"prompt": "Rain.", "story": "It rained on the roof all night and nobody slept."},
        {"prompt": "Write about a lighthouse keeper who finds a letter.", "story": "The letter was dry."},
        {"prompt": "Snow on a long road through the hills.", "story": "Tracks, then none."},
    ]
    got = sequence_logprobs(model, tokenizer, stories, None)
    for row, lp in zip(stories, got, strict=True):
        prompt = tokenizer.apply_chat_template(chat_messages(None, row["prompt"]), add_generation_prompt=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        story = tokenizer(row["story"], add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + story])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]  # (S, V)
        want = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(story)[:, None]).squeeze(1)
        assert lp.shape == want.shape
        torch.testing.assert_close(lp, want, atol=1e-5, rtol=1e-5)
