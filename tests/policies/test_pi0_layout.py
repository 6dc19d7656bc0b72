"""The pi0 reader's sizes at LeRobot's default size, from the layout LeRobot 0.6.1 wrote there (benchmarks/pi0_probe:
pi0 `gemma_2b` + `gemma_300m`, 28 px images; layer 0's shapes, repeated per layer) without 16 GB of weights: the
header alone is read. The test-size parity against LeRobot's own code is tests/policies/test_import_pi0.py.
"""
from __future__ import annotations

import pytest

from omni_vla_policies.lerobot_checkpoint import CheckpointError
from omni_vla_policies.lerobot_pi0 import EXPERT, VLM, _arch

VT = VLM + "vision_tower.vision_model."


def default_layout(expert_depth: int = 18) -> dict[str, list[int]]:
    shapes = {VT + "embeddings.patch_embedding.weight": [1152, 3, 14, 14],
              VT + "embeddings.position_embedding.weight": [4, 1152],
              VLM + "language_model.embed_tokens.weight": [257152, 2048]}
    shapes |= {f"{VT}encoder.layers.{i}.mlp.fc1.weight": [4304, 1152] for i in range(27)}
    for prefix, width, mlp, depth in ((VLM + "language_model.", 2048, 16384, 18), (EXPERT, 1024, 4096, expert_depth)):
        for i in range(depth):
            shapes |= {f"{prefix}layers.{i}.self_attn.q_proj.weight": [2048, width],
                       f"{prefix}layers.{i}.self_attn.k_proj.weight": [256, width],
                       f"{prefix}layers.{i}.mlp.gate_proj.weight": [mlp, width]}
    return shapes


CONFIG = {"type": "pi0", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
          "image_resolution": [28, 28], "chunk_size": 8, "num_inference_steps": 3, "max_state_dim": 8,
          "max_action_dim": 8, "tokenizer_max_length": 24}


def test_default_size_reads_as_lerobots_variant_table() -> None:
    a = _arch(CONFIG, default_layout(), 2, (48, 64), 6, 6)
    assert (a.vlm.width, a.vlm.depth, a.vlm.mlp_dim, a.vlm.num_heads, a.vlm.num_kv_heads, a.vlm.head_dim) == \
        (2048, 18, 16384, 8, 1, 256)
    assert (a.expert.width, a.expert.depth, a.expert.mlp_dim, a.expert.head_dim) == (1024, 18, 4096, 256)
    assert (a.vision.hidden_size, a.vision.num_attention_heads, a.vision.num_hidden_layers) == (1152, 16, 27)
    assert a.image_tokens == 4 and a.prefix_len == 2 * 4 + 24 + 1 and a.num_steps == 3 and not a.pi05


def test_a_known_variant_whose_weights_differ_is_refused_naming_it() -> None:
    shapes = default_layout()
    shapes[VLM + "language_model.layers.0.mlp.gate_proj.weight"] = [8192, 2048]
    with pytest.raises(CheckpointError, match="gemma_2b"):
        _arch(CONFIG, shapes, 2, (48, 64), 6, 6)


def test_an_expert_not_one_layer_per_vlm_layer_is_refused() -> None:
    with pytest.raises(CheckpointError, match="depth"):
        _arch({**CONFIG, "action_expert_variant": "custom"}, default_layout(expert_depth=12), 2, (48, 64), 6, 6)


def test_a_resolution_the_vision_tower_was_not_built_for_is_refused() -> None:
    with pytest.raises(CheckpointError, match="image_resolution"):
        _arch({**CONFIG, "image_resolution": [224, 224]}, default_layout(), 2, (48, 64), 6, 6)
