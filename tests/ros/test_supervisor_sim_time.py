"""The real safety_supervisor process under use_sim_time over DDS: its tick follows /clock, and when /clock goes
back (a simulation reset, a bag replayed from its start) the inputs received before the jump no longer count as
fresh: it stops the arm, and resumes once joint states and proposals arrive on the new time.

The probe is simulator, robot and policy at once: it publishes /clock, joint states that track the supervisor's
commands, and proposals, all on simulated time it moves itself.
"""
from __future__ import annotations

import json
import time

import pytest

from rosutil import REPO, run_against_node

NAMES = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
PARAMS = {"joint_limits_file": str(REPO / "config" / "joint_limits.yaml"), "use_sim_time": "true",
          "rate_hz": 100.0, "command_timeout_s": 0.2, "joint_state_timeout_s": 0.2, "status_period_s": 0.05}


class Sim:
    """/clock, tracking joint states and a slow proposal on joint 1, stepped by hand."""

    def __init__(self, probe, ex) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray, String
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

        self.ex, self.t, self.position = ex, 10000.0, list(HOME)
        self.commands: list[list[float]] = []
        self.states: list[str] = []
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        probe.create_subscription(Float64MultiArray, "/forward_position_controller/commands", self._on_command, reliable)
        probe.create_subscription(String, "/omni_vla/safety_status",
                                  lambda m: self.states.append(json.loads(m.data)["state"]), reliable)
        self.clock = probe.create_publisher(Clock, "/clock", 10)
        self.joints = probe.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
        self.proposals = probe.create_publisher(JointTrajectory, "/omni_vla/proposed_command", reliable)
        self.Clock, self.JointState, self.JointTrajectory, self.Point = Clock, JointState, JointTrajectory, \
            JointTrajectoryPoint

    def _on_command(self, msg) -> None:
        self.commands.append(list(msg.data))
        self.position = list(msg.data)

    def stamp(self):
        from builtin_interfaces.msg import Time

        sec, nanosec = divmod(round(self.t * 1e9), 10**9)
        return Time(sec=sec, nanosec=nanosec)

    def run(self, seconds: float, inputs: bool, until=lambda: False) -> bool:
        """Simulated time at wall speed for up to `seconds`; joint states and proposals too when `inputs`."""
        end, k = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            self.t += 0.01
            self.clock.publish(self.Clock(clock=self.stamp()))
            if inputs:
                js = self.JointState(name=NAMES, position=self.position)
                js.header.stamp = self.stamp()
                self.joints.publish(js)
                if k % 5 == 0:
                    target = list(HOME)
                    target[0] = 2.5
                    msg = self.JointTrajectory(joint_names=NAMES, points=[self.Point(positions=target)])
                    msg.header.stamp = self.stamp()
                    self.proposals.publish(msg)
            k += 1
            tick_end = time.monotonic() + 0.01
            while time.monotonic() < tick_end:
                self.ex.spin_once(timeout_sec=max(0.0, tick_end - time.monotonic()))
            if until():
                return True
        return bool(until())

    def moving(self) -> bool:
        return len(self.commands) > 2 and self.commands[-1][0] - self.commands[-2][0] > 1e-4


@pytest.mark.slow
def test_when_clock_goes_back_the_supervisor_stops_the_arm_then_resumes_on_the_new_time() -> None:
    assert run_against_node("omni_vla_safety.node", None, PARAMS, _scenario) == 0


def _scenario(probe, ex) -> None:
    sim = Sim(probe, ex)
    assert sim.run(30.0, True, lambda: sim.states[-1:] == ["active"] and sim.moving()), sim.states[-3:]
    # Time goes back an hour and only /clock runs on: what was received before the jump is not fresh.
    sim.t -= 3600.0
    n = len(sim.commands)
    assert sim.run(5.0, False, lambda: "watchdog_stop" in sim.states[-1:] and len(sim.commands) > n + 50
                   and not sim.moving()), (sim.states[-3:], sim.commands[-2:])
    # The tick kept following /clock through the jump, and inputs on the new time bring the arm back.
    n = len(sim.commands)
    assert sim.run(10.0, True, lambda: sim.states[-1:] == ["active"] and sim.moving() and len(sim.commands) > n + 20), \
        sim.states[-3:]
