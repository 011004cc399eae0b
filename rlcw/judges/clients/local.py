"""`kind=local`: a causal LM loaded through rlcw.models, batched greedy generation, label probabilities
from one forward, a weights fingerprint in the cache key."""

from __future__ import annotations

import hashlib
import threading

from rlcw.errors import RlcwError
from rlcw.judges.cache import cache_key
from rlcw.judges.clients.base import ChatClient, ClientConfig, Messages, renormalise


class LocalClient(ChatClient):
    """A causal LM loaded through rlcw.models, greedy at temperature 0, one call at a time."""

    concurrency_cap = 1

    def __init__(self, cfg: ClientConfig):
        super().__init__(cfg)
        from rlcw.models import load_causal_lm, load_tokenizer

        self.tokenizer = load_tokenizer(cfg.model, padding_side="left")
        self.model = load_causal_lm(cfg.model).eval()
        self._gen_lock = threading.Lock()
        self.fingerprint = weights_fingerprint(self.model)

    @property
    def model_key(self) -> str:
        return f"local:{self.cfg.model}:{self.fingerprint}"

    def _label_probs(self, batch, prefix, labels):
        """One left-padded forward: P(label's first token) after `chat prompt + prefix`, renormalised."""
        import torch

        ids = []
        for label in labels:
            tokens = self.tokenizer(f" {label}", add_special_tokens=False)["input_ids"]
            ids.append(tokens[0])
        if len(set(ids)) != len(ids):
            raise RlcwError(f"labels {labels} share their first token in this tokenizer", where=self.cfg.model)
        with self._gen_lock, torch.no_grad():
            texts = [
                self.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) + prefix
                for m in batch
            ]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            logits = self.model(**enc).logits[:, -1, :].float()  # (B, V): left padding puts every end last
            probs = torch.softmax(logits, dim=-1)[:, ids]  # (B, n_labels)
            with self._lock:
                self.stats["prompt_tokens"] += int(enc["attention_mask"].sum())
        return [renormalise(dict(zip(labels, row, strict=True))) for row in probs.tolist()]

    def _generate(self, enc, max_tokens: int, temperature: float, seed: int | None):
        """The new tokens of one `generate` call on encoded prompts, (B, T_new): greedy at temperature 0
        (the caller holds the generation lock and no_grad)."""
        import torch

        if seed is not None:
            torch.manual_seed(seed)
        sample = temperature > 0
        gen = self.model.generate(
            **enc,
            max_new_tokens=max_tokens,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=None,
            top_k=None,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        return gen[:, enc["input_ids"].shape[1] :]

    def _complete(self, messages, max_tokens, temperature, seed):
        import torch

        with self._gen_lock, torch.no_grad():
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
            new = self._generate(enc, max_tokens, temperature, seed)[0]  # (T_new,)
            return (
                self.tokenizer.decode(new, skip_special_tokens=True),
                int(enc["input_ids"].shape[1]),
                int(new.shape[0]),
            )

    def _complete_batch(
        self, batch: list[Messages], max_tokens: int, temperature: float, seed: int | None
    ) -> list[tuple[str, int, int]]:
        """One left-padded `generate` call for several conversations (replies in input order)."""
        import torch

        with self._gen_lock, torch.no_grad():
            texts = [self.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in batch]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            new = self._generate(enc, max_tokens, temperature, seed)  # (B, T_new)
            eos = self.tokenizer.eos_token_id
            out = []
            for i in range(len(batch)):
                n_out = int(new.shape[1]) if eos is None else int((new[i] != eos).cumprod(0).sum().item()) + 1
                n_out = min(n_out, int(new.shape[1]))
                out.append(
                    (
                        self.tokenizer.decode(new[i], skip_special_tokens=True),
                        int(enc["attention_mask"][i].sum()),
                        n_out,
                    )
                )
            return out

    def _reply_all(self, conversations, max_tokens, temperature, seed, cache_tag, bar) -> list[str]:
        """Uncached conversations go through the model in batches of `concurrency` (sorted by length, left-padded):
        several times the throughput of one call at a time."""
        params = self.request_params(max_tokens, temperature, seed)
        keys = [cache_key(self.model_key, cache_tag, m, params) for m in conversations]
        cache = self._cache_for(temperature)
        out: list[str | None] = [cache.get(k) if cache is not None else None for k in keys]
        hits = sum(r is not None for r in out)
        with self._lock:
            self.stats["cache_hits"] += hits
        bar.update(hits)
        todo = sorted(
            (i for i, r in enumerate(out) if r is None), key=lambda i: sum(len(m["content"]) for m in conversations[i])
        )
        batches = self._in_batches(
            conversations, todo, lambda b: self._complete_batch(b, max_tokens, temperature, seed)
        )
        for chunk, replies in batches:
            for i, (reply, n_in, n_out) in zip(chunk, replies, strict=False):
                out[i] = reply
                with self._lock:
                    self.stats["prompt_tokens"] += n_in
                    self.stats["completion_tokens"] += n_out
                if cache is not None:
                    cache.put(keys[i], reply, model=self.model_key, tag=cache_tag, tokens=n_in + n_out)
            bar.update(len(chunk))
        return [str(r) for r in out]


def weights_fingerprint(model) -> str:
    """A short hash of a model's weights: names, shapes, dtypes and up to 4,096 evenly spaced values
    of every tensor (any fine-tune or merged adapter changes it; seconds even for large models)."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            flat = tensor.detach().reshape(-1)
            step = max(1, flat.numel() // 4096)
            h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            h.update(flat[::step].to(torch.float32).cpu().numpy().tobytes())
    return h.hexdigest()[:16]
