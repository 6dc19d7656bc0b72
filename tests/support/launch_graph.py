"""The robot's graph brought up by the real ROS 2 launch system (../shared/ros2_launch: the Jazzy
`launch`/`launch_ros` sources, no wheels exist) against a colcon install space of this checkout, from a working
directory unrelated to the source tree: the install space (a session fixture), and `run_graph`, which launches a
launch file, waits for vla_node to go active and for safe commands after the policy's proposals, then stops the
graph with SIGINT and returns what it saw."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from omni_vla.tools.domains import lock_fds

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared"  # CI clones the repository with shared/ beside it
RUN_LAUNCH = SHARED / "ros2_launch" / "run_launch.py"
BUDGET_S = 20.0  # launch start -> vla_node active and safe commands after proposals
INSTRUCTION = "pick up the red cube"
SAFE_TOPIC = "/forward_position_controller/commands"
HOME = [0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04]  # the sim's home pose (sim/robot.py HOME_QPOS)
JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]

needs_launch = pytest.mark.skipif(
    not RUN_LAUNCH.is_file(), reason=f"no real ROS 2 launch system here: {RUN_LAUNCH.resolve()} is missing")


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
    """`ros2 launch` from `cwd`, with a temporary directory and ROS_HOME of its own beside it (what a launch leaves
    there is the test's to see)."""
    site = next(install.glob("lib/python3*/site-packages"))
    for folder in ("tmp", "ros_home"):
        (cwd.parent / folder).mkdir(exist_ok=True)
    env = {**os.environ, "AMENT_PREFIX_PATH": str(install), "PYTHONPATH": str(site), "ROS_DOMAIN_ID": str(domain),
           "PYTHONUNBUFFERED": "1", "TMPDIR": str(cwd.parent / "tmp"), "ROS_HOME": str(cwd.parent / "ros_home")}
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    launch_file = install / "share" / "omni_vla" / "launch" / name
    return subprocess.Popen([sys.executable, str(RUN_LAUNCH.resolve()), str(launch_file), *args], cwd=cwd, env=env,
                            pass_fds=lock_fds(domain),
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


def run_graph(install: Path, tmp_path: Path, launch_file: str, fake_robot: bool, namespace: str = "",
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
            "safety": safety.get("state", ""), "temp_files": sorted(p.name for p in (tmp_path / "tmp").iterdir())}
