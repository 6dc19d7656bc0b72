"""README command 1: the whole ROS graph with the shipped bundle, end to end, shuts down cleanly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from report_reader import open_report, picture_shows_something

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bundles" / "reference"


@pytest.mark.slow
def test_demo_runs_the_graph_with_the_shipped_bundle_and_reports(tmp_path: Path) -> None:
    """Two episodes: the second starts after the operator's reset (e-stop, scene reset, command brought to the new
    pose). The shaped rows leave the supervisor nothing to clamp in either; before command shaping, and before the
    demo brought the supervisor's command to the reset pose, each episode had 7-250 clamps."""
    assert (BUNDLE / "manifest.json").is_file(), "the trained bundle must ship with the repository"
    result = subprocess.run(
        [sys.executable, "-m", "omni_vla_sim.demo", "--episodes", "2", "--tasks", "touch_yellow", "--out", str(tmp_path)],
        cwd=REPO, env={**os.environ, "MUJOCO_GL": "egl"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["overall"]["episodes"] == 2
    assert report["overall"]["clamps_per_episode"] <= 1.0, result.stdout[-2000:]
    loop = report["settings"]["vla_diagnostics"]
    assert loop["backend"] == "mnn" and int(loop["commands"]) > 0
    assert report["settings"]["exit_codes"] == {"sim_node": 0, "safety_supervisor": 0, "vla_node": 0}
    opened = open_report(tmp_path / "report.md")
    row = opened.rows["touch_yellow"]
    for column in ("jerk mean", "jerk p99", "inference p50/p95 ms (vla_node)", "tick lateness p99 ms (vla_node)",
                   "missed ticks (vla_node)"):
        assert row.get(column, "-") not in ("", "-", "nan"), f"{column} measured but not shown: {row}"
    assert "boundary jump" not in row, "the demo sees no chunk boundaries: the column is left out, not 0"
    assert float(row["jerk mean"]) > 0
    assert {"success", "interventions", "loop"} <= set(opened.pictures)
    assert all(picture_shows_something(p) for p in opened.pictures.values())
    assert opened.settings["vla_diagnostics.backend"] == "mnn"


ACT = {"seed": 4, "cameras": ["front", "wrist"], "image_size": [64, 64], "state_dim": 8, "action_dim": 8, "env_dim": 4,
       "norm": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
       "act": {"chunk_size": 16, "n_action_steps": 8, "dim_model": 32, "n_heads": 4, "dim_feedforward": 64,
               "n_encoder_layers": 1, "n_decoder_layers": 1, "use_vae": False}}


def _import(root: Path, spec: dict) -> Path:
    """A LeRobot ACT checkpoint (written by LeRobot) imported as an MNN bundle that knows the sim's instructions."""
    from lerobot_env import imported_act

    root.mkdir()
    return imported_act(root, spec)


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
    assert loop["backend"] == "mnn" and int(loop["commands"]) > 0
    assert loop["worker_state"] in ("ready", "busy")  # healthy: idle, or computing the next chunk
    assert report["settings"]["exit_codes"] == {"sim_node": 0, "safety_supervisor": 0, "vla_node": 0}
    assert f"configured: mnn bundle {bundle}" in (tmp_path / "demo" / "logs" / "vla_node.log").read_text()
    # Chunks shorter than the reference's 12-step execution horizon run at their own execute_steps (vla_node's
    # execution_horizon is 0: the bundle's), so the demo's pre-check lets them through.
    from omni_vla_sim.demo import check_chunk_length

    short = _import(tmp_path / "short", {**ACT, "act": {**ACT["act"], "chunk_size": 8, "n_action_steps": 6}})
    check_chunk_length(short)
    assert json.loads((short / "manifest.json").read_text())["action"]["execute_steps"] == 6
