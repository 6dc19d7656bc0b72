"""The folded export forms of both stages compute what the training model computes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from omni_vla_policies.export import PrefixStage, example_inputs, export_onnx, flow_programs, stage_specs
from omni_vla_policies.export_fold import folded, folded_prefix
from omni_vla_policies.model import ModelConfig, VLAPolicy
from fixtures_policy import tiny_model_config


def _trained_looking_policy(cfg: ModelConfig, seed: int = 0) -> VLAPolicy:
    """Random weights with non-unit norm gains and non-trivial statistics (a fold that dropped one would show)."""
    torch.manual_seed(seed)
    model = VLAPolicy(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("n1.weight", "n2.weight", "n3.weight", "out_norm.weight")):
                p.copy_(0.5 + torch.rand_like(p))
            elif name.endswith(("_type", "bias")):
                p.copy_(0.1 * torch.randn_like(p))
        d = cfg.action_dim
        model.norm.set({"state_mean": torch.randn(d).tolist(), "state_std": (0.2 + torch.rand(d)).tolist(),
                        "action_mean": (0.1 * torch.randn(d)).tolist(), "action_std": (0.05 + 0.1 * torch.rand(d)).tolist()})
    return model


def _flow_inputs(cfg: ModelConfig, d: int, seed: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    h, a = cfg.horizon, cfg.action_dim
    mask = (torch.arange(h) < d).float().view(1, h, 1)
    return (torch.randn(1, cfg.context_len, cfg.width, generator=g), torch.randn(1, a, generator=g),
            torch.randn(1, h, a, generator=g), torch.randn(1, h, a, generator=g), mask)


@pytest.mark.parametrize("action_mode", ["delta", "absolute"])
def test_folded_head_matches_the_training_head_for_every_prefix_length(action_mode: str) -> None:
    cfg = tiny_model_config(action_mode=action_mode, num_steps=5, head_layers=2)
    model = _trained_looking_policy(cfg)
    head = folded(model.flow_head)
    for d in range(cfg.max_prefix + 1):
        x = _flow_inputs(cfg, d)
        with torch.inference_mode():
            ref, out = model.flow_head(*x), head(*x)
        assert out.shape == ref.shape
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=2e-5 * float(ref.abs().max()))
        assert torch.equal(out[0, :d], x[3][0, :d]), "pinned rows must come back exactly as committed"


def test_folded_head_differs_when_a_weight_changes() -> None:
    """The fold reads the weights at build time; a head built from other weights gives other actions."""
    cfg = tiny_model_config(num_steps=3)
    model = _trained_looking_policy(cfg)
    before = folded(model.flow_head)
    with torch.no_grad():
        model.flow_head.blocks[0].n3.weight.mul_(2.0)
    x = _flow_inputs(cfg, 2)
    with torch.inference_mode():
        assert not torch.allclose(before(*x), model.flow_head(*x), atol=1e-4)
        np.testing.assert_allclose(folded(model.flow_head)(*x).numpy(), model.flow_head(*x).numpy(), atol=1e-5)


def test_exported_flow_programs_run_fewer_nodes_than_the_unrolled_training_head(tmp_path: Path) -> None:
    """What one inference executes (init + N x step + finish) against the training head exported unrolled."""
    cfg = tiny_model_config(num_steps=3)
    model = _trained_looking_policy(cfg)
    specs = stage_specs(cfg)
    ins = specs["flow_init"][0]
    args = _flow_inputs(cfg, 2)

    class Reference(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = model.flow_head

        def forward(self, *a: torch.Tensor) -> torch.Tensor:
            return self.head(*a)

    with torch.no_grad():
        export_onnx(Reference().eval(), args, [t.name for t in ins], ["actions"], tmp_path / "reference.onnx")
        nodes = {}
        for name, module in flow_programs(model).items():
            p_ins, p_outs = specs[name]
            export_onnx(module, example_inputs(p_ins), [t.name for t in p_ins], [t.name for t in p_outs], tmp_path / f"{name}.onnx")
            nodes[name] = _compute_nodes(tmp_path / f"{name}.onnx")
    executed = nodes["flow_init"] + cfg.num_steps * nodes["flow_step"] + nodes["flow_finish"]
    n_ref = _compute_nodes(tmp_path / "reference.onnx")
    assert executed < 0.8 * n_ref, (nodes, n_ref)


def test_flow_programs_chained_by_hand_equal_the_training_head() -> None:
    """init -> N x step (one-hot step index) -> finish, called as the runtimes call them."""
    cfg = tiny_model_config(num_steps=4, head_layers=2)
    model = _trained_looking_policy(cfg)
    progs = flow_programs(model)
    x_in = _flow_inputs(cfg, 3)
    with torch.inference_mode():
        x, *kv = progs["flow_init"](*x_in)
        assert [tuple(t.shape) for t in (x, *kv)] == [t.shape for t in stage_specs(cfg)["flow_init"][1]]
        for i in range(cfg.num_steps):
            x = progs["flow_step"](x, x_in[4], torch.eye(cfg.num_steps)[i : i + 1], *kv)
        out = progs["flow_finish"](x, x_in[1], x_in[3], x_in[4])
        ref = model.flow_head(*x_in)
        skipped = progs["flow_finish"](progs["flow_step"](x, x_in[4], torch.eye(cfg.num_steps)[:1], *kv), x_in[1], x_in[3], x_in[4])
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=2e-5 * float(ref.abs().max()))
    assert not torch.allclose(skipped, ref, atol=1e-4), "one more step must change the actions"


def _compute_nodes(p: Path) -> int:
    return sum(n.op_type not in ("Constant", "Identity") for n in onnx.load(str(p)).graph.node)


def _prefix_inputs(cfg: ModelConfig, seed: int = 2) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    s = cfg.image_size
    return (torch.rand(1, 3, s, s, generator=g), torch.rand(1, 3, s, s, generator=g),
            torch.randn(1, cfg.state_dim, generator=g), torch.randn(1, cfg.embedding_dim, generator=g))


@pytest.mark.parametrize("keypoints", [4, 0])
def test_folded_prefix_matches_the_training_encoder_with_and_without_keypoints(keypoints: int) -> None:
    cfg = tiny_model_config(keypoints=keypoints, prefix_layers=2)
    model = _trained_looking_policy(cfg)
    enc = folded_prefix(model.prefix_encoder)
    for seed in range(3):
        x = _prefix_inputs(cfg, seed)
        with torch.inference_mode():
            ref, out = model.prefix_encoder(*x), enc(*x)
        assert out.shape == ref.shape == (1, cfg.context_len, cfg.width)
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=2e-5 * float(ref.abs().max()))
    with torch.inference_mode():  # an all-black border is where the padding fold would show if it were wrong
        x = (torch.zeros_like(x[0]), torch.ones_like(x[1]), x[2], x[3])
        np.testing.assert_allclose(enc(*x).numpy(), model.prefix_encoder(*x).numpy(), rtol=0, atol=1e-4)


def test_folded_prefix_refuses_per_channel_pixel_means() -> None:
    model = _trained_looking_policy(tiny_model_config())
    model.prefix_encoder.vision.pix_mean.copy_(torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1))
    with pytest.raises(ValueError, match=r"pixel means \[0.4.*differ per channel"):
        folded_prefix(model.prefix_encoder)


def test_exported_prefix_stage_is_the_folded_graph_with_fewer_nodes(tmp_path: Path) -> None:
    cfg = tiny_model_config(prefix_layers=2)
    model = _trained_looking_policy(cfg)
    ins, outs = stage_specs(cfg)["prefix"]
    args = _prefix_inputs(cfg)
    names, out_names = [t.name for t in ins], [t.name for t in outs]
    with torch.no_grad():
        export_onnx(model.prefix_encoder, args, names, out_names, tmp_path / "reference.onnx")
        export_onnx(PrefixStage(model).eval(), args, names, out_names, tmp_path / "folded.onnx")
    n_ref, n_fold = _compute_nodes(tmp_path / "reference.onnx"), _compute_nodes(tmp_path / "folded.onnx")
    assert n_fold < 0.8 * n_ref, (n_fold, n_ref)
