"""Shared-trunk ensembles on model families whose forward changes `inputs_embeds` (Granite multiplies them by its
embedding_multiplier; transformers' Gemma scales inside its embedding module, so its forward does not): such a
folder scores as whole members, equal to each member's own full forward, and joint training refuses them."""

from __future__ import annotations

import copy

import pytest
import torch

from rlcw.errors import RlcwError
from rlcw.rm.ensemble import (
    EnsembleManifest,
    EnsembleRM,
    Member,
    member_tensors,
    passes_hidden_through,
    save_manifest,
)


def _tiny(kind: str):
    from transformers import (
        GemmaConfig,
        GemmaForSequenceClassification,
        GraniteConfig,
        GraniteForCausalLM,
        LlamaConfig,
        LlamaForSequenceClassification,
    )

    sizes = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        pad_token_id=0,
        num_labels=1,
    )
    torch.manual_seed(0)
    if kind == "gemma":
        return GemmaForSequenceClassification(GemmaConfig(**sizes))
    if kind == "granite":  # a causal LM: the family has no sequence-classification head in transformers
        sizes.pop("num_labels"), sizes.pop("head_dim")
        return GraniteForCausalLM(GraniteConfig(**sizes, embedding_multiplier=12.0))
    return LlamaForSequenceClassification(LlamaConfig(**sizes))


def _ensemble_folder(tmp_path, model, shared: int, k: int = 2):
    """An ensemble folder by hand: the base model, k members whose top layers, norm and head are perturbed."""
    model.save_pretrained(tmp_path)
    (tmp_path / "members").mkdir()
    members, wholes = [], []
    for j in range(k):
        m = copy.deepcopy(model)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "layers.2." in name or name.startswith(("model.norm", "score")):
                    p.add_(0.05 * (j + 1) * torch.randn_like(p))
        from safetensors.torch import save_file

        save_file(member_tensors(m.state_dict(), "model", shared), str(tmp_path / "members" / f"{j}.safetensors"))
        members.append(Member(f"members/{j}.safetensors", seed=j, offset=0.0))
        wholes.append(m)
    save_manifest(EnsembleManifest(members, shared_layers=shared, aggregate="mean"), tmp_path)
    return wholes


@pytest.mark.parametrize(("kind", "passes"), [("llama", True), ("gemma", True), ("granite", False)])
def test_the_check_reads_the_family_forward(kind, passes):
    assert passes_hidden_through(_tiny(kind).model) is passes


@pytest.mark.parametrize(("kind", "rescales"), [("llama", False), ("gemma", False), ("llama", True)])
def test_shared_trunk_folder_scores_equal_each_members_full_forward(tmp_path, monkeypatch, kind, rescales):
    wholes = _ensemble_folder(tmp_path, _tiny(kind), shared=2)
    if rescales:  # a family whose forward changes inputs_embeds, as the check would find it (Granite has no RM head)
        monkeypatch.setattr("rlcw.rm.ensemble.passes_hidden_through", lambda backbone: False)
    rm = EnsembleRM(tmp_path).eval()
    assert rm.whole is rescales
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 11, 12, 13]])  # left padding: the last token is read either way
    mask = (ids != 0).long()
    with torch.no_grad():
        got = rm(ids, mask)  # (B, k)
        want = torch.stack([w.eval()(input_ids=ids, attention_mask=mask).logits[:, 0] for w in wholes], dim=-1)
    assert torch.allclose(got, want, atol=1e-5), (got, want)


def test_joint_training_refuses_a_family_that_rescales_inputs_embeds():
    from rlcw.rm.ensemble_trainer import SharedTrunk

    with pytest.raises(RlcwError, match="inputs_embeds") as exc:
        SharedTrunk(_tiny("granite"), [], shared_layers=2)
    assert "rm.ensemble.joint=false" in str(exc.value)
    SharedTrunk(_tiny("llama"), [], shared_layers=2)  # a Llama trunk is taken
