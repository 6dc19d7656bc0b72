"""SmolVLA split into stages (vision per camera -> prefix KV cache -> expert step x N -> finish) and exported to
ONNX, ExecuTorch and MNN must compute what LeRobot 0.4.4's own SmolVLA computes, run in its own venv with the same
random weights: >= 40 dB per stage and end to end against predict_action_chunk. The architecture is the published
one at test size (policies/vla/smolvla_config.tiny); the full-size figures are in results/vla/.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from lerobot_env import lerobot_env, lerobot_python

from omni_vla_policies.vla.bench_vla import STAGES as STAGE_NAMES
from omni_vla_policies.vla.bench_vla import bench
from omni_vla_policies.vla.export_vla import build, export_stages
from omni_vla_policies.vla.model import SmolVLA
from omni_vla_policies.parity import snr_db
from omni_vla_policies.vla.parity_vla import run, spec
from omni_vla_policies.vla.runners import BACKENDS
from omni_vla_policies.vla.smolvla_config import full, tiny

REFERENCE = Path(__file__).resolve().parents[1] / "support" / "smolvla_reference.py"
PARITY_DB = 40.0
STAGES = ("vision", "prefix_keys", "prefix_values", "step", "end_to_end")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LeRobot's SmolVLAPolicy (random, seeded) at test size: its weights and its per-stage outputs."""
    root = tmp_path_factory.mktemp("smolvla_ref")
    (root / "spec.json").write_text(json.dumps(spec(tiny(), seed=1, valid_tokens=4)))
    out = subprocess.run([str(lerobot_python()), str(REFERENCE), str(root / "ref"), str(root / "spec.json")],
                         capture_output=True, text=True, timeout=600, env=lerobot_env())
    assert out.returncode == 0, out.stderr[-3000:]
    return root / "ref"


@pytest.fixture(scope="module")
def artifacts(reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every stage exported to every backend with LeRobot's weights."""
    out = tmp_path_factory.mktemp("smolvla_art")
    export_stages(build(tiny(), reference / "model.safetensors"), out, log=lambda _s: None)
    return out


def test_eager_stages_match_lerobots_smolvla_per_stage_and_end_to_end(reference: Path) -> None:
    snr = run(reference, None, ("torch",))["snr_db"]["torch"]
    assert all(snr[s] >= PARITY_DB for s in STAGES), snr


@pytest.mark.parametrize("backend", ["onnxruntime", "executorch", "mnn"])
def test_exported_stages_match_lerobots_smolvla(reference: Path, artifacts: Path, backend: str) -> None:
    snr = run(reference, artifacts, (backend,))["snr_db"][backend]
    assert all(snr[s] >= PARITY_DB for s in STAGES), snr


def test_padded_language_tokens_do_not_change_the_actions(reference: Path) -> None:
    """The static-shape prefix pads language to tokenizer_max_length: what stands in the padding must not matter."""
    from omni_vla_policies.vla.parity_vla import chain
    from omni_vla_policies.vla.runners import load_stage

    io = dict(np.load(reference / "io.npz"))
    model = build(tiny(), reference / "model.safetensors")
    stages = {s: load_stage("torch", s, 1, model) for s in ("vision", "prefix", "step", "finish")}
    other = io["lang_tokens"].copy()
    other[:, 4:] = (other[:, 4:] + 17) % tiny().text.vocab_size
    np.testing.assert_allclose(chain(stages, tiny(), {**io, "lang_tokens": other}), chain(stages, tiny(), io),
                               atol=1e-6)


def test_bench_times_every_stage_on_every_backend_and_chains_them(reference: Path, artifacts: Path) -> None:
    res = bench(artifacts, reference / "model.safetensors", [1], BACKENDS, {s: 3 for s in STAGE_NAMES}, cold=False)
    one = res["per_threads"]["1"]
    arch = tiny()
    for b in BACKENDS:
        assert all(0 < one[s][b]["median_ms"] <= one[s][b]["p99_ms"] for s in STAGE_NAMES)
        expected = (arch.cameras * one["vision"][b]["median_ms"] + one["prefix"][b]["median_ms"]
                    + arch.num_steps * one["step"][b]["median_ms"] + one["finish"][b]["median_ms"])
        assert one["chain_ms"][b] == pytest.approx(expected, abs=0.1)
    assert all(res["flops"][s] > 0 for s in ("vision", "prefix", "step"))


def test_full_size_is_the_published_smolvla() -> None:
    """SmolVLM2-500M's SigLIP + 16 text layers + a 0.75-wide expert: 450 M with the VLM's unused lm_head."""
    arch = full()
    with torch.device("meta"):
        params = sum(p.numel() for p in SmolVLA(arch).parameters())
    lm_head = arch.text.vocab_size * arch.text.hidden_size
    assert 440e6 < params + lm_head < 460e6
    assert (arch.image_tokens, arch.prefix_len, arch.expert_hidden, arch.expert_intermediate) == (64, 177, 720, 2048)


def test_parity_cli_rejects_a_directory_without_reference_outputs(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "omni_vla_policies.vla.parity_vla", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "io.npz" in out.stderr


@pytest.mark.parametrize("hw", [(48, 64), (16, 32)])
def test_a_non_square_camera_is_resized_in_the_exported_graph_as_in_the_model(hw: tuple[int, int],
                                                                              tmp_path: Path) -> None:
    """At an encoder size whose ratio float32 cannot hold (28: 64 / (64 / 28) is 27.99 in float32), the exported
    graph resizes to the rows the model's own float64 arithmetic gives; traced from the image's shape it kept one
    row fewer (7 dB against the model)."""
    import onnxruntime as ort

    from omni_vla_policies.converters import export_onnx
    from omni_vla_policies.vla.model import VisionStage, fitted_size

    base = tiny()
    arch = base.model_copy(update={"vision": base.vision.model_copy(update={"image_size": 28, "patch_size": 14}),
                                   "camera_hw": hw})
    assert fitted_size(hw, 28) != tuple(int(np.float32(d) / np.float32(max(hw) / np.float32(28))) for d in hw)
    stage = VisionStage(build(arch)).eval()
    image = torch.rand(1, 3, *hw, generator=torch.Generator().manual_seed(0))
    export_onnx(stage, (image,), ["image"], ["tokens"], tmp_path / "vision.onnx")
    got = ort.InferenceSession(str(tmp_path / "vision.onnx")).run(None, {"image": image.numpy()})[0]
    with torch.no_grad():
        want = stage(image).numpy()
    assert got.shape == want.shape
    assert snr_db(want, got) >= PARITY_DB
