"""Export of a tiny policy: the bundle, its manifest, and PyTorch/ExecuTorch/MNN parity (SNR >= 40 dB)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from omni_vla.runtime.bundle import read_manifest, sha256_file
from omni_vla_policies.export import load_checkpoint, policy_from_checkpoint
from fixtures_policy import cached_tiny_bundle


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cached_tiny_bundle(tmp_path_factory.getbasetemp())


def test_export_writes_every_artifact_and_a_valid_manifest(tiny_bundle: Path) -> None:
    m = read_manifest(tiny_bundle)
    assert (m.horizon, m.action_dim, m.image_size, m.embedding_dim) == (16, 8, 64, 384)
    assert m.max_prefix >= 4 and m.control_rate_hz == 20.0
    assert m.joint_names[0] == "panda_joint1" and m.joint_names[-1] == "panda_finger_joint1"
    for stage in ("prefix", "flow_init", "flow_step", "flow_finish"):
        for backend, ext in (("executorch", "pte"), ("mnn", "mnn"), ("onnx", "onnx")):
            art = m.stages[stage].artifacts[backend]
            assert art.file == f"{stage}.{ext}"
            assert sha256_file(tiny_bundle / art.file) == art.sha256
    for lib in ("torch", "executorch", "mnn"):
        assert m.versions[lib]
    assert m.stages["prefix"].graph == "prefix.folded/1"
    assert {m.stages[f"flow_{p}"].graph for p in ("init", "step", "finish")} == {"flow_head.stepped/1"}
    assert m.stages["flow_step"].inputs[2].shape == (1, m.num_steps)  # the one-hot step index
    raw = json.loads((tiny_bundle / "manifest.json").read_text())
    assert raw["format"] == "omni_vla.bundle/2"


def test_each_flow_program_stores_only_the_weights_it_reads(tiny_bundle: Path) -> None:
    """All three programs wrap one folded head; unpruned, finish and init would each carry all its weights."""
    size = {p: (tiny_bundle / f"flow_{p}.pte").stat().st_size for p in ("init", "step", "finish")}
    assert size["finish"] < 0.25 * size["step"], size
    assert size["init"] < 0.5 * size["step"], size


def test_manifest_normalisation_equals_the_graph_buffers(tiny_bundle: Path) -> None:
    m = read_manifest(tiny_bundle)
    model = policy_from_checkpoint(load_checkpoint(tiny_bundle / "policy.pt"))
    for k in ("state_mean", "state_std", "action_mean", "action_std"):
        np.testing.assert_allclose(getattr(model.norm, k).numpy(), getattr(m.normalization, k), rtol=1e-6)


def test_eager_prefix_pinning_returns_the_committed_prefix_exactly(tiny_bundle: Path) -> None:
    model = policy_from_checkpoint(load_checkpoint(tiny_bundle / "policy.pt"))
    g = torch.Generator().manual_seed(0)
    state = torch.tensor(read_manifest(tiny_bundle).normalization.state_mean).view(1, 8)
    prefix = state.view(1, 1, 8) + 0.05 * torch.randn(1, 16, 8, generator=g)
    for d in (0, 1, 4):
        mask = (torch.arange(16) < d).float().view(1, 16, 1)
        with torch.no_grad():
            out = model(torch.rand(1, 3, 64, 64, generator=g), torch.rand(1, 3, 64, 64, generator=g), state,
                        torch.randn(1, 384, generator=g), torch.randn(1, 16, 8, generator=g), prefix, mask)
        assert torch.equal(out[0, :d], prefix[0, :d])
        if d < 16:
            assert not torch.allclose(out[0, d:], prefix[0, d:], atol=1e-3)


def test_parity_torch_executorch_mnn_above_40_db(tiny_bundle: Path) -> None:
    from omni_vla_policies.parity import run_parity

    rep = run_parity(tiny_bundle, dataset=None, n=8, seed=1)
    for backend in ("executorch", "mnn"):
        assert rep[backend]["snr_db"] >= 40, rep
        assert rep[backend]["snr_db_delta"] >= 40, rep
        for stage in ("prefix", "flow"):
            assert rep[backend]["stages"][stage]["snr_db"] >= 40, rep
    assert rep["prefix_pin_max_abs"] <= 1e-6


def test_float16_executorch_programs_keep_the_float32_contract_above_40_db(tiny_bundle: Path, tmp_path: Path) -> None:
    from omni_vla.runtime.bundle import load_bundle
    from omni_vla_policies.export import export_bundle
    from omni_vla_policies.parity import run_parity

    half = export_bundle(load_checkpoint(tiny_bundle / "policy.pt"), tmp_path / "half", executorch_dtype="float16")
    m = read_manifest(half)
    assert (m.compute_dtype("executorch"), m.compute_dtype("mnn")) == ("float16", "float32")
    ref_stages = read_manifest(tiny_bundle).stages
    assert all((s.inputs, s.outputs) == (ref_stages[k].inputs, ref_stages[k].outputs) for k, s in m.stages.items())
    load_bundle(half, "executorch")
    rep, ref = run_parity(half, dataset=None, n=8, seed=1), run_parity(tiny_bundle, dataset=None, n=8, seed=1)
    assert rep["executorch"]["compute_dtype"] == "float16" and ref["executorch"]["compute_dtype"] == "float32"
    assert rep["executorch"]["snr_db"] >= 40 and rep["executorch"]["snr_db_delta"] >= 40, rep
    # Really computed in half precision: far from the float32 programs' agreement with PyTorch.
    assert rep["executorch"]["snr_db"] < ref["executorch"]["snr_db"] - 20, (rep, ref)
    assert rep["mnn"]["snr_db"] == ref["mnn"]["snr_db"]


def test_parity_cli_prints_the_contract_json(tiny_bundle: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from omni_vla_policies.parity import main

    assert main(["--bundle", str(tiny_bundle), "--n", "4", "--json"]) == 0
    rep = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    for backend in ("executorch", "mnn"):
        assert {"snr_db", "max_abs"} <= set(rep[backend])
        assert set(rep[backend]["stages"]) == {"prefix", "flow"}
    assert rep["observations"] == 4


def test_bench_runtime_cli_prints_one_contract_object_per_thread_count(tiny_bundle: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from omni_vla_policies.bench_runtime import main

    assert main(["--bundle", str(tiny_bundle), "--threads", "1,2", "--reps", "3", "--warmup", "1", "--no-cold-start", "--json"]) == 0
    res = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert [r["threads"] for r in res] == [1, 2]
    for r in res:
        for backend in ("torch", "torch-folded", "onnxruntime", "executorch", "mnn"):
            assert r[backend]["median_ms"] > 0 and r[backend]["p99_ms"] >= r[backend]["median_ms"]
        for backend in ("executorch", "mnn", "onnxruntime"):
            assert r[backend]["speedup_vs_torch"] == pytest.approx(r["torch"]["median_ms"] / r[backend]["median_ms"], abs=0.01)
            assert r[backend]["speedup_vs_torch_folded"] == pytest.approx(
                r["torch-folded"]["median_ms"] / r[backend]["median_ms"], abs=0.01)


def test_bench_runtime_stages_split_the_time_and_count_flops(tiny_bundle: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from omni_vla_policies.bench_runtime import main

    assert main(["--bundle", str(tiny_bundle), "--threads", "1", "--reps", "15", "--warmup", "2", "--no-cold-start",
                 "--stages", "--json"]) == 0
    (r,) = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert r["flops"]["prefix"] > 0 and r["flops"]["flow"] > 0
    assert r["flops"]["total"] == r["flops"]["prefix"] + r["flops"]["flow"]
    assert r["sgemm_gflops"] > 1.0
    for backend in ("torch", "onnxruntime", "executorch", "mnn"):
        st = r[backend]["stages"]
        assert 0 < st["prefix_ms"] < r[backend]["median_ms"], (backend, st)  # the prefix alone is part of the whole
        assert st["flow_ms"] == pytest.approx(r[backend]["median_ms"] - st["prefix_ms"], abs=1e-3)
        assert 0 < st["fraction_of_sgemm"] < 1


def test_folded_torch_runtime_gives_the_training_models_actions(tiny_bundle: Path) -> None:
    """`torch-folded` (the bench's same-graph baseline) runs both folded stages and still matches the model."""
    from omni_vla_policies.torch_runtime import TorchRuntime

    ref, fold = TorchRuntime(tiny_bundle), TorchRuntime(tiny_bundle, folded=True)
    assert fold.prefix is not fold.model.prefix_encoder and fold.flow is not fold.model.flow_head
    rng = np.random.default_rng(3)
    s = ref.image_size
    x = [{"front": rng.random((1, 3, s, s), dtype=np.float32), "wrist": rng.random((1, 3, s, s), dtype=np.float32)},
         rng.normal(size=(1, ref.action_dim)).astype(np.float32), rng.normal(size=(1, 384)).astype(np.float32),
         rng.normal(size=(1, ref.horizon, ref.action_dim)).astype(np.float32), 2,
         rng.normal(size=(1, ref.horizon, ref.action_dim)).astype(np.float32)]
    a, b = np.zeros((ref.horizon, ref.action_dim), np.float32), np.zeros((ref.horizon, ref.action_dim), np.float32)
    ref.infer(*x, a)
    fold.infer(*x, b)
    np.testing.assert_allclose(b, a, rtol=0, atol=2e-5 * float(np.abs(a).max()))
    np.testing.assert_array_equal(b[:2], x[3][0, :2])
