"""rlcw.cluster: parameter counts, ZeRO memory and batch geometry checked by hand-worked arithmetic."""

from pathlib import Path

import pytest

from rlcw.cluster import geometry as G
from rlcw.cluster import memory as M
from rlcw.errors import RlcwError

SHAPES = Path(__file__).resolve().parents[1] / "assets" / "model_shapes"


def test_llama_8b_parameter_count_by_hand():
    s = M.load_shape(SHAPES / "meta-llama--Llama-3.1-8B")
    embed = 128256 * 4096  # 525,336,576
    layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096  # q, o; k, v; mlp; norms
    assert layer == 218_112_000
    assert s.params() == 2 * embed + 32 * layer + 4096 == 8_030_261_248  # untied: embed + lm_head + final norm
    assert s.params("score") == embed + 32 * layer + 4096 + 4096 == 7_504_928_768
    assert s.largest_layer() == embed


def test_tied_and_biased_shapes():
    one = M.load_shape(SHAPES / "meta-llama--Llama-3.2-1B")  # tied embeddings
    assert one.params() == 1_235_814_400
    qwen = M.load_shape(SHAPES / "Qwen--Qwen2.5-7B-Instruct")  # untied, q/k/v biases
    assert qwen.qkv_bias and qwen.params() == 7_615_616_512


def test_lora_params_by_hand():
    s = M.load_shape(SHAPES / "meta-llama--Llama-3.2-3B-Instruct")
    # r * (in + out): q 6144, k 4096, v 4096, o 6144, gate/up/down 11264 each = 54,272 per rank per layer
    assert s.lora_params(64) == 64 * 54_272 * 28 == 97_255_424
    assert s.lora_params(8, ("q_proj", "v_proj"), layers=4) == 8 * (6144 + 4096) * 4
    with pytest.raises(RlcwError, match="not a decoder linear"):
        s.lora_params(8, ("qkv",))


def test_zero_stages_by_hand_and_deepspeed():
    p, big = 8_030_261_248, 525_336_576
    z3 = M.model_states(p, p, 16, 3, "mixed", big)
    assert (z3.weights, z3.gradients, z3.optimizer, z3.gathered) == (
        2 * p // 16,
        4 * p // 16,
        12 * p // 16,
        4 * big,
    )
    assert z3.total == 11_135_390_208  # 18 P / 16 + 4 L
    z2 = M.model_states(p, p, 8, 2, "mixed")
    assert z2.total == 2 * p + 18 * p // 8
    assert M.model_states(p, p, 8, 0, "mixed").total == 20 * p
    assert M.model_states(p, p, 8, 0, "fp32").total == 16 * p
    lora = M.model_states(p, 1000, 8, 0, "mixed")  # frozen weights, only the adapter's grads and moments
    assert lora.total == 2 * p + 18 * 1000
    ds3 = M.deepspeed_estimate(p, big, 8, 2, 3)
    ds2 = M.deepspeed_estimate(p, big, 8, 1, 2)
    assert abs(z3.total / ds3 - 1) < 0.10 and abs(z2.total / ds2 - 1) < 0.10
    with pytest.raises(RlcwError, match="stage 4"):
        M.model_states(p, p, 8, 4)


def test_vllm_share():
    share = M.vllm_share(80 * M.GIB, 0.35, 8_030_261_248)
    assert share.reserved == 28 * M.GIB and share.weights == 16_060_522_496
    assert share.kv_cache == 28 * M.GIB - 16_060_522_496
    with pytest.raises(RlcwError, match="between 0 and 1"):
        M.vllm_share(80 * M.GIB, 1.2, 10)


def test_grpo_geometry_by_hand():
    g = G.grpo_geometry(16, 8, 8, grad_accum=2, max_completion_length=1024, num_prompts=100)
    assert (g.sequences, g.prompts, g.max_tokens) == (8 * 16 * 2, 32, 256 * 1024)
    assert g.steps_per_epoch == 100 // 32  # the partial last batch is dropped
    assert G.grpo_geometry(8, 8, 8, num_iterations=2, num_prompts=64).steps_per_epoch == 2 * 8


def test_grpo_divisibility_names_keys_and_nearest_values():
    with pytest.raises(RlcwError) as exc:
        G.grpo_geometry(8, 6, 4)
    text = str(exc.value)
    assert "train.batch_size=6" in text and "train.num_generations=4" in text and "4 or 8" in text
    with pytest.raises(RlcwError) as exc:
        G.grpo_geometry(16, 8, 8, grad_accum=4, num_prompts=48)
    assert "48 training prompts" in str(exc.value) and "world_size <= 12" in str(exc.value)


def test_world_fills_nodes():
    assert G.check_world(16, 8) == 2 and G.check_world(4, 8) == 1
    with pytest.raises(RlcwError) as exc:
        G.check_world(12, 8)
    assert "world_size=12" in str(exc.value) and "8 or 16" in str(exc.value)


def test_rm_and_ppo_geometry():
    g = G.rm_geometry(8, 4, 4, 2304, num_pairs=43_827, target_batch=128)
    assert (g.prompts, g.sequences, g.steps_per_epoch) == (128, 256, 343)  # ceil(43,827 / 128)
    with pytest.raises(RlcwError) as exc:
        G.rm_geometry(16, 4, 4, 2304, target_batch=128)
    assert "train.grad_accum=2 at world_size=16" in str(exc.value) and "world_size=8" in str(exc.value)
    p = G.ppo_geometry(8, 8, 2, 1, 2, 1024, num_prompts=1000)
    assert (p.prompts, p.max_tokens, p.steps_per_epoch) == (64, 64 * 1024, 15)
    with pytest.raises(RlcwError, match="train.minibatch_size"):
        G.ppo_geometry(8, 8, 3, 1, 2, 64)


def test_nearest_helpers():
    assert G.nearest_multiples(12, 8) == [8, 16]
    assert G.nearest_multiples(3, 8) == [8]
    assert G.nearest_valid(10, lambda n: n % 4 == 0) == [8, 12]
