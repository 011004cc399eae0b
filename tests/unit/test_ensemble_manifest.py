"""RM-ensemble manifests (rlcw.rm.ensemble): loading, and bad manifests as errors naming file and key."""

from __future__ import annotations

import json

import pytest

from rlcw.errors import RlcwError
from rlcw.rm.ensemble import (
    MANIFEST_FILE,
    EnsembleManifest,
    Member,
    is_ensemble,
    is_trunk_key,
    layer_index,
    load_manifest,
    save_manifest,
)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "members").mkdir()
    for j in range(3):
        (tmp_path / "members" / f"{j}.safetensors").write_bytes(b"x")
    members = [Member(f"members/{j}.safetensors", seed=j, offset=0.1 * j) for j in range(3)]
    save_manifest(EnsembleManifest(members, shared_layers=22, aggregate="uwo", uwo_lambda=0.25), tmp_path)
    return tmp_path


def test_round_trip(folder):
    assert is_ensemble(folder) and not is_ensemble(folder / "members")
    m = load_manifest(folder)
    assert m.aggregate == "uwo" and m.uwo_lambda == 0.25 and m.shared_layers == 22 and m.bootstrap
    assert [(x.file, x.seed, x.offset) for x in m.members] == [
        ("members/0.safetensors", 0, 0.0),
        ("members/1.safetensors", 1, 0.1),
        ("members/2.safetensors", 2, 0.2),
    ]


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("aggregate", "max", r"field 'aggregate'.*unknown aggregate 'max'"),
        ("uwo_lambda", -0.5, r"field 'uwo_lambda'.*>= 0"),
        ("uwo_lambda", "big", r"field 'uwo_lambda'.*finite number"),
        ("shared_layers", None, r"field 'shared_layers'.*integer"),
        ("shared_layers", 1.5, r"field 'shared_layers'.*integer"),
        ("members", [], r"field 'members'.*non-empty list"),
        ("members", [{"seed": 0}], r"field 'members\[0\].file'"),
        ("members", [{"file": "members/7.safetensors"}], r"field 'members\[0\].file'.*does not exist"),
        ("members", [{"file": "members/0.safetensors", "offset": "nan"}], r"field 'offset'"),
    ],
)
def test_bad_manifest_names_file_and_key(folder, key, value, match):
    raw = json.loads((folder / MANIFEST_FILE).read_text())
    (folder / MANIFEST_FILE).write_text(json.dumps({**raw, key: value}))
    with pytest.raises(RlcwError, match=match) as err:
        load_manifest(folder)
    assert str(folder / MANIFEST_FILE) in str(err.value) and "hint:" in str(err.value)


def test_corrupt_or_missing_manifest(folder, tmp_path):
    (folder / MANIFEST_FILE).write_text("{")
    with pytest.raises(RlcwError, match="corrupt rlcw_ensemble.json"):
        load_manifest(folder)
    with pytest.raises(RlcwError, match="not an RM ensemble"):
        load_manifest(tmp_path / "members")


def test_which_tensors_a_member_owns():
    assert layer_index("model.layers.12.mlp.up_proj.weight", "model") == 12
    assert layer_index("model.norm.weight", "model") is None
    assert is_trunk_key("model.embed_tokens.weight", "model", 22)
    assert is_trunk_key("model.layers.21.self_attn.q_proj.weight", "model", 22)
    assert not is_trunk_key("model.layers.22.self_attn.q_proj.weight", "model", 22)
    assert not is_trunk_key("model.norm.weight", "model", 22) and not is_trunk_key("score.weight", "model", 22)
    assert not is_trunk_key("model.embed_tokens.weight", "model", 0)  # whole members share nothing
