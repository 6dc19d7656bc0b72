"""`colcon build && ros2 launch omni_vla ...` as on a robot: both launch files, run by the real ROS 2 launch
system (../shared/ros2_launch: the Jazzy `launch`/`launch_ros` sources, no wheels exist) against a colcon
install space, from a working directory unrelated to the source tree. The graph comes up within 20 s
(vla_node active through its lifecycle service, proposals and safe commands flowing) and stops cleanly
on SIGINT. Prints the cold start: launch start to the first safe command after the policy's first proposal.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from omni_vla.ros.paths import resolve_bundle_dir
from omni_vla.runtime.bundle import BundleError

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared"  # CI clones the repository with shared/ beside it
RUN_LAUNCH = SHARED / "ros2_launch" / "run_launch.py"

needs_launch = pytest.mark.skipif(
    not RUN_LAUNCH.is_file(), reason=f"no real ROS 2 launch system here: {RUN_LAUNCH.resolve()} is missing")

BUDGET_S = 20.0  # launch start -> vla_node active and safe commands after proposals
INSTRUCTION = "pick up the red cube"
SAFE_TOPIC = "/forward_position_controller/commands"
HOME = [0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04]  # the sim's home pose (sim/robot.py HOME_QPOS)
JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]


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


@pytest.fixture(scope="session")
def install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A colcon install space of this checkout (as tests/ros/test_package_build.py builds it), once per session."""
    ws = tmp_path_factory.mktemp("launch_ws")
    shutil.copytree(REPO, ws / "src" / "omni_vla", ignore=shutil.ignore_patterns(
        ".git", "data", "reports", "results", "runs", "build", "install", "log", "__pycache__", "*.egg-info",
        ".pytest_cache"))
    colcon = Path(sys.executable).parent / "colcon"
    result = subprocess.run([str(colcon), "build", "--packages-select", "omni_vla"], cwd=ws,
                            env={**os.environ, "COLCON_HOME": str(ws / "colcon_home")},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    prefix = ws / "install" / "omni_vla"
    bundle = prefix / "share" / "omni_vla" / "bundles" / "reference"
    assert (bundle / "manifest.json").is_file() and (bundle / "prefix.mnn").is_file()
    assert not (bundle / "policy.pt").exists(), "the torch checkpoint is not for the robot"
    return prefix


def _launch(install: Path, name: str, cwd: Path, domain: int, *args: str) -> subprocess.Popen:
    site = next(install.glob("lib/python3*/site-packages"))
    env = {**os.environ, "AMENT_PREFIX_PATH": str(install), "PYTHONPATH": str(site), "ROS_DOMAIN_ID": str(domain),
           "PYTHONUNBUFFERED": "1"}
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    launch_file = install / "share" / "omni_vla" / "launch" / name
    return subprocess.Popen([sys.executable, str(RUN_LAUNCH.resolve()), str(launch_file), *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _read(proc: subprocess.Popen, lines: list[tuple[float, str]]) -> threading.Thread:
    """Collect the launch output with arrival times (monotonic)."""
    def run() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append((time.monotonic(), line))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _stop(proc: subprocess.Popen, reader: threading.Thread) -> int:
    """Ctrl-C in the terminal of `ros2 launch`: SIGINT to its whole process group (the launch and its nodes;
    launch, seeing SIGINT, does not forward it, because a terminal already sent it to every node). Its return
    code."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = -9
    reader.join(10)
    return code


def _run_graph(install: Path, tmp_path: Path, launch_file: str, fake_robot: bool, namespace: str = "",
               *args: str) -> dict[str, object]:
    """Launch, watch the graph from a probe node until it is up (or the budget is spent), stop it."""
    import rclpy
    from lifecycle_msgs.msg import State
    from lifecycle_msgs.srv import GetState
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rosutil import free_domain_id, ros_context
    from std_msgs.msg import Float64MultiArray, String
    from trajectory_msgs.msg import JointTrajectory

    from omni_vla.tools.bench_graph import attach_fake_robot

    cwd = tmp_path / "elsewhere"  # not the source tree: relative paths must resolve against the install
    cwd.mkdir()
    domain = free_domain_id()
    seen: dict[str, float] = {}
    safety: dict[str, str] = {}
    with ros_context(domain) as (node, ex):
        position = list(HOME)

        def on_safe(msg: Float64MultiArray) -> None:
            now = time.monotonic()
            seen.setdefault("safe", now)
            if "proposed" in seen:
                seen.setdefault("safe_after_proposal", now)
            position[:] = msg.data  # the fake robot tracks perfectly

        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(Float64MultiArray, SAFE_TOPIC, on_safe, reliable)
        node.create_subscription(JointTrajectory, "/omni_vla/proposed_command",
                                 lambda m: seen.setdefault("proposed", time.monotonic()), reliable)
        node.create_subscription(String, "/omni_vla/safety_status", lambda m: safety.update(state=m.data), 10)
        node.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=INSTRUCTION))
        if fake_robot:  # the bench's fake robot: cameras 30 Hz, joint states 100 Hz reporting the safe command
            attach_fake_robot(node, position)
        fqn = f"/{namespace}/vla_node" if namespace else "/vla_node"
        get_state = node.create_client(GetState, f"{fqn}/get_state")
        t0 = time.monotonic()
        proc = _launch(install, launch_file, cwd, domain, *([f"namespace:={namespace}"] if namespace else []), *args)
        lines: list[tuple[float, str]] = []
        reader = _read(proc, lines)
        try:
            pending = None
            while time.monotonic() - t0 < BUDGET_S and proc.poll() is None:
                ex.spin_once(timeout_sec=0.01)
                if "active" not in seen and get_state.service_is_ready():
                    if pending is None:
                        pending = get_state.call_async(GetState.Request())
                    elif pending.done():
                        if pending.result().current_state.id == State.PRIMARY_STATE_ACTIVE:
                            seen["active"] = time.monotonic()
                        pending = None
                if {"active", "safe_after_proposal"} <= seen.keys() and seen["safe_after_proposal"] > seen["active"]:
                    break
            up = time.monotonic() - t0
            for _ in range(50):  # a little steady state before the shutdown
                ex.spin_once(timeout_sec=0.01)
        finally:
            code = _stop(proc, reader)
    out = "".join(line for _, line in lines)
    (tmp_path / "launch.log").write_text(out)
    for key, marker in (("nodes_started", "process started"), ("configured", "vla_node]: configured: "),
                        ("active_logged", "vla_node]: active: commanding")):
        seen[key] = next((t for t, line in lines if marker in line), t0 - 1)  # -1: not seen
    return {"seen": {k: round(v - t0, 3) for k, v in seen.items()}, "up_s": round(up, 3), "code": code, "out": out,
            "safety": safety.get("state", "")}


def _check(run: dict[str, object], nodes: tuple[str, ...]) -> None:
    out, seen = str(run["out"]), run["seen"]
    tail = out[-4000:]
    assert {"active", "proposed", "safe_after_proposal"} <= set(seen), (
        f"graph not up in {BUDGET_S:g} s: {seen}; supervisor {run['safety'][:300]}\n{tail}")
    assert "configured: mnn bundle " in out and "/share/omni_vla/bundles/reference" in out, tail
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
    run = _run_graph(install, tmp_path, "omni_vla.launch.py", True, "robot1", "backend:=mnn")
    _check(run, ("vla_node", "safety_supervisor"))
    seen = run["seen"]
    print(f"\ncold start (ros2 launch, MNN): {seen['safe_after_proposal']:.2f} s from launch start to the first safe "
          f"command after the policy's first proposal; " + json.dumps(seen))


@needs_launch
@pytest.mark.slow
def test_sim_launch_from_an_install_space_in_an_unrelated_directory(install: Path, tmp_path: Path) -> None:
    """sim.launch.py: sim_node is the robot; the limits file comes from the joint_limits_file argument."""
    limits = install / "share" / "omni_vla" / "config" / "joint_limits.yaml"
    run = _run_graph(install, tmp_path, "sim.launch.py", False, "", f"joint_limits_file:={limits}")
    _check(run, ("sim_node", "vla_node", "safety_supervisor"))
    assert f"limits from {limits}" in str(run["out"])
    print(f"\nsim graph up (ros2 launch, MNN): {run['seen']}")
