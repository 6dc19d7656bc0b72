"""ROS level: the real safety_supervisor process serves /omni_vla/resync_command, and starts for a robot whose
parameters give only its joint names (robot-neutral defaults).

The test plays a frozen robot (a paused sim: joint states say where it is, whatever is commanded). It calls the
Trigger, then checks the published commands reach the measured pose with steps inside config/joint_limits.yaml
(read here with plain YAML: velocity and acceleration from consecutive commands at the supervisor's period).
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from rosutil import run_against_node, spin_until  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Bool, Float64MultiArray, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LIMITS = yaml.safe_load((REPO / "config" / "joint_limits.yaml").read_text())["joint_limits"]
NAMES = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
MOVED = [0.5, -0.3, 0.2, -2.0, 0.4, 1.3, -0.6, 0.03]
DT = 0.01  # the shipped rate_hz, 100


class FrozenRobot:
    """Joint states at `position` every period; the commands and status the supervisor publishes, recorded."""

    def __init__(self, node: Any, names: list[str], position: list[float]) -> None:
        self.node, self.names, self.position = node, names, list(position)
        self.publishing = True
        self.commands: list[list[float]] = []
        self.status: dict[str, Any] = {}
        reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(Float64MultiArray, "/forward_position_controller/commands",
                                 lambda m: self.commands.append(list(m.data)), reliable)
        node.create_subscription(String, "/omni_vla/safety_status",
                                 lambda m: self.status.update(json.loads(m.data)), reliable)
        self.js = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
        self.estop = node.create_publisher(Bool, "/omni_vla/estop", reliable)
        self.resync = node.create_client(Trigger, "/omni_vla/resync_command")
        node.create_timer(DT, self._publish)

    def _publish(self) -> None:
        if self.publishing:
            self.js.publish(JointState(name=self.names, position=list(self.position)))

    def call_resync(self, ex: Any) -> Trigger.Response:
        assert self.resync.wait_for_service(timeout_sec=10.0), "/omni_vla/resync_command not served"
        future = self.resync.call_async(Trigger.Request())
        assert spin_until(ex, future.done, 5.0), "resync_command did not answer"
        return future.result()


def _params(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_resync_service_brings_a_stopped_command_to_the_measured_pose_within_the_limits(tmp_path: Path) -> None:
    params = _params(tmp_path, f"""
        safety_supervisor:
          ros__parameters:
            joint_limits_file: {REPO / 'config' / 'joint_limits.yaml'}
            status_period_s: 0.02
    """)

    def scenario(probe: Any, ex: Any) -> None:
        robot = FrozenRobot(probe, NAMES, HOME)
        assert spin_until(ex, lambda: robot.status.get("state") == "hold" and len(robot.commands) > 5, 20.0)
        reply = robot.call_resync(ex)
        assert reply.success and "already at the measured pose" in reply.message, reply.message

        robot.publishing = False  # stale joint states: refused, saying why
        assert spin_until(ex, lambda: robot.status.get("state") == "watchdog_stop", 5.0)
        reply = robot.call_resync(ex)
        assert not reply.success and "no fresh joint state" in reply.message, reply.message

        robot.position = list(MOVED)  # the robot was moved while stopped (a scene reset)
        robot.publishing = True
        spin_until(ex, lambda: False, 0.3)
        first = len(robot.commands)
        reply = robot.call_resync(ex)
        assert reply.success and "accepted" in reply.message, reply.message
        assert spin_until(ex, lambda: robot.status.get("state") == "resync", 5.0)
        assert spin_until(ex, lambda: robot.status.get("state") == "hold", 20.0), robot.status
        spin_until(ex, lambda: False, 0.2)
        path = robot.commands[first - 1:]
        assert max(abs(a - b) for a, b in zip(path[-1], MOVED)) <= 1e-6
        assert len(path) > 10  # a move, not a jump
        for j, name in enumerate(NAMES):
            v = [(b[j] - a[j]) / DT for a, b in zip(path, path[1:])]
            acc = [(b - a) / DT for a, b in zip(v, v[1:])]
            assert max(map(abs, v)) <= LIMITS[name]["max_velocity"] + 1e-6, name
            assert max(map(abs, acc)) <= max(LIMITS[name]["max_acceleration"],
                                             LIMITS[name]["max_deceleration"]) + 1e-4, name
        assert robot.status["counts"].get("resync") == 1 and robot.status["counts"].get("resync_done") == 1

    assert run_against_node("omni_vla_safety.node", params, {}, scenario) == 0


def test_a_robot_given_only_its_joint_names_starts_with_the_default_windows(tmp_path: Path) -> None:
    """Six joints and no per-joint lists: before the defaults were one value, eight Panda values refused this."""
    names = [f"j{i}" for i in range(1, 7)]
    limits = {n: {"has_position_limits": True, "min_position": -3.0, "max_position": 3.0,
                  "has_velocity_limits": True, "max_velocity": 2.0, "has_acceleration_limits": True,
                  "max_acceleration": 10.0} for n in names}
    (tmp_path / "limits.yaml").write_text(yaml.safe_dump({"joint_limits": limits}))
    params = _params(tmp_path, f"""
        safety_supervisor:
          ros__parameters:
            joint_names: [{', '.join(names)}]
            joint_limits_file: {tmp_path / 'limits.yaml'}
            joint_state_timeout_s: 1.0
    """)

    # The watchdog's timeout is widened: this is about the windows' defaults, and a loaded machine can delay the
    # probe's joint states past the shipped 0.1 s, which stops the arm instead of letting it hold.
    def scenario(probe: Any, ex: Any) -> None:
        robot = FrozenRobot(probe, names, [0.1] * 6)
        assert spin_until(ex, lambda: robot.status.get("state") == "hold" and len(robot.commands) > 5, 20.0)
        assert robot.commands[-1] == [0.1] * 6

    assert run_against_node("omni_vla_safety.node", params, {}, scenario) == 0
