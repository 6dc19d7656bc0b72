"""`colcon build && ros2 launch omni_vla ...` as on a robot: both launch files, run by the real ROS 2 launch
system (../shared/ros2_launch: the Jazzy `launch`/`launch_ros` sources, no wheels exist) against a colcon
install space, from a working directory unrelated to the source tree. The graph comes up within 20 s
(vla_node active through its lifecycle service, proposals and safe commands flowing) and stops cleanly
on SIGINT. Prints the cold start: launch start to the first safe command after the policy's first proposal.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch_graph import BUDGET_S, install, needs_launch, run_graph  # noqa: F401 - install: fixture
from omni_vla.ros.paths import resolve_bundle_dir
from omni_vla.runtime.bundle import BundleError


def test_relative_bundle_dir_resolves_under_the_cwd_first_then_the_share_directory(tmp_path: Path) -> None:
    cwd, share = tmp_path / "cwd", tmp_path / "share"
    for root in (cwd, share):
        (root / "bundles" / "b").mkdir(parents=True)
    (share / "bundles" / "b" / "manifest.json").write_text("{}")
    assert resolve_bundle_dir("bundles/b", cwd=cwd, share=share) == share / "bundles" / "b"  # no manifest in cwd
    (cwd / "bundles" / "b" / "manifest.json").write_text("{}")
    assert resolve_bundle_dir("bundles/b", cwd=cwd, share=share) == cwd / "bundles" / "b"
    assert resolve_bundle_dir(share / "bundles" / "b", cwd=cwd, share=share) == share / "bundles" / "b"
    with pytest.raises(BundleError) as err:
        resolve_bundle_dir("bundles/missing", cwd=cwd, share=share)
    msg = str(err.value)
    assert "\n" not in msg and str(cwd / "bundles" / "missing") in msg and str(share / "bundles" / "missing") in msg
    with pytest.raises(BundleError, match="no manifest.json in /nonexistent/bundle$"):
        resolve_bundle_dir("/nonexistent/bundle", cwd=cwd, share=share)


def _check(run: dict[str, object], nodes: tuple[str, ...]) -> None:
    out, seen = str(run["out"]), run["seen"]
    tail = out[-4000:]
    assert {"active", "proposed", "safe_after_proposal"} <= set(seen), (
        f"graph not up in {BUDGET_S:g} s: {seen}; supervisor {run['safety'][:300]}\n{tail}")
    assert "configured: mnn bundle " in out and "/share/omni_vla/bundles/reference" in out, tail
    # The launch arguments reach the nodes through files kept under ROS_HOME, not a new temporary file per node
    # and launch that launch_ros would never remove.
    assert not [name for name in run["temp_files"] if name.startswith("launch_params_")], run["temp_files"]
    # The launch gives vla_node the robot's joint limits file, so the rows it sends are shaped to them.
    assert "rows shaped to 0.9 of the limits" in out and "command shaping off" not in out, tail
    assert run["code"] == 0, f"launch exited {run['code']}\n{tail}"
    for name in nodes:
        assert f"[{name}-" in out, f"{name} never started\n{tail}"
    # Every node ends on the Ctrl-C itself: no escalation to SIGTERM, no traceback, exit 0.
    for name in nodes:
        assert f"[{name}-" in out and any(f"[{name}-" in line and "process has finished cleanly" in line
                                          for line in out.splitlines()), f"{name} did not finish cleanly\n{tail}"
    assert "escalating to 'SIGTERM'" not in out and "Traceback" not in out, tail
    assert "process has died" not in out, tail


@needs_launch
@pytest.mark.slow
def test_robot_launch_from_an_install_space_in_an_unrelated_directory(install: Path, tmp_path: Path) -> None:
    """omni_vla.launch.py (no simulator: the test is the robot), in a namespace, with the default bundle."""
    run = run_graph(install, tmp_path, "omni_vla.launch.py", True, "robot1", "backend:=mnn")
    _check(run, ("vla_node", "safety_supervisor"))
    seen = run["seen"]
    print(f"\ncold start (ros2 launch, MNN): {seen['safe_after_proposal']:.2f} s from launch start to the first safe "
          f"command after the policy's first proposal; " + json.dumps(seen))


@needs_launch
@pytest.mark.slow
def test_sim_launch_from_an_install_space_in_an_unrelated_directory(install: Path, tmp_path: Path) -> None:
    """sim.launch.py: sim_node is the robot; the limits file comes from the joint_limits_file argument. At a slow
    policy's rate (rate_hz:=2, a proposal every 0.5 s) the one argument also raises the supervisor's command timeout
    (0.2 s in its file) to four periods, so the arm follows instead of stopping between proposals."""
    limits = install / "share" / "omni_vla" / "config" / "joint_limits.yaml"
    run = run_graph(install, tmp_path, "sim.launch.py", False, "", f"joint_limits_file:={limits}", "rate_hz:=2")
    _check(run, ("sim_node", "vla_node", "safety_supervisor"))
    out = str(run["out"])
    assert f"limits from {limits}" in out
    assert ", 2 Hz, strategy" in out and "command timeout 2.0 s" in out, out[-3000:]
    assert "watchdog_command" not in out, out[-3000:]
    print(f"\nsim graph up (ros2 launch, MNN): {run['seen']}")
