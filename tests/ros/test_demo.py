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
