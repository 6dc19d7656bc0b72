"""A policy with three named, non-square cameras on vla_node: each camera mapped to its topic by name in the
params file, configure refused naming the camera that has no topic, the loop and its diagnostics per camera,
and the chunk length and rate taken from the bundle's manifest (execution_horizon and rate_hz left at 0)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lerobot_env import imported_act
from rosutil import REPO, free_domain_id, run_against_node

JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
HOME = [0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04]
CAMERAS = ["top", "front", "wrist"]
SIZE = (48, 64)  # height, width: not square, not the reference's 64x64
# A chunk of 6 executed 5 at a time at 15 Hz: nothing the shipped params file says (0 = the bundle's).
SPEC = {"seed": 11, "cameras": CAMERAS, "image_size": list(SIZE), "state_dim": 8, "action_dim": 8,
        "act": {"chunk_size": 6, "n_action_steps": 5, "dim_model": 32, "n_heads": 2, "dim_feedforward": 64,
                "n_encoder_layers": 1, "n_decoder_layers": 1, "use_vae": False}}
TOPICS = [f"{c}=/camera/{c}/image_raw" for c in CAMERAS]


@pytest.fixture(scope="module")
def three_cameras(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported_act(tmp_path_factory.mktemp("three_cameras"), SPEC, rate_hz=15.0)


def _run_node(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "omni_vla.ros.node", "--ros-args", "--params-file",
           str(REPO / "config" / "vla_node.yaml"), *args]
    env = {**os.environ, "ROS_DOMAIN_ID": str(free_domain_id())}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)


def test_a_camera_of_the_bundle_without_a_topic_fails_configure_naming_it(three_cameras: Path) -> None:
    res = _run_node("-p", f"bundle_dir:={three_cameras}", "-p", "autostart:=true")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert ("configure failed: the policy reads camera(s) ['top'] but topics.cameras has ['front', 'wrist']; "
            "add a 'name=/topic' entry for each") in out, out
    assert "Traceback" not in out


def test_a_malformed_camera_entry_fails_configure_with_what_was_expected(three_cameras: Path) -> None:
    res = _run_node("-p", f"bundle_dir:={three_cameras}", "-p", "autostart:=true",
                    "-p", "topics.cameras:=[top, front=/camera/front/image_raw]")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "camera topic entry 'top': expected 'name=/topic'" in out, out
    assert "Traceback" not in out


@pytest.mark.slow
def test_three_named_cameras_each_reach_the_policy_from_their_own_topic(three_cameras: Path) -> None:
    params = {"bundle_dir": str(three_cameras), "backend": "mnn", "autostart": "true",
              "topics.cameras": "[" + ", ".join(TOPICS) + "]"}
    code = run_against_node("omni_vla.ros.node", REPO / "config" / "vla_node.yaml", params, _scenario)
    assert code == 0


def _scenario(probe, ex) -> None:  # noqa: ANN001 - rclpy node and executor
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from rosutil import spin_until
    from sensor_msgs.msg import Image
    from std_msgs.msg import String
    from trajectory_msgs.msg import JointTrajectory

    from omni_vla.tools.bench_graph import attach_fake_robot

    proposals: list[JointTrajectory] = []
    status: list[dict[str, str]] = []
    probe.create_subscription(JointTrajectory, "/omni_vla/proposed_command", proposals.append,
                              QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
    probe.create_subscription(DiagnosticArray, "/diagnostics", lambda m: status.extend(
        {kv.key: kv.value for kv in s.values} for s in m.status if s.name.startswith("vla_node")), 10)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    probe.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data="pick up the red cube"))
    attach_fake_robot(probe, list(HOME))  # front and wrist at 128x128, joint states
    t0 = time.monotonic()
    # Without the third camera the loop waits for it, naming it, and proposes nothing.
    assert spin_until(ex, lambda: bool(status) and status[-1].get("state") == "WAITING", 60.0), status[-1:]
    spin_until(ex, lambda: False, 1.5)
    assert not proposals and status[-1]["top_age_ms"] == "none", status[-1]
    top = probe.create_publisher(Image, "/camera/top/image_raw", qos_profile_sensor_data)
    frame = Image(height=96, width=80, encoding="rgb8", step=3 * 80, data=bytes(range(256)) * 90)
    probe.create_timer(1 / 30, lambda: (setattr(frame.header, "stamp", probe.get_clock().now().to_msg()),
                                        top.publish(frame)))
    assert spin_until(ex, lambda: len(proposals) >= 10, 60.0), (
        f"{len(proposals)} proposals after {time.monotonic() - t0:.1f} s; {status[-1:]}")
    assert all(list(p.joint_names) == JOINTS for p in proposals)
    assert spin_until(ex, lambda: status[-1].get("state") == "OK", 10.0), status[-1]
    last = status[-1]
    for camera in CAMERAS:  # every camera's age is reported, none stale
        assert last[f"{camera}_age_ms"] != "none" and float(last[f"{camera}_age_ms"]) < 500, last
    assert float(last["rate_hz_target"]) == 15.0, last  # the bundle's control rate, not a default


def test_the_manifest_states_the_cameras_rate_and_steps_the_node_runs_at(three_cameras: Path) -> None:
    m = json.loads((three_cameras / "manifest.json").read_text())
    assert [(c["name"], c["height"], c["width"]) for c in m["cameras"]] == [(c, *SIZE) for c in CAMERAS]
    assert (m["control_rate_hz"], m["action"]["chunk_length"], m["action"]["execute_steps"]) == (15.0, 6, 5)


def test_eval_refuses_a_bundle_reading_a_camera_the_simulated_robot_does_not_render(three_cameras: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "eval", "--bundle", str(three_cameras),
                          "--episodes", "1", "--tasks", "pick_red"], capture_output=True, text=True, timeout=120, cwd=REPO)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert lines[-1].startswith("omni-vla eval: ") and lines[-1].endswith(
        "the policy reads camera(s) ['top'] but the simulated robot has ['front', 'wrist']"), res.stderr
    assert "Traceback" not in res.stderr


def test_a_bundle_joint_without_limits_in_the_robots_file_fails_configure_naming_it(three_cameras: Path,
                                                                                   tmp_path: Path) -> None:
    import yaml

    limits = yaml.safe_load((REPO / "config" / "joint_limits.yaml").read_text())
    del limits["joint_limits"]["panda_finger_joint1"]  # a robot description without the bundle's gripper joint
    arm_only = tmp_path / "arm_only.yaml"
    arm_only.write_text(yaml.safe_dump(limits))
    res = _run_node("-p", f"bundle_dir:={three_cameras}", "-p", "autostart:=true", "-p",
                    "topics.cameras:=[" + ", ".join(TOPICS) + "]", "-p", f"joint_limits_file:={arm_only}")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert f"configure failed: the bundle's joints ['panda_finger_joint1'] have no limits in {arm_only}" in out, out
    assert "Traceback" not in out
