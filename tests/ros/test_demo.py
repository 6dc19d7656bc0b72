"""README command 1: the whole ROS graph with the shipped bundle, end to end, shuts down cleanly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bundles" / "reference"


@pytest.mark.slow
def test_demo_runs_the_graph_with_the_shipped_bundle_and_reports(tmp_path: Path) -> None:
    assert (BUNDLE / "manifest.json").is_file(), "the trained bundle must ship with the repository"
    result = subprocess.run(
        [sys.executable, "-m", "omni_vla_sim.demo", "--episodes", "1", "--tasks", "touch_yellow", "--out", str(tmp_path)],
        cwd=REPO, env={**os.environ, "MUJOCO_GL": "egl"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["overall"]["episodes"] == 1
    loop = report["settings"]["vla_diagnostics"]
    assert loop["backend"] == "mnn" and int(loop["commands"]) > 0
    assert report["settings"]["exit_codes"] == {"sim_node": 0, "safety_supervisor": 0, "vla_node": 0}


JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
ACT = {"seed": 4, "cameras": ["front", "wrist"], "image_size": [64, 64], "state_dim": 8, "action_dim": 8, "env_dim": 4,
       "norm": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
       "act": {"chunk_size": 16, "n_action_steps": 8, "dim_model": 32, "n_heads": 4, "dim_feedforward": 64,
               "n_encoder_layers": 1, "n_decoder_layers": 1, "use_vae": False}}


def _import(root: Path, spec: dict) -> Path:
    """A LeRobot ACT checkpoint (written by LeRobot) imported as an MNN bundle that knows the sim's instructions."""
    from lerobot_env import lerobot_checkpoint

    from omni_vla_policies.lerobot_import import import_act
    from omni_vla_sim.tasks import TASKS

    root.mkdir()
    ck = lerobot_checkpoint(root, spec)
    table = {i.text: [float(k == j) for j in range(len(TASKS))] for k, t in enumerate(TASKS.values()) for i in t.instructions}
    (root / "instructions.json").write_text(json.dumps({"names": list(TASKS), "table": table}))
    import_act(ck, root / "bundle", JOINTS, 20.0, gripper="panda_finger_joint1", backends=("mnn",),
               instructions=root / "instructions.json")
    return root / "bundle"


@pytest.mark.slow
def test_demo_runs_an_imported_lerobot_act_by_changing_only_the_bundle(tmp_path: Path) -> None:
    """Random weights: the supervisor holds the arm; what is shown is the graph running the imported policy."""
    bundle = _import(tmp_path / "act", ACT)
    result = subprocess.run(
        [sys.executable, "-m", "omni_vla_sim.demo", "--bundle", str(bundle), "--episodes", "1", "--tasks", "touch_yellow",
         "--out", str(tmp_path / "demo")],
        cwd=REPO, env={**os.environ, "MUJOCO_GL": "egl"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    assert report["overall"]["episodes"] == 1 and report["versions"]["bundle"] == str(bundle)
    loop = report["settings"]["vla_diagnostics"]
    assert loop["backend"] == "mnn" and int(loop["commands"]) > 0 and loop["worker_state"] == "ready"
    assert report["settings"]["exit_codes"] == {"sim_node": 0, "safety_supervisor": 0, "vla_node": 0}
    assert f"configured: mnn bundle {bundle}" in (tmp_path / "demo" / "logs" / "vla_node.log").read_text()
    # Chunks shorter than vla_node's execution horizon (12): one line before any node starts, not a dead graph.
    short = _import(tmp_path / "short", {**ACT, "act": {**ACT["act"], "chunk_size": 8, "n_action_steps": 8}})
    refused = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "demo", "--bundle", str(short), "--out",
                              str(tmp_path / "short_demo")], cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-2000:]
    assert "chunks of 8 actions, shorter than vla_node's execution_horizon 12" in lines[0]
    assert not (tmp_path / "short_demo" / "logs").exists()
