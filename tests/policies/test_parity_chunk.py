"""`omni-vla parity` on an imported LeRobot ACT (format-3 chunk bundle): ExecuTorch, MNN and onnxruntime against
eager PyTorch of the same network rebuilt from the checkpoint the bundle names, on recorded HDF5 demos or synthetic
observations; a reference that is not the bundle's own weights, or demos without the bundle's cameras, are
refused in one line."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lerobot_env import lerobot_checkpoint

from omni_vla_policies.lerobot_import import import_act
from omni_vla_policies.parity import main, run_parity
from omni_vla_sim.dataset import Episode, write_episode

JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
TASKS = ["pick_red", "place_blue_on_green", "stack_red_on_blue", "touch_yellow"]
SPEC = {"seed": 9, "cameras": ["front", "wrist"], "image_size": [64, 64], "state_dim": 8, "action_dim": 8, "env_dim": 4,
        "act": {"chunk_size": 10, "n_action_steps": 10, "dim_model": 32, "n_heads": 4, "dim_feedforward": 64,
                "n_encoder_layers": 1, "n_decoder_layers": 1, "use_vae": False}}
TABLE = {f"do {t}": [float(i == j) for j in range(4)] for i, t in enumerate(TASKS)}
BACKENDS = ("executorch", "mnn", "onnxruntime")
PARITY_DB = 40.0


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(bundle, the checkpoint it was imported from)."""
    root = tmp_path_factory.mktemp("parity_chunk")
    ck = lerobot_checkpoint(root, SPEC)
    (root / "instructions.json").write_text(json.dumps({"names": TASKS, "table": TABLE}))
    import_act(ck, root / "bundle", JOINTS, 20.0, gripper="panda_finger_joint1", instructions=root / "instructions.json")
    return root / "bundle", ck


def _demos(root: Path, size: int = 64, steps: int = 6) -> Path:
    """Two recorded episodes in the HDF5 demo format: one with a known instruction, one with an unknown one."""
    rng = np.random.default_rng(0)
    for k, text in enumerate(["do touch_yellow", "wave at the camera"]):
        ep = Episode(task="touch_yellow", instruction=text, instruction_held_out=False, seed=k, success=True,
                     front=rng.integers(0, 256, (steps, size, size, 3), np.uint8),
                     wrist=rng.integers(0, 256, (steps, size, size, 3), np.uint8),
                     qpos=rng.normal(0, 0.4, (steps, 8)).astype(np.float32),
                     qvel=np.zeros((steps, 8), np.float32), actions=rng.normal(0, 0.4, (steps, 8)).astype(np.float32))
        write_episode(root / f"ep{k}.hdf5", ep, JOINTS)
    return root


@pytest.mark.slow
def test_every_backend_of_an_imported_act_matches_eager_pytorch_on_recorded_demos(
        imported: tuple[Path, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    bundle, _ = imported
    demos = _demos(tmp_path / "demos")
    assert main(["--bundle", str(bundle), "--dataset", str(demos), "--n", "6", "--json"]) == 0
    rep = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert rep["kind"] == "chunk" and rep["policy"] == "lerobot_act" and rep["observations"] == 6
    assert rep["source"] == f"dataset:{demos}" and rep["skipped"] == {}
    assert rep["instruction_fallbacks"] == 3  # the second episode's text is not in the table: a known one is used
    for backend in BACKENDS:
        assert rep[backend]["snr_db"] >= PARITY_DB and rep[backend]["snr_db_delta"] >= PARITY_DB, rep
        assert 0 < rep[backend]["max_abs"] < 1e-2, rep  # measured, not a copy of the reference
    print("\nparity on recorded demos: " + json.dumps({b: rep[b] for b in BACKENDS}))


@pytest.mark.slow
def test_synthetic_parity_runs_when_the_checkpoint_moved_given_it_again(imported: tuple[Path, Path], tmp_path: Path) -> None:
    bundle, ck = imported
    moved = tmp_path / "moved"
    shutil.copytree(ck, moved)
    rep = run_parity(bundle, None, n=4, seed=2, checkpoint=moved)
    assert rep["source"] == "synthetic" and rep["observations"] == 4 and rep["instruction_fallbacks"] == 0
    assert all(rep[b]["snr_db"] >= PARITY_DB for b in BACKENDS), rep


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "parity", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_a_reference_with_other_weights_or_demos_without_the_cameras_are_refused_in_one_line(
        imported: tuple[Path, Path], tmp_path: Path) -> None:
    bundle, ck = imported
    (tmp_path / "other").mkdir()
    other = lerobot_checkpoint(tmp_path / "other", {**SPEC, "seed": 10})  # same architecture, other weights
    wrong = _cli("--bundle", str(bundle), "--checkpoint", str(other), "--n", "2")
    lines = wrong.stderr.strip().splitlines()
    assert wrong.returncode == 2 and len(lines) == 1, wrong.stderr[-2000:]
    assert str(other / "model.safetensors") in lines[0] and "--checkpoint DIR" in lines[0]
    with pytest.raises(ValueError, match=r"records cameras \{'front': \(32, 32\), 'wrist': \(32, 32\)\}"):
        run_parity(bundle, _demos(tmp_path / "small", size=32), n=2, checkpoint=ck)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no eager reference: .*config.json is missing.*--checkpoint DIR"):
        run_parity(bundle, None, n=2, checkpoint=tmp_path / "empty")
    empty = _cli("--bundle", str(bundle), "--dataset", str(tmp_path / "empty"), "--n", "2")
    lines = empty.stderr.strip().splitlines()
    assert empty.returncode == 2 and len(lines) == 1 and "no .hdf5/.h5 episode files" in lines[0], empty.stderr[-2000:]
