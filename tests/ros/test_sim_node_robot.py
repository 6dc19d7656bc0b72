"""sim_node behaves like a robot's hardware interface (real process, real DDS, real MuJoCo): joint
states at 100 Hz stamped with the physics clock, commands applied as they arrive, true velocities
(zero while frozen), /clock under use_sim_time, and ROS parameter conventions."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from rosutil import REPO, call_service, free_domain_id, node_process, ros_context, spin_until

pytest.importorskip("rclpy")
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, String  # noqa: E402

PARAMS = REPO / "config" / "sim_node.yaml"


def stamp_s(msg: JointState) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def test_sim_node_publishes_joint_states_at_100hz_with_physics_stamps_and_follows_commands_at_once() -> None:
    domain = free_domain_id()
    with node_process("omni_vla_sim.node", domain, PARAMS, {"image_size": 32}) as proc, \
            ros_context(domain) as (node, ex):
        got: list[tuple[float, JointState]] = []
        status: list[dict] = []
        node.create_subscription(JointState, "/joint_states", lambda m: got.append((time.time(), m)),
                                 qos_profile_sensor_data)
        node.create_subscription(String, "/sim/status", lambda m: status.append(json.loads(m.data)), 10)
        episode = node.create_publisher(String, "/sim/episode", 10)
        cmd = node.create_publisher(Float64MultiArray, "/forward_position_controller/commands", 10)
        assert spin_until(ex, lambda: len(got) > 20, 60), proc.stdout.read() if proc.poll() is not None else "no states"
        # Frozen: the robot ignores commands and reports zero velocity.
        episode.publish(String(data=json.dumps({"seed": 1000001, "frozen": True})))
        assert spin_until(ex, lambda: status and status[-1].get("frozen") and status[-1]["seed"] == 1000001, 10)
        got.clear()
        assert spin_until(ex, lambda: len(got) > 5, 5)  # states after the reset
        start = np.array(got[-1][1].position)
        target = start.copy()
        target[0] += 0.2
        cmd.publish(Float64MultiArray(data=target.tolist()))
        got.clear()
        spin_until(ex, lambda: False, 0.3)
        assert all(list(m.velocity) == [0.0] * 8 for _, m in got)
        assert abs(got[-1][1].position[0] - start[0]) < 1e-6
        # Running: joint states at 100 Hz, stamps 10 ms apart on the wall clock, velocities from the physics.
        episode.publish(String(data=json.dumps({"start": True})))
        assert spin_until(ex, lambda: status and not status[-1]["frozen"], 5)
        got.clear()
        t_cmd = time.time()
        cmd.publish(Float64MultiArray(data=target.tolist()))
        spin_until(ex, lambda: False, 2.0)
        arrivals = np.array([t for t, _ in got])
        stamps = np.array([stamp_s(m) for _, m in got])
        assert len(got) / (arrivals[-1] - arrivals[0]) > 90.0
        assert np.median(np.diff(stamps)) == pytest.approx(0.010, abs=0.001)
        assert np.all(np.diff(stamps) > 0)
        assert abs(np.median(arrivals - stamps)) < 0.02  # stamped on the wall clock's time line
        # Applied as it arrives: the first joint state after the command already shows the arm moving.
        moving = next(t for t, m in got if m.position[0] - start[0] > 1e-4)
        assert moving - t_cmd < 0.05
        assert max(abs(m.velocity[0]) for _, m in got) > 0.05
        assert got[-1][1].position[0] == pytest.approx(target[0], abs=0.02)


def test_sim_node_publishes_clock_from_the_physics_under_use_sim_time() -> None:
    domain = free_domain_id()
    with node_process("omni_vla_sim.node", domain, PARAMS, {"image_size": 32, "use_sim_time": "true"}) as proc, \
            ros_context(domain) as (node, ex):
        clocks: list[float] = []
        states: list[JointState] = []
        node.create_subscription(Clock, "/clock", lambda m: clocks.append(m.clock.sec + m.clock.nanosec * 1e-9), 10)
        node.create_subscription(JointState, "/joint_states", states.append, qos_profile_sensor_data)
        assert spin_until(ex, lambda: len(clocks) > 50 and states, 60), \
            proc.stdout.read() if proc.poll() is not None else "no clock"
        assert clocks[0] < 60.0  # simulated time from the node's start, not the epoch
        assert np.median(np.diff(clocks)) == pytest.approx(0.010, abs=0.001)
        assert stamp_s(states[-1]) <= clocks[-1] + 1e-9


def test_sim_node_refuses_an_unknown_parameter_in_one_line() -> None:
    env_cmd = [sys.executable, "-m", "omni_vla_sim.node", "--ros-args", "--params-file", str(PARAMS),
               "-p", "joint_state_rate:=100.0"]
    proc = subprocess.run(env_cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown parameter(s) 'joint_state_rate'" in lines[0] and "joint_state_hz" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_sim_node_refuses_an_out_of_range_rate_in_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "omni_vla_sim.node", "--ros-args", "-p", "joint_state_hz:=5.0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "joint_state_hz" in lines[0] and "Traceback" not in proc.stderr


def test_sim_node_describes_every_parameter_read_only_with_its_range() -> None:
    from rcl_interfaces.srv import DescribeParameters

    from omni_vla_sim.node import SimNodeConfig

    domain = free_domain_id()
    with node_process("omni_vla_sim.node", domain, PARAMS, {"image_size": 32}), ros_context(domain) as (node, ex):
        client = node.create_client(DescribeParameters, "/sim_node/describe_parameters")
        assert client.wait_for_service(timeout_sec=60)
        reply = call_service(ex, client, DescribeParameters.Request(names=list(SimNodeConfig.model_fields)))
        described = {d.name: d for d in reply.descriptors}
    assert set(described) == set(SimNodeConfig.model_fields)
    assert all(d.read_only and d.description for d in described.values())
    rate = described["joint_state_hz"].floating_point_range[0]
    assert (rate.from_value, rate.to_value) == (10.0, 1000.0)
