"""The export form of an imported ACT (what ExecuTorch and MNN are given) computes ActInference's function, and its
ExecuTorch program runs whole inside XNNPACK: LayerNorm and 4-D attention left to portable kernels had split the
reference form into 22 XNNPACK partitions (results/lerobot_act/README.md, 2026-12-02)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from lerobot_env import lerobot_checkpoint

from omni_vla_policies.act_model import ActInference, act_export_form
from omni_vla_policies.converters import export_pte
from omni_vla_policies.lerobot_checkpoint import read_act_checkpoint

BASE = {"seed": 7, "cameras": ["front", "wrist"], "image_size": [64, 64], "state_dim": 8, "action_dim": 8}
POST_NORM = {**BASE, "act": {"chunk_size": 10, "n_action_steps": 5, "dim_model": 64, "n_heads": 4, "dim_feedforward": 128,
                             "n_encoder_layers": 2, "n_decoder_layers": 1, "use_vae": False}}
PRE_NORM_TWO_DECODERS = {**BASE, "seed": 8, "cameras": ["front", "wrist", "side"], "image_size": [48, 96],
                         "act": {**POST_NORM["act"], "pre_norm": True, "n_decoder_layers": 2}}


def _model(tmp: Path, spec: dict) -> ActInference:
    ck = read_act_checkpoint(lerobot_checkpoint(tmp, spec))
    return ActInference(ck.weights, ck.shape).eval()


def _inputs(model: ActInference, seed: int) -> tuple[torch.Tensor, ...]:
    g, s = torch.Generator().manual_seed(seed), model.shape
    return tuple(torch.randn(1, 3, *s.image_hw, generator=g) for _ in range(s.cameras)) + (torch.randn(1, s.state_dim, generator=g),)


@pytest.fixture(scope="module")
def post_norm(tmp_path_factory: pytest.TempPathFactory) -> ActInference:
    return _model(tmp_path_factory.mktemp("act_post"), POST_NORM)


@pytest.mark.parametrize("spec", [POST_NORM, PRE_NORM_TWO_DECODERS], ids=["post_norm", "pre_norm_two_decoders"])
@pytest.mark.parametrize("xnnpack", [True, False], ids=["xnnpack_form", "onnx_form"])
def test_the_export_form_computes_the_same_chunk_as_actinference(spec: dict, xnnpack: bool,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    model = _model(tmp_path_factory.mktemp("act"), spec)
    form = act_export_form(model, xnnpack=xnnpack)
    with torch.no_grad():
        for seed in (0, 1):
            x = _inputs(model, seed)
            ref, got = model(*x).numpy().astype(np.float64), form(*x).numpy()
            assert got.shape == ref.shape
            snr = 10 * np.log10(np.sum(ref ** 2) / np.sum((got - ref) ** 2))
            assert snr > 100.0, f"export form differs from ActInference: {snr:.1f} dB"


def test_the_executorch_program_is_one_xnnpack_delegate_without_portable_layer_norm(
        post_norm: ActInference, tmp_path: Path) -> None:
    from executorch.exir._serialize._program import deserialize_pte_binary  # optional: exir loads for seconds

    path = tmp_path / "act.pte"
    with torch.no_grad():
        export_pte(act_export_form(post_norm, xnnpack=True), _inputs(post_norm, 0), path)
    prog = deserialize_pte_binary(path.read_bytes())
    plan = getattr(prog, "program", prog).execution_plan[0]
    names = [o.name for o in plan.operators]
    kinds = [type(i.instr_args).__name__ for c in plan.chains for i in c.instructions]
    portable = Counter(names[i.instr_args.op_index] for c in plan.chains for i in c.instructions
                       if type(i.instr_args).__name__ == "KernelCall")
    assert kinds.count("DelegateCall") == 1, f"{kinds.count('DelegateCall')} XNNPACK partitions, portable: {portable}"
    assert not {"aten::native_layer_norm", "aten::expand_copy", "aten::bmm", "aten::addmm"} & set(portable), portable
