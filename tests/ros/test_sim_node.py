"""sim_node over real DDS: publishes cameras and joint states, follows position commands."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
from rosutil import REPO, free_domain_id, node_process, ros_context, spin_until


def _listen(node: Any) -> tuple[list, list, list[dict]]:
    """sim_node's joint states, front images and status, as they arrive."""
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String

    joints: list[JointState] = []
    images: list[Image] = []
    status: list[dict] = []
    node.create_subscription(JointState, "/joint_states", joints.append, qos_profile_sensor_data)
    node.create_subscription(Image, "/camera/front/image_raw", images.append, qos_profile_sensor_data)
    node.create_subscription(String, "/sim/status", lambda m: status.append(json.loads(m.data)), 10)
    return joints, images, status


def test_sim_node_publishes_sensors_and_follows_forward_position_commands() -> None:
    from std_msgs.msg import Float64MultiArray

    domain = free_domain_id()
    with node_process("omni_vla_sim.node", domain, REPO / "config" / "sim_node.yaml",
                      {"image_size": 64}) as proc, ros_context(domain) as (node, ex):
        joints, images, status = _listen(node)
        cmd_pub = node.create_publisher(Float64MultiArray, "/forward_position_controller/commands", 10)
        assert spin_until(ex, lambda: joints and images, 60), proc.stdout.read() if proc.poll() else "no data"
        js = joints[-1]
        assert list(js.name)[:8] == [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
        img = images[-1]
        assert (img.encoding, img.height, img.width) == ("rgb8", 64, 64)
        assert np.frombuffer(bytes(img.data), np.uint8).std() > 5
        start = np.array(js.position)
        target = start.copy()
        target[0] += 0.3
        target[7] = 0.01
        # A malformed command is ignored (the robot holds), a valid one is followed.
        cmd_pub.publish(Float64MultiArray(data=[float("nan")] * 8))
        assert spin_until(ex, lambda: abs(joints[-1].position[0] - target[0]) < 0.02, 0.5) is False, "a NaN command must not move the robot"
        for _ in range(5):
            cmd_pub.publish(Float64MultiArray(data=target.tolist()))
            ex.spin_once(timeout_sec=0.05)
        assert spin_until(ex, lambda: abs(joints[-1].position[0] - target[0]) < 0.02, 10)
        assert status and status[-1]["task"] == "pick_red"
        # Past the episode's end (pick_red: 120 periods at 20 Hz) the verdict is latched and the arm still follows.
        assert spin_until(ex, lambda: status and status[-1]["done"], 30), status[-1:]
        steps = status[-1]["step"]
        back = start.copy()
        back[7] = 0.01
        for _ in range(5):
            cmd_pub.publish(Float64MultiArray(data=back.tolist()))
            ex.spin_once(timeout_sec=0.05)
        assert spin_until(ex, lambda: abs(joints[-1].position[0] - back[0]) < 0.02, 10), "the arm froze at the end"
        assert status[-1]["done"] and status[-1]["step"] == steps and not status[-1]["success"]


def test_a_stalled_simulator_stamps_on_the_wall_clock_again_once_it_resumes() -> None:
    """Suspended 2 s (as a loaded start-up can stall it), sim_node skips the physics it cannot catch up on; its
    stamps must jump with the wall clock, or every consumer reads its joint states and images as stale for good."""
    import os
    import signal
    import time

    def lag(stamp) -> float:
        return time.time() - (stamp.sec + stamp.nanosec * 1e-9)

    domain = free_domain_id()
    with node_process("omni_vla_sim.node", domain, REPO / "config" / "sim_node.yaml",
                      {"image_size": 16}) as proc, ros_context(domain) as (node, ex):
        joints, images, status = _listen(node)
        assert spin_until(ex, lambda: len(joints) > 20 and images, 60), proc.stdout.read() if proc.poll() else "no data"
        assert lag(joints[-1].header.stamp) < 0.2
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            time.sleep(2.0)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        seen, shown = len(joints), len(images)
        assert spin_until(ex, lambda: len(joints) > seen + 20 and len(images) > shown + 2, 10), "no data after resuming"
        assert spin_until(ex, lambda: status and status[-1]["overruns"] >= 1, 5), status[-1:]
        ex.spin_once(timeout_sec=0.0)
        assert lag(joints[-1].header.stamp) < 0.2, f"joint states stamped {lag(joints[-1].header.stamp):.2f} s late"
        assert lag(images[-1].header.stamp) < 0.3, f"images stamped {lag(images[-1].header.stamp):.2f} s late"
