"""Judge clients: any OpenAI-compatible server, a local transformers model, or a scripted one.

    from rlcw.judges.clients.base import ClientConfig
    from rlcw.judges.clients.factory import make_client
    client = make_client(ClientConfig(kind="openai", base_url="http://127.0.0.1:8000/v1", model="m",
                                      cache_dir="runs/judge_cache", concurrency=4))
    reply = client.chat([{"role": "user", "content": "Say hi"}], max_tokens=16)
    replies = client.chat_many([conv1, conv2], cache_tag="litbench-writerly-v1")

Every client caches replies (when `cache_dir` is set) under a key made of the judge's identity
(kind, server URL or local weights fingerprint, model name), the cache tag (template version),
the messages and every request parameter, keeps a call/token budget and counts what it did in
`client.stats`. Replies sampled at temperature > 0 are never cached (not even per sample index):
a sampled reply is one draw, and replaying it would hide the judge's randomness.

Logprob verdicts: `client.verdict_probs(convs, "Preferred:", ("A", "B"))` appends the prefix as
the start of the judge's answer and reads the probabilities of the labels' first tokens at the
next position, renormalised over the labels (local models; OpenAI-compatible servers that return
`top_logprobs` and continue a final assistant message, e.g. vLLM, through `extra_body`).

`kind=replay` answers from stored replies (`replies=FILE`: rlcw's verdicts.jsonl or any jsonl of
{"request_key" or "request_id" (or "key"/"id"), "raw"/"reply"/"response"}) and never calls a model.

The OpenAI client retries timeouts, connection errors, 5xx and 429 with exponential backoff,
honouring a server's Retry-After, and passes `max_completion_tokens`, `response_format` and
`extra_body` through. The API key is read from the
environment variable named by `api_key_env`, never logged or written anywhere, and never sent
to a plain-http URL outside this machine unless `allow_insecure_key=true`.
`temperature`, `max_tokens` and `seed` left at None in a call take the config's values.
"""
