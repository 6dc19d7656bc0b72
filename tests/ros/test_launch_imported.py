"""`ros2 launch omni_vla sim.launch.py bundle_dir:=<imported bundle>`: a LeRobot ACT imported as a bundle runs in
the simulated graph by changing only the bundle_dir launch argument, with the real ROS 2 launch system against a
colcon install space (tests/support/launch_graph.py): vla_node active with the imported policy, its
proposals flowing, safe commands on the controller topic, and every node stopping cleanly on Ctrl-C."""
from __future__ import annotations

from pathlib import Path

import pytest
from launch_graph import BUDGET_S, install, needs_launch, run_graph  # noqa: F401 - install: fixture
from lerobot_env import imported_act

SPEC = {"seed": 6, "cameras": ["front", "wrist"], "image_size": [64, 64], "state_dim": 8, "action_dim": 8, "env_dim": 4,
        "norm": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "act": {"chunk_size": 16, "n_action_steps": 8, "dim_model": 32, "n_heads": 4, "dim_feedforward": 64,
                "n_encoder_layers": 1, "n_decoder_layers": 1, "use_vae": False}}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MNN bundle of a LeRobot-written ACT checkpoint whose instruction table knows the sim's instructions."""
    return imported_act(tmp_path_factory.mktemp("launch_imported"), SPEC)


@needs_launch
@pytest.mark.slow
def test_sim_launch_runs_an_imported_act_by_changing_only_bundle_dir(install: Path, imported: Path,
                                                                     tmp_path: Path) -> None:
    limits = install / "share" / "omni_vla" / "config" / "joint_limits.yaml"
    run = run_graph(install, tmp_path, "sim.launch.py", False, "", f"joint_limits_file:={limits}",
                     f"bundle_dir:={imported}")
    out, seen = str(run["out"]), run["seen"]
    tail = out[-4000:]
    assert {"active", "proposed", "safe_after_proposal"} <= set(seen), (
        f"graph not up in {BUDGET_S:g} s: {seen}; supervisor {run['safety'][:300]}\n{tail}")
    assert f"configured: mnn bundle {imported}," in out and "/bundles/reference" not in out, tail
    assert run["code"] == 0, f"launch exited {run['code']}\n{tail}"
    for name in ("sim_node", "vla_node", "safety_supervisor"):
        assert any(f"[{name}-" in line and "process has finished cleanly" in line for line in out.splitlines()), (
            f"{name} did not finish cleanly\n{tail}")
    assert "Traceback" not in out and "process has died" not in out and "escalating to 'SIGTERM'" not in out, tail
    print(f"\nsim graph with an imported ACT up (ros2 launch, MNN): {seen}")
