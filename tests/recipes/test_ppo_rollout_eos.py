"""PPO samples from the distribution its log-probs describe: EOS is allowed as the first response token."""

from __future__ import annotations

import torch


def test_eos_first_is_sampled_when_the_model_wants_it(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    from rlcw.rl.ppo.rollout import response_logprobs, sample_rollout

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    eos = tokenizer.eos_token_id
    with torch.no_grad():  # an output bias that makes EOS ~certain at every position
        head = model.get_output_embeddings()
        head.bias = torch.nn.Parameter(torch.zeros(head.out_features))
        head.bias[eos] = 50.0
    queries = [tokenizer("Once upon a time", add_special_tokens=False)["input_ids"]] * 3
    torch.manual_seed(0)
    ro = sample_rollout(model, queries, pad_id=tokenizer.pad_token_id, eos_ids=[eos], max_new_tokens=4)
    logp, _ = response_logprobs(model, ro)
    assert logp[:, 0].exp().min() > 0.99  # the log-probs say EOS first ...
    assert ro.response[:, 0].tolist() == [eos] * 3  # ... and the sampler draws it (min_new_tokens=1 forbade it)
    assert ro.response_mask.sum(1).tolist() == [1, 1, 1] and ro.ended.all()
