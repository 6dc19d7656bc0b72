"""vla_node over real DDS with a real exported (tiny, MNN) bundle, run as `python -m omni_vla.ros.node`."""
from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rosutil import REPO, free_domain_id, run_against_node
from tiny_bundles import tiny_bundle
from vla_node_io import INSTRUCTION, JOINTS, image_msg

PARAMS_FILE = REPO / "config" / "vla_node.yaml"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bundle(tmp_path_factory)


def test_image_array_handles_row_padding() -> None:
    from sensor_msgs.msg import Image

    from omni_vla.ros.node import image_array
    from omni_vla.core.perception import ImageRejected

    rows = np.arange(4 * 20, dtype=np.uint8).reshape(4, 20)  # 6x4 rgb with 2 padding bytes per row
    img = image_array(Image(height=4, width=6, encoding="rgb8", step=20, data=rows.tobytes()))
    assert img.shape == (4, 6, 3)
    np.testing.assert_array_equal(img.reshape(4, 18), rows[:, :18])
    with pytest.raises(ImageRejected, match="inconsistent"):
        image_array(Image(height=4, width=6, encoding="rgb8", step=18, data=bytes(10)))
    with pytest.raises(ImageRejected, match="unsupported image encoding 'rgba8'"):
        image_array(Image(height=4, width=6, encoding="rgba8", step=24, data=bytes(96)))


@pytest.mark.slow
def test_node_commands_only_after_joint_states_and_holds_when_they_stop(bundle: Path) -> None:
    rng = np.random.default_rng(0)
    params = {"bundle_dir": str(bundle), "backend": "mnn", "autostart": "true", "rate_hz": 20.0,
              "max_obs_age_s": 0.3}
    code = run_against_node("omni_vla.ros.node", PARAMS_FILE, params, lambda probe, ex: _scenario(probe, ex, rng))
    assert code == 0, "vla_node did not shut down cleanly on SIGINT"


def _scenario(probe, ex, rng: np.random.Generator) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String
    from trajectory_msgs.msg import JointTrajectory

    commands: list[tuple[float, JointTrajectory]] = []
    diags: list[dict[str, str]] = []
    probe.create_subscription(JointTrajectory, "/omni_vla/proposed_command",
                              lambda m: commands.append((time.monotonic(), m)),
                              QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))

    def on_diag(msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name.startswith("vla_node"):
                diags.append({"message": st.message, "hardware_id": st.hardware_id, "level": int.from_bytes(st.level, "little")
                              if isinstance(st.level, bytes) else int(st.level),
                              **{kv.key: kv.value for kv in st.values}})

    probe.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    front = probe.create_publisher(Image, "/camera/front/image_raw", qos_profile_sensor_data)
    wrist = probe.create_publisher(Image, "/camera/wrist/image_raw", qos_profile_sensor_data)
    joints = probe.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    probe.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=INSTRUCTION))
    shuffled = JOINTS[::-1]
    home = dict(zip(JOINTS, [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04]))
    positions = [home[n] for n in shuffled]

    def feed(seconds: float, with_joints: bool, until=lambda: False, bad_frame: bool = False) -> None:
        end = time.monotonic() + seconds
        next_pub = 0.0
        while time.monotonic() < end and not until():
            now = time.monotonic()
            if now >= next_pub:
                front.publish(image_msg(rng, "mono8", 1) if bad_frame else image_msg(rng))
                wrist.publish(image_msg(rng, "bgr8"))
                if with_joints:
                    joints.publish(JointState(name=shuffled, position=positions))
                next_pub = now + 0.02
            ex.spin_once(timeout_sec=0.005)

    # Phase 1: cameras and instruction but no joint states -> active, waiting (WARN, not an error), nothing published.
    feed(60.0, False, until=lambda: bool(diags) and diags[-1]["message"] == "waiting for the first joint state")
    assert diags and diags[-1]["message"] == "waiting for the first joint state", diags[-1:] or "no diagnostics"
    feed(1.0, False)
    assert commands == [], "published before any joint state arrived"
    assert (diags[-1]["state"], diags[-1]["level"], diags[-1]["backend"]) == ("WAITING", 1, "mnn")
    assert re.fullmatch(r"\S+@[0-9a-f]{8} \(mnn\)", diags[-1]["hardware_id"]), diags[-1]["hardware_id"]

    # Phase 2: joint states (reversed name order, no velocity) -> commands at the loop rate.
    feed(20.0, True, until=lambda: len(commands) >= 30)
    assert len(commands) >= 30
    for _, msg in commands:
        assert list(msg.joint_names) == JOINTS
        assert len(msg.points) == 1
        pt = msg.points[0]
        assert len(pt.positions) == 8 and all(math.isfinite(v) for v in pt.positions)
        assert (pt.time_from_start.sec, pt.time_from_start.nanosec) == (0, 50_000_000)
    span = commands[-1][0] - commands[10][0]
    assert 0.6 < span / (len(commands) - 11) / 0.05 < 1.6, "about one command per 50 ms tick"
    stamps = [m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for _, m in commands]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))

    # A wrong-encoding frame is rejected and the loop carries on.
    n = len(commands)
    feed(0.1, True, bad_frame=True)  # shorter than max_obs_age_s: the last good frame still counts
    feed(2.5, True, until=lambda: len(commands) >= n + 20 and int(diags[-1].get("rejected_images", 0)) > 0)
    assert len(commands) >= n + 20
    d = diags[-1]
    assert int(d["rejected_images"]) > 0 and "mono8" in d["last_rejection"]
    assert d["state"] == "OK" and float(d["loop_rate_hz"]) > 15
    for key in ("tick_lateness_p99_ms", "inference_latency_p50_ms", "missed_ticks", "overruns", "queue_depth",
                "scheduling"):
        assert key in d
    _check_threads_below_the_loop(d)

    # Phase 3: joint states stop -> commands stop within max_obs_age_s (+ one tick), ERROR.
    t_stop = time.monotonic()
    feed(1.5, False)
    late = [t for t, _ in commands if t > t_stop + 0.3 + 0.15]
    assert late == [], f"{len(late)} commands after the joint state went stale"
    feed(3.0, False, until=lambda: "joint state older" in diags[-1]["message"])
    assert diags[-1]["message"] == "joint state older than max_obs_age_s=0.3 s"
    assert (diags[-1]["state"], diags[-1]["level"]) == ("STALE", 1), "stale data is a warning, not an error"


def _policy_and_priority(stat: Path) -> tuple[int, int]:
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return int(fields[38]), int(fields[37])  # proc(5): policy is field 41, rt_priority 40


def _check_threads_below_the_loop(d: dict[str, str]) -> None:
    """The node's loop thread under SCHED_FIFO 50, its executor (the main thread) at 49, native threads (DDS, BLAS)
    and its worker process at normal priority."""
    if "unavailable" in d["threads_scheduling"] + d["scheduling"]:
        pytest.skip(f"no real-time privilege here: {d['threads_scheduling']}")
    worker = Path(f"/proc/{d['worker_pid']}")
    node = Path(f"/proc/{(worker / 'stat').read_text().rsplit(')', 1)[1].split()[1]}")
    threads = {t.name: _policy_and_priority(t / "stat") for t in (node / "task").iterdir()}
    assert d["threads_scheduling"].startswith("SCHED_FIFO 49 for the Python threads"), d["threads_scheduling"]
    assert threads[node.name] == (1, 49), "the executor (main thread) just below the loop"
    assert list(threads.values()).count((1, 50)) == 1, threads
    assert set(threads.values()) <= {(1, 50), (1, 49), (0, 0)}, threads
    assert list(threads.values()).count((0, 0)) >= 3, "DDS's threads keep normal priority"
    assert _policy_and_priority(worker / "stat") == (0, 0), "the inference worker runs at normal priority"


@pytest.mark.slow
def test_unknown_joint_name_fails_configure_with_the_name(bundle: Path) -> None:
    names = "[" + ",".join(JOINTS[:-1] + ["panda_joint9"]) + "]"
    cmd = [sys.executable, "-m", "omni_vla.ros.node", "--ros-args", "-p", f"bundle_dir:={bundle}",
           "-p", "autostart:=true", "-p", f"joint_names:={names}"]
    env = {**__import__("os").environ, "ROS_DOMAIN_ID": str(free_domain_id())}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert res.returncode == 1
    assert "unknown joint names ['panda_joint9']" in res.stderr + res.stdout


@pytest.mark.slow
def test_lifecycle_configure_starts_worker_deactivate_stops_commands_cleanup_stops_worker(bundle: Path) -> None:
    import os

    import rclpy
    from rclpy.context import Context
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from omni_vla.ros.node import VlaNode

    ctx = Context()
    rclpy.init(context=ctx, domain_id=free_domain_id())
    node = VlaNode(context=ctx, parameter_overrides=[
        Parameter("bundle_dir", value=str(bundle)), Parameter("backend", value="mnn"),
        Parameter("rate_hz", value=50.0)])
    try:
        assert node.controller is None, "nothing loads before configure"
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        pid = node.inference.pid
        os.kill(pid, 0)  # the worker process is up
        img = np.zeros((96, 96, 3), np.uint8)

        def feed() -> None:
            node.store.put_image("front", img, "rgb8")
            node.store.put_image("wrist", img, "rgb8")
            node.store.put_joints(JOINTS, [0.0] * 8, [])

        node.store.set_instruction(INSTRUCTION)
        feed()
        time.sleep(0.3)
        assert node.controller.counts["commands"] == 0, "inactive: no commands"
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        end = time.monotonic() + 10
        while node.controller.counts["commands"] < 20 and time.monotonic() < end:
            feed()
            time.sleep(0.02)
        assert node.controller.counts["commands"] >= 20
        assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        n = node.controller.counts["commands"]
        for _ in range(10):
            feed()
            time.sleep(0.02)
        assert node.controller.counts["commands"] == n, "deactivated: no more commands"
        assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert node.inference is None and node.controller is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        node.release()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
