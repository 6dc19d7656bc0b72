"""A LeRobot ACT checkpoint, written by LeRobot itself in its own venv, imported as a bundle and run on ExecuTorch
and MNN: the chunk must match LeRobot's own ACTPolicy (preprocessor -> predict_action_chunk -> postprocessor) on
the same raw inputs to >= 40 dB. Three cameras at a non-square resolution, so nothing assumes front/wrist or 64x64.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lerobot_env import lerobot_checkpoint, run_reference
from safetensors.numpy import load_file, save_file

from omni_vla.inference.client import open_chunk_runtime
from omni_vla.runtime.chunk import read_chunk_manifest
from omni_vla_policies.lerobot_checkpoint import CheckpointError
from omni_vla_policies.lerobot_import import import_act

CAMERAS = ["front", "wrist", "side"]
JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
SPEC = {"seed": 3, "cameras": CAMERAS, "image_size": [48, 64], "state_dim": 8, "action_dim": 8,
        "act": {"chunk_size": 12, "n_action_steps": 8, "dim_model": 64, "n_heads": 4, "dim_feedforward": 128,
                "n_encoder_layers": 2, "n_decoder_layers": 1, "use_vae": True, "latent_dim": 8,
                "n_vae_encoder_layers": 1}}
# Conditioned like the four-task ACT: the instruction selects a one-hot environment_state; state MIN_MAX-normalised.
TASKS = ["pick_red", "place_blue_on_green", "stack_red_on_blue", "touch_yellow"]
SPEC_ENV = {**SPEC, "seed": 5, "cameras": ["front", "wrist"], "image_size": [64, 64], "env_dim": 4,
            "norm": {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ENV": "MEAN_STD", "ACTION": "MEAN_STD"}}
INSTRUCTIONS = {"names": TASKS, "table": {f"do {t}": [float(i == j) for j in range(4)] for i, t in enumerate(TASKS)}}
N_OBS = 6
PARITY_DB = 40.0


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((got - ref).astype(np.float64) ** 2)))


def _lerobot_chunks(checkpoint: Path, root: Path, spec: dict, obs: dict[str, np.ndarray]) -> np.ndarray:
    """LeRobot's chunks (preprocessor -> ACTPolicy.predict_action_chunk -> postprocessor) for raw `obs`."""
    np.savez(root / "in.npz", **obs)
    run_reference("infer", str(checkpoint), str(root / "in.npz"), str(root / "out.npz"))
    return np.load(root / "out.npz")["actions"]


def _observations(spec: dict, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = {f"observation.images.{c}": rng.uniform(0, 1, (N_OBS, 3, *spec["image_size"])).astype(np.float32)
           for c in spec["cameras"]}
    obs["observation.state"] = rng.normal(0, 0.6, (N_OBS, 8)).astype(np.float32)
    if spec.get("env_dim"):
        obs["observation.environment_state"] = np.eye(4, dtype=np.float32)[np.arange(N_OBS) % 4]
    return obs


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lerobot_checkpoint(tmp_path_factory.mktemp("lerobot"), SPEC)


@pytest.fixture(scope="module")
def reference(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Raw observations and LeRobot's chunks for them."""
    obs = _observations(SPEC, 11)
    return obs, _lerobot_chunks(checkpoint, tmp_path_factory.mktemp("lerobot_io"), SPEC, obs)


@pytest.fixture(scope="module")
def bundle(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "act"
    import_act(checkpoint, out, JOINTS, 30.0, gripper="panda_finger_joint1")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["executorch", "mnn"])
def test_imported_act_matches_lerobots_own_actpolicy_on_the_same_raw_inputs(
        bundle: Path, reference: tuple[dict[str, np.ndarray], np.ndarray], backend: str) -> None:
    obs, want = reference
    rt = open_chunk_runtime(backend, bundle)
    assert rt.cameras == CAMERAS and rt.chunk_length == 12 and rt.joint_names == JOINTS
    got = np.zeros_like(want)
    for i in range(N_OBS):
        images = {c: np.ascontiguousarray(obs[f"observation.images.{c}"][i:i + 1]) for c in CAMERAS}
        rt.infer(images, np.ascontiguousarray(obs["observation.state"][i:i + 1]), got[i])
    rt.close()
    db = snr_db(want, got)
    print(f"\nparity {backend} vs LeRobot 0.4.4 ACTPolicy: {db:.1f} dB over {N_OBS} observations x 12 x 8")
    assert db >= PARITY_DB, f"{backend}: {db:.1f} dB"


@pytest.mark.slow
def test_manifest_describes_cameras_state_action_and_the_runtime_applied_normalisation(
        bundle: Path, checkpoint: Path) -> None:
    m = read_chunk_manifest(bundle)
    assert [(c.name, c.height, c.width) for c in m.cameras] == [(c, 48, 64) for c in CAMERAS]
    assert m.action.chunk_length == 12 and m.action.execute_steps == 8 and m.action.gripper == "panda_finger_joint1"
    assert m.action.units == ["rad"] * 7 + ["m"] and m.control_rate_hz == 30.0
    stats = load_file(str(checkpoint / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    np.testing.assert_allclose(m.normalization["state"].subtract, stats["observation.state.mean"], rtol=1e-6)
    np.testing.assert_allclose(m.normalization["action"].divide, stats["action.std"], rtol=1e-6)
    assert sorted(m.stages["policy"].artifacts) == ["executorch", "mnn", "onnx"]  # onnx: for onnxruntime in bench runtime


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["executorch", "mnn"])
def test_an_instruction_conditioned_act_matches_lerobot_and_refuses_an_unknown_instruction(
        tmp_path_factory: pytest.TempPathFactory, backend: str) -> None:
    root = tmp_path_factory.mktemp(f"lerobot_env_{backend}")
    ck = lerobot_checkpoint(root, SPEC_ENV)
    obs = _observations(SPEC_ENV, 12)
    want = _lerobot_chunks(ck, root, SPEC_ENV, obs)
    (root / "instructions.json").write_text(json.dumps(INSTRUCTIONS))
    import_act(ck, root / "bundle", JOINTS, 20.0, backends=(backend,), instructions=root / "instructions.json")
    rt = open_chunk_runtime(backend, root / "bundle")
    got = np.zeros_like(want)
    with pytest.raises(ValueError, match="no condition given"):
        rt.infer({c: np.zeros((1, 3, 64, 64), np.float32) for c in rt.cameras}, np.zeros((1, 8), np.float32), got[0])
    with pytest.raises(KeyError, match="'fetch the ball' is not in the bundle's table"):
        rt.condition_for("fetch the ball")
    for i in range(N_OBS):
        condition = rt.condition_for(f"do {TASKS[i % 4]}")[None]
        images = {c: np.ascontiguousarray(obs[f"observation.images.{c}"][i:i + 1]) for c in rt.cameras}
        rt.infer(images, np.ascontiguousarray(obs["observation.state"][i:i + 1]), got[i], condition)
    db = snr_db(want, got)
    print(f"\nparity {backend}, instruction-conditioned, vs LeRobot 0.4.4 ACTPolicy: {db:.1f} dB")
    assert db >= PARITY_DB, f"{backend}: {db:.1f} dB"
    with pytest.raises(CheckpointError, match="expected --instructions"):
        import_act(ck, root / "b2", JOINTS, 20.0, backends=(backend,))


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ck"
    shutil.copytree(checkpoint, dst)
    return dst


@pytest.mark.slow
def test_unsupported_or_broken_checkpoints_are_refused_naming_the_problem(checkpoint: Path, tmp_path: Path) -> None:
    ck = _copy(checkpoint, tmp_path)
    cfg = json.loads((ck / "config.json").read_text())
    cases = [
        ({**cfg, "type": "diffusion"}, "policy type 'diffusion', expected 'act'"),
        ({**cfg, "vision_backbone": "resnet50"}, "vision_backbone 'resnet50'"),
        ({**cfg, "replace_final_stride_with_dilation": True}, "replace_final_stride_with_dilation"),
    ]
    for bad, message in cases:
        (ck / "config.json").write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=message):
            import_act(ck, tmp_path / "out", JOINTS, 30.0)
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="7 joint names for state 8"):
        import_act(ck, tmp_path / "out", JOINTS[:7], 30.0)
    with pytest.raises(CheckpointError, match="gripper 'hand'"):
        import_act(ck, tmp_path / "out", JOINTS, 30.0, gripper="hand")
    (ck / "model.safetensors").write_bytes((ck / "model.safetensors").read_bytes()[:1000])  # truncated
    with pytest.raises(CheckpointError, match="model.safetensors: not a readable safetensors file"):
        import_act(ck, tmp_path / "out", JOINTS, 30.0)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_failed_import_leaves_no_bundle_and_no_temporary_directory(checkpoint: Path, tmp_path: Path) -> None:
    ck = _copy(checkpoint, tmp_path)
    weights = load_file(str(ck / "model.safetensors"))
    del weights["model.action_head.weight"]
    save_file(weights, str(ck / "model.safetensors"))
    out_root = tmp_path / "bundles"
    out_root.mkdir()
    with pytest.raises(CheckpointError, match="no tensor 'model.action_head.weight'"):
        import_act(ck, out_root / "act", JOINTS, 30.0)
    assert list(out_root.iterdir()) == []


def test_the_cli_names_a_missing_checkpoint_in_one_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "import", "lerobot", str(tmp_path / "nope"),
                          "--out", str(tmp_path / "b"), "--joint-names", "a,b", "--rate-hz", "30"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "nope" / "config.json") in lines[0] and "Traceback" not in out.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_the_closed_loop_suite_runs_an_imported_act_by_changing_only_the_bundle(
        tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> None:
    """`omni-vla eval --bundle <imported>`: the same loop, supervisor and counting as the reference bundle. With
    random weights the arm is held by the supervisor (proposals beyond the limits are refused and counted)."""
    from omni_vla_sim.tasks import TASKS

    root = tmp_path_factory.mktemp("lerobot_eval")
    ck = lerobot_checkpoint(root, {**SPEC_ENV, "norm": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}})
    table = {i.text: [float(k == j) for j in range(len(TASKS))] for k, t in enumerate(TASKS.values()) for i in t.instructions}
    (root / "instructions.json").write_text(json.dumps({"names": list(TASKS), "table": table}))
    import_act(ck, root / "bundle", JOINTS, 20.0, gripper="panda_finger_joint1", backends=("mnn",),
               instructions=root / "instructions.json")
    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "eval", "--bundle", str(root / "bundle"),
                          "--backend", "mnn", "--tasks", "touch_yellow", "--episodes", "1", "--workers", "1",
                          "--out", str(root / "report"), "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    task = report["tasks"]["touch_yellow"]
    assert task["episodes"] == 1 and task["mean_episode_length"] > 10 and task["latency_ms"]["p50"] > 0
    assert report["settings"]["bundle_dir"] == str(root / "bundle")
    # A bundle reading a camera the simulated robot does not render ('side') is refused in one line before any
    # episode runs.
    bad = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "eval", "--bundle", str(bundle), "--backend",
                          "mnn", "--tasks", "touch_yellow", "--episodes", "1", "--workers", "1",
                          "--out", str(root / "report_bad")], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert bad.stderr.strip().endswith(
        "the policy reads camera(s) ['side'] but the simulated robot has ['front', 'wrist']"), bad.stderr[-2000:]
    assert "Traceback" not in bad.stderr
    # Joints that are not the robot's: refused before any episode, naming both lists.
    other = [f"j{i}" for i in range(1, 9)]
    import_act(ck, root / "bundle_other_joints", other, 20.0, backends=("mnn",), instructions=root / "instructions.json")
    wrong = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "eval", "--bundle", str(root / "bundle_other_joints"),
                            "--backend", "mnn", "--tasks", "touch_yellow", "--episodes", "1", "--workers", "1",
                            "--out", str(root / "report_other")], capture_output=True, text=True, timeout=600)
    assert wrong.returncode == 2 and f"the policy's joints are {other}" in wrong.stderr, wrong.stderr[-2000:]
    assert not (root / "report_other").exists()


@pytest.mark.slow
def test_bench_runtime_times_an_imported_bundle_on_every_backend_interleaved(bundle: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", "--bundle", str(bundle),
                          "--threads", "1", "--reps", "3", "--warmup", "1", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = json.loads(out.stdout)
    assert run["kind"] == "chunk" and run["interleaved"] and run["threads"] == 1 and not run["skipped"]
    assert set(run["backends"]) == {"torch", "onnxruntime", "executorch", "mnn"}
    assert all(v["median_ms"] > 0 for v in run["backends"].values())
    assert set(run["speedup"]) == {"executorch_vs_torch", "executorch_vs_onnxruntime", "mnn_vs_torch", "mnn_vs_onnxruntime"}
