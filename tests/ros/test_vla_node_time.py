"""vla_node's time and diagnostics conventions over real DDS: use_sim_time, header.stamp age, a dead worker.

The probe is the simulator: it publishes /clock itself, so the test decides when time moves.
"""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from rosutil import REPO, run_against_node
from tiny_bundles import tiny_bundle
from vla_node_io import INSTRUCTION, JOINTS, image_msg

PARAMS_FILE = REPO / "config" / "vla_node.yaml"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bundle(tmp_path_factory)


class Graph:
    """Probe-side publishers and the vla_node diagnostics seen so far."""

    def __init__(self, probe, ex) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import String
        from trajectory_msgs.msg import JointTrajectory

        self.ex = ex
        self.rng = np.random.default_rng(0)
        self.diags: list[dict] = []
        self.commands: list[float] = []
        probe.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        probe.create_subscription(JointTrajectory, "/omni_vla/proposed_command", lambda m: self.commands.append(
            m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec), QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
        self.clock = probe.create_publisher(Clock, "/clock", 10)
        self.front = probe.create_publisher(Image, "/camera/front/image_raw", qos_profile_sensor_data)
        self.wrist = probe.create_publisher(Image, "/camera/wrist/image_raw", qos_profile_sensor_data)
        self.joints = probe.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        probe.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=INSTRUCTION))
        self.JointState, self.Clock = JointState, Clock
        self.home = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04]

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            if st.name.startswith("vla_node"):
                level = int.from_bytes(st.level, "little") if isinstance(st.level, bytes) else int(st.level)
                self.diags.append({"level": level, "message": st.message, **{kv.key: kv.value for kv in st.values}})

    @staticmethod
    def stamp(t: float):
        from builtin_interfaces.msg import Time

        return Time(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))

    def publish(self, sim_t: float | None, data_t: float | None, joints: bool = True) -> None:
        """/clock at sim_t (None: not published); cameras and joints stamped data_t (None: zero stamp)."""
        if sim_t is not None:
            self.clock.publish(self.Clock(clock=self.stamp(sim_t)))
        stamp = self.stamp(data_t) if data_t is not None else self.stamp(0.0)
        for pub, enc in ((self.front, "rgb8"), (self.wrist, "bgr8")):
            img = image_msg(self.rng, enc)
            img.header.stamp = stamp
            pub.publish(img)
        if joints:
            js = self.JointState(name=JOINTS, position=self.home)
            js.header.stamp = stamp
            self.joints.publish(js)

    def spin(self, seconds: float, until=lambda: False, **feed) -> bool:
        """Spin for up to `seconds` of wall time, calling `feed(step)` every 20 ms when given."""
        end = time.monotonic() + seconds
        step = feed.get("step")
        next_pub = 0.0
        while time.monotonic() < end:
            if step is not None and time.monotonic() >= next_pub:
                step()
                next_pub = time.monotonic() + 0.02
            self.ex.spin_once(timeout_sec=0.005)
            if until():
                return True
        return bool(until())


@pytest.mark.slow
def test_under_use_sim_time_the_loop_and_staleness_follow_clock_not_the_wall(bundle: Path) -> None:
    params = {"bundle_dir": str(bundle), "backend": "mnn", "autostart": "true", "use_sim_time": "true",
              "max_obs_age_s": 0.3, "diagnostics_period_s": 0.1, "realtime_priority": 0}
    code = run_against_node("omni_vla.ros.node", PARAMS_FILE, params, _sim_time_scenario)
    assert code == 0


def _sim_time_scenario(probe, ex) -> None:
    g = Graph(probe, ex)
    sim = [1000.0]

    def running() -> None:  # simulated time at wall speed, data stamped at simulated time
        sim[0] += 0.02
        g.publish(sim[0], sim[0])

    assert g.spin(60.0, lambda: len(g.commands) >= 20, step=running), g.diags[-1:] or "no diagnostics"
    assert 999.0 < g.commands[-1] <= sim[0] + 0.05, "commands are stamped with simulated time"
    assert g.diags[-1]["time_source"] == "ROS time (use_sim_time)"

    # Simulation paused, joint states stop: 1.5 s of wall time is 0 s of simulated time -> no tick, not stale.
    n = len(g.commands)
    g.spin(1.5, step=lambda: g.publish(sim[0], sim[0], joints=False))
    assert not any(d["state"] == "STALE" for d in g.diags), "staleness judged on the wall clock"
    assert len(g.commands) <= n + 1, "the loop ticked while simulated time stood still"

    # Simulated time jumps 0.5 s and runs on -> the last joint state (0.5 s old in simulated time) is stale.
    sim[0] += 0.5

    def running_without_joints() -> None:
        sim[0] += 0.02
        g.publish(sim[0], sim[0], joints=False)

    # (for a tick the cameras are stale too: their newest frames were stamped before the jump)
    assert g.spin(10.0, lambda: g.diags and g.diags[-1]["message"].startswith("joint state older"),
                  step=running_without_joints), g.diags[-1:]
    d = g.diags[-1]
    assert (d["state"], d["message"], d["level"]) == ("STALE", "joint state older than max_obs_age_s=0.3 s", 1)

    # Simulated time goes back 100 s (a reset): the loop restarts its schedule on the new time, holds while its
    # newest inputs are from before the jump, and commands again once inputs of the new time arrive.
    sim[0] -= 100.0
    n = len(g.commands)
    assert g.spin(20.0, lambda: sum(t < 950.0 for t in g.commands[n:]) >= 10 and g.diags[-1]["state"] == "OK",
                  step=running), g.diags[-1:]
    assert int(g.diags[-1]["clock_jumps_back"]) == 1


@pytest.mark.slow
def test_header_stamp_sets_observation_age_and_skewed_stamps_are_flagged(bundle: Path) -> None:
    params = {"bundle_dir": str(bundle), "backend": "mnn", "autostart": "true", "max_obs_age_s": 0.3,
              "diagnostics_period_s": 0.2, "max_future_stamp_s": 0.05, "restart_backoff_s": 5.0,
              "restart_backoff_max_s": 10.0}
    code = run_against_node("omni_vla.ros.node", PARAMS_FILE, params, _stamp_scenario)
    assert code == 0


def _stamp_scenario(probe, ex) -> None:
    g = Graph(probe, ex)
    now = time.time  # the node's ROS clock without use_sim_time: system time

    assert g.spin(60.0, lambda: len(g.commands) >= 10, step=lambda: g.publish(None, now())), g.diags[-1:]
    assert g.spin(3.0, lambda: g.diags and g.diags[-1]["state"] == "OK", step=lambda: g.publish(None, now()))
    assert int(g.diags[-1]["stamp_fallbacks"]) == 0 and g.diags[-1]["level"] == 0

    # Data arriving now but captured 0.5 s ago (by its stamp) is stale, though fresh by arrival.
    assert g.spin(5.0, lambda: g.diags[-1]["state"] == "STALE", step=lambda: g.publish(None, now() - 0.5))
    assert g.diags[-1]["message"] == "front camera image older than max_obs_age_s=0.3 s"
    assert float(g.diags[-1]["front_age_ms"]) >= 400

    # A sender whose clock runs 2 s ahead: stamps are not trusted, arrival time is, and it is flagged.
    assert g.spin(5.0, lambda: g.diags[-1]["state"] == "OK" and int(g.diags[-1]["stamp_fallbacks"]) > 0,
                  step=lambda: g.publish(None, now() + 2.0))
    g.spin(0.5, step=lambda: g.publish(None, now() + 2.0))
    d = g.diags[-1]
    assert d["level"] == 1 and "header.stamp(s) not usable" in d["message"], d
    assert re.search(r"s ahead of this node's clock; arrival time used", d["last_stamp_fallback"]), d

    # The inference worker killed: ERROR (not WARN) while it is down, naming it.
    os.kill(int(d["worker_pid"]), signal.SIGKILL)
    assert g.spin(5.0, lambda: g.diags[-1]["level"] == 2, step=lambda: g.publish(None, now())), g.diags[-1]
    assert "inference worker" in g.diags[-1]["message"] and g.diags[-1]["worker_state"] == "backoff"
