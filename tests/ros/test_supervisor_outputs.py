"""ros2_control outputs of the real safety_supervisor process over DDS: a JointTrajectoryController
stream with named joints, the gripper on its own controller topic, and trajectory proposals followed."""
from __future__ import annotations

import time

import pytest
from rosutil import REPO, run_against_node

pytest.importorskip("rclpy")
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

ARM = [f"panda_joint{i}" for i in range(1, 8)]
NAMES = ARM + ["panda_finger_joint1"]
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
PARAMS = REPO / "config" / "safety_supervisor.yaml"


def drive(probe, ex, arm_out: list, grip_out: list, seconds: float = 1.5, budget_s: float = 15.0) -> None:
    """Play robot (joint states at 100 Hz) and policy (one row 50 ms ahead at 20 Hz, joint 1 and gripper moving)
    for `seconds`, and on until the outputs have come (DDS discovery on a loaded machine can take 3 s)."""
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    js_pub = probe.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    prop_pub = probe.create_publisher(JointTrajectory, "/omni_vla/proposed_command", reliable)
    t0 = time.monotonic()
    next_prop = t0
    while time.monotonic() - t0 < budget_s and (time.monotonic() - t0 < seconds or len(arm_out) <= 20 or not grip_out):
        js = JointState(name=NAMES, position=HOME)
        js.header.stamp = probe.get_clock().now().to_msg()
        js_pub.publish(js)
        if time.monotonic() >= next_prop:
            next_prop += 0.05
            t = time.monotonic() - t0
            row = list(HOME)
            row[0] = 0.1 * t
            row[7] = 0.02 - 0.005 * t
            point = JointTrajectoryPoint(positions=row)
            point.time_from_start.nanosec = 50_000_000
            msg = JointTrajectory(joint_names=NAMES, points=[point])
            msg.header.stamp = probe.get_clock().now().to_msg()
            prop_pub.publish(msg)
        ex.spin_once(timeout_sec=0.01)
    assert arm_out and grip_out, f"arm {len(arm_out)} gripper {len(grip_out)} messages"


def test_joint_trajectory_output_names_the_arm_joints_and_the_gripper_goes_to_its_own_controller() -> None:
    arm: list[JointTrajectory] = []
    grip: list[Float64MultiArray] = []

    def scenario(probe, ex) -> None:
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        probe.create_subscription(JointTrajectory, "/joint_trajectory_controller/joint_trajectory", arm.append, reliable)
        probe.create_subscription(Float64MultiArray, "/gripper_controller/commands", grip.append, reliable)
        probe.create_subscription(Float64MultiArray, "/forward_position_controller/commands",
                                  lambda m: pytest.fail("forward output must stay silent"), reliable)
        drive(probe, ex, arm, grip)

    code = run_against_node("omni_vla_safety.node", PARAMS,
                            {"output": "joint_trajectory", "gripper_output": "forward_position"}, scenario)
    assert code == 0
    last = arm[-1]
    assert list(last.joint_names) == ARM and len(last.points) == 1
    assert last.points[0].time_from_start.sec == 0 and last.points[0].time_from_start.nanosec == 10_000_000
    assert (last.header.stamp.sec, last.header.stamp.nanosec) == (0, 0)  # start on receipt
    assert len(last.points[0].positions) == 7 and last.points[0].positions[0] > 0.01  # joint 1 follows the rows
    assert all(len(m.data) == 1 for m in grip) and grip[-1].data[0] < 0.02  # the gripper closes on its own topic
    assert len(arm) > 20  # one message per period once DDS discovery is done (the cadence: test_safety_supervisor_node)


def test_gripper_as_its_own_trajectory_controller_beside_the_forward_arm_output() -> None:
    arm: list[Float64MultiArray] = []
    grip: list[JointTrajectory] = []

    def scenario(probe, ex) -> None:
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        probe.create_subscription(Float64MultiArray, "/forward_position_controller/commands", arm.append, reliable)
        probe.create_subscription(JointTrajectory, "/gripper_trajectory_controller/joint_trajectory", grip.append,
                                  reliable)
        drive(probe, ex, arm, grip)

    code = run_against_node("omni_vla_safety.node", PARAMS,
                            {"gripper_output": "joint_trajectory",
                             "gripper_topic": "/gripper_trajectory_controller/joint_trajectory"}, scenario)
    assert code == 0
    assert all(len(m.data) == 7 for m in arm) and arm[-1].data[0] > 0.01
    assert list(grip[-1].joint_names) == ["panda_finger_joint1"] and grip[-1].points[0].positions[0] < 0.02


def test_forward_position_output_keeps_all_joints_in_configured_order() -> None:
    arm: list[Float64MultiArray] = []

    def scenario(probe, ex) -> None:
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        probe.create_subscription(Float64MultiArray, "/forward_position_controller/commands", arm.append, reliable)
        drive(probe, ex, arm, [None])

    assert run_against_node("omni_vla_safety.node", PARAMS, {}, scenario) == 0
    assert all(len(m.data) == 8 for m in arm) and arm[-1].data[0] > 0.01 and arm[-1].data[7] < 0.02
