"""ROS level: the simulated arm is held to the limits its commands obey, through every fault, and recovers.

The real sim_node and safety_supervisor processes (config/ as shipped) run while this test proposes fast motion
(JointTrajectory, 20 Hz, as vla_node does) asking five joints and the gripper for 90% of their velocity limits
(the simulated arm reaches about 60%), then injects a fault mid-motion:
- the proposer goes silent (what the supervisor sees when vla_node's inference worker is killed or hangs);
- an e-stop;
- the simulator goes silent (SIGSTOP for 0.3 s: no joint states, no physics, then it resumes).
Every joint state the sim publishes is checked against config/joint_limits.yaml, read here with plain YAML: the
velocity the physics reports and the velocity from consecutive positions over their stamps (the physics clock).
Recovery is what an operator should expect: the arm follows again by itself once proposals or joint states
return; after an e-stop only after the operator releases it, resets it and re-syncs the command (docs/robot.md).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip("rclpy")
from builtin_interfaces.msg import Duration  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from rosutil import free_domain_id, ros_context, spin_until  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LIMITS = yaml.safe_load((REPO / "config" / "joint_limits.yaml").read_text())["joint_limits"]
NAMES = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
VMAX = np.array([LIMITS[n]["max_velocity"] for n in NAMES])
# Two poses far apart on joints 1, 4, 5, 6, 7 and the gripper: the proposals swing between them.
POSE_A = np.array([-0.9, -0.3, 0.0, -2.4, -1.2, 1.2, -1.5, 0.005])
POSE_B = np.array([0.9, -0.3, 0.0, -1.2, 1.2, 2.6, 1.5, 0.039])
STEP = 0.9 * VMAX * 0.05  # each 20 Hz proposal asks for 90% of the velocity limit over its period
MEASURE_TOL = 1.02  # the physics' velocity may exceed a command's by rounding and integration, not more


class Operator:
    """Proposes, records joint states and the supervisor's status, injects faults, operates the e-stop."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.states: list[tuple[float, np.ndarray, np.ndarray]] = []  # (stamp, position, velocity)
        self.status: dict[str, Any] = {}
        self.proposing = True
        self.goal = POSE_B
        self.target: np.ndarray | None = None  # the last proposal; None: start from the measured pose
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(JointState, "/joint_states", self._on_state, qos_profile_sensor_data)
        node.create_subscription(String, "/omni_vla/safety_status",
                                 lambda m: self.status.update(json.loads(m.data)), reliable)
        self.levels: list[tuple[float, int]] = []  # (arrival, level) of the supervisor's diagnostics
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, reliable)
        self.proposals = node.create_publisher(JointTrajectory, "/omni_vla/proposed_command", reliable)
        self.estop = node.create_publisher(Bool, "/omni_vla/estop", reliable)
        self.reset = node.create_client(Trigger, "/omni_vla/reset_estop")
        self.resync = node.create_client(Trigger, "/omni_vla/resync_command")
        node.create_timer(0.05, self._propose)

    def _on_state(self, msg: JointState) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.states.append((stamp, np.array(msg.position), np.array(msg.velocity)))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name == "safety_supervisor":
                self.levels.append((time.monotonic(), st.level))

    def _propose(self) -> None:
        if not self.proposing or not self.states:
            return
        q = self.states[-1][1] if self.target is None else self.target
        if np.all(np.abs(self.goal - q)[[0, 3, 4, 5, 6]] < 1e-9):
            self.goal = POSE_A if self.goal is POSE_B else POSE_B
        target = self.target = q + np.clip(self.goal - q, -STEP, STEP)
        point = JointTrajectoryPoint(positions=target.tolist(), time_from_start=Duration(nanosec=50_000_000))
        self.proposals.publish(JointTrajectory(joint_names=NAMES, points=[point]))

    def call(self, client: Any, ex: Any) -> Trigger.Response:
        assert client.wait_for_service(timeout_sec=10.0), f"{client.srv_name} not served"
        future = client.call_async(Trigger.Request())
        assert spin_until(ex, future.done, 5.0), f"{client.srv_name} did not answer"
        return future.result()

    def resume(self) -> None:
        """Propose again, from the measured pose (as vla_node's next chunk starts from the observation)."""
        self.target, self.proposing = None, True

    def fast(self) -> bool:
        """The arm moves at >= 40% of some joint's velocity limit: a fault now hits it mid-motion."""
        return bool(self.states) and float(np.max(np.abs(self.states[-1][2][:7]) / VMAX[:7])) >= 0.4

    def diagnostics_ok(self, ex: Any) -> None:
        """The supervisor's next diagnostics (1 s period, config/safety_supervisor.yaml) say OK again."""
        since = time.monotonic()
        assert spin_until(ex, lambda: any(t > since for t, _ in self.levels), 2.5), "no diagnostics"
        assert [lv for t, lv in self.levels if t > since][0] == DiagnosticStatus.OK, self.levels[-3:]

    def following(self) -> bool:
        return self.status.get("state") == "active" and not self.status.get("stopped", True)


def measured_excess(states: list[tuple[float, np.ndarray, np.ndarray]]) -> list[str]:
    """Every joint state whose velocity (reported, or from consecutive positions) is beyond the limit."""
    bad = []
    for (t0, q0, _), (t1, q1, v1) in zip(states, states[1:]):
        dq = np.abs(q1 - q0) / (t1 - t0) if t1 > t0 else np.zeros_like(q1)
        for name, v, d, lim in zip(NAMES, np.abs(v1), dq, VMAX):
            if v > lim * MEASURE_TOL or d > lim * MEASURE_TOL:
                bad.append(f"{name} at t={t1:.3f}: reported {v:.3f}, from positions {d:.3f} > {lim}")
    return bad


def peak_fraction(states: list[tuple[float, np.ndarray, np.ndarray]]) -> np.ndarray:
    return np.max(np.abs(np.array([v for _, _, v in states])), axis=0) / VMAX


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from omni_vla.ros.graph import NodeSpec
    from omni_vla.tools.bringup import Bringup

    log_dir = tmp_path_factory.mktemp("faults")
    specs = (NodeSpec("sim_node", "omni_vla_sim.node", "sim_node.yaml"),
             NodeSpec("safety_supervisor", "omni_vla_safety.node", "safety_supervisor.yaml"))
    domain = free_domain_id()
    with Bringup(specs=specs, domain_id=domain, overrides={"sim_node": {"image_size": 16}}, log_dir=log_dir) as g:
        with ros_context(domain) as (node, ex):
            op = Operator(node)
            assert spin_until(ex, op.following, 60), (op.status, g.dead())
            yield g, op, ex


def _fault_window(op: Operator, ex: Any) -> int:
    """Wait for fast motion; returns where the fault's record starts."""
    op.resume()
    assert spin_until(ex, op.following, 5), op.status
    assert spin_until(ex, op.fast, 20), f"the arm never reached 40% of a velocity limit: {peak_fraction(op.states)}"
    return len(op.states)


def _check(op: Operator, start: int, fault: str) -> None:
    window = op.states[start - 50:]
    excess = measured_excess(window)
    print(f"{fault}: peak velocity / limit {np.round(peak_fraction(window), 3).tolist()}")  # pytest -s shows it
    assert not excess, f"{fault}: {len(excess)} joint states beyond the velocity limits: {excess[:5]}"


def test_proposals_stopping_mid_motion_stop_the_arm_within_its_limits_and_it_follows_again_when_they_return(
        graph: Any) -> None:
    g, op, ex = graph
    start = _fault_window(op, ex)
    op.proposing = False
    assert spin_until(ex, lambda: op.status.get("state") == "watchdog_stop" and op.status.get("stopped"), 3), op.status
    spin_until(ex, lambda: False, 1.0)
    # The servo settles on its slow pole (kp/kv = 10/s, sim/robot.py): 1 s after the stop the arm is all but still.
    assert peak_fraction(op.states[-20:])[:7].max() < 0.05, "the arm still moves 1 s after the watchdog stop"
    op.resume()
    assert spin_until(ex, op.following, 3), f"no automatic recovery when proposals return: {op.status}"
    op.diagnostics_ok(ex)
    assert spin_until(ex, op.fast, 20)
    _check(op, start, "proposer silent")
    assert g.dead() == []


def test_an_estop_mid_motion_stops_the_arm_within_its_limits_and_only_the_operator_resumes_it(graph: Any) -> None:
    g, op, ex = graph
    start = _fault_window(op, ex)
    op.estop.publish(Bool(data=True))
    op.proposing = False
    assert spin_until(ex, lambda: op.status.get("state") == "estop" and op.status.get("stopped"), 3), op.status
    spin_until(ex, lambda: False, 1.0)
    assert op.status.get("state") == "estop", "an e-stop ended without the operator"
    assert op.levels[-1][1] == DiagnosticStatus.ERROR, "a latched e-stop is not an error in /diagnostics"
    op.estop.publish(Bool(data=False))
    spin_until(ex, lambda: False, 0.3)
    assert op.status.get("state") == "estop", "releasing the button alone resumed the arm"
    assert op.call(op.reset, ex).success
    op.call(op.resync, ex)  # the command is already where the stop ended it, so it may answer "nothing to do"
    op.resume()
    assert spin_until(ex, op.following, 3), f"no recovery after the operator's reset: {op.status}"
    op.diagnostics_ok(ex)
    assert spin_until(ex, op.fast, 20)
    _check(op, start, "e-stop")
    assert g.dead() == []


def test_a_simulator_silent_mid_motion_leaves_the_arm_within_its_limits_and_it_follows_again_when_it_returns(
        graph: Any) -> None:
    g, op, ex = graph
    start = _fault_window(op, ex)
    sim = g.procs["sim_node"].pid
    os.kill(sim, signal.SIGSTOP)
    try:
        assert spin_until(ex, lambda: op.status.get("state") == "watchdog_stop", 3), op.status
        op.proposing = False  # vla_node holds while its joint states are stale
        time.sleep(0.3)
    finally:
        os.kill(sim, signal.SIGCONT)
    assert spin_until(ex, lambda: len(op.states) > start + 20, 5), "no joint states after the simulator resumed"
    op.resume()
    assert spin_until(ex, op.following, 5), f"no automatic recovery when joint states return: {op.status}"
    op.diagnostics_ok(ex)
    assert spin_until(ex, op.fast, 20)
    _check(op, start, "simulator silent")
    assert g.dead() == []


class PolicyWatch:
    """The whole sim graph with the shipped reference policy: joint states and vla_node's diagnostics recorded."""

    def __init__(self, node: Any) -> None:
        from rclpy.qos import DurabilityPolicy

        self.states: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.vla: dict[str, str] = {}
        self.sim: dict[str, Any] = {}
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(JointState, "/joint_states", self._on_state, qos_profile_sensor_data)
        node.create_subscription(String, "/sim/status", lambda m: self.sim.update(json.loads(m.data)), reliable)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, reliable)
        self.instruction = node.create_publisher(String, "/omni_vla/instruction", latched)

    _on_state = Operator._on_state

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name.startswith("vla_node"):
                self.vla = {kv.key: kv.value for kv in st.values} | {"level": str(st.level)}

    def moving(self) -> bool:
        return bool(self.states) and float(np.max(np.abs(self.states[-1][2][:7]) / VMAX[:7])) >= 0.05


@pytest.fixture()
def policy_graph(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A fresh graph per fault: the episode is young, so the arm is still working when the fault comes."""
    from omni_vla.ros.graph import SIM_NODES
    from omni_vla.tools.bringup import Bringup

    log_dir = tmp_path_factory.mktemp("policy_faults")
    domain = free_domain_id()
    with Bringup(specs=SIM_NODES, domain_id=domain, overrides={"vla_node": {"diagnostics_period_s": 0.2}},
                 log_dir=log_dir) as g:
        with ros_context(domain) as (node, ex):
            watch = PolicyWatch(node)
            assert spin_until(ex, lambda: "instruction" in watch.sim, 60), g.dead()
            watch.instruction.publish(String(data=watch.sim["instruction"]))
            yield g, watch, ex


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["worker_killed", "worker_hung"])
def test_the_policys_inference_worker_failing_mid_motion_leaves_the_arm_within_its_limits_and_is_restarted(
        policy_graph: Any, fault: signal.Signals) -> None:
    g, watch, ex = policy_graph
    assert spin_until(ex, lambda: watch.vla.get("level") == str(DiagnosticStatus.OK) and watch.moving(), 60), \
        (watch.vla, peak_fraction(watch.states) if watch.states else None)
    pid, restarts, start = int(watch.vla["worker_pid"]), int(watch.vla["worker_restarts"]), len(watch.states)
    os.kill(pid, fault)
    try:
        assert spin_until(ex, lambda: watch.vla.get("level") == str(DiagnosticStatus.ERROR), 10), watch.vla
        assert spin_until(ex, lambda: int(watch.vla["worker_restarts"]) > restarts
                          and watch.vla.get("level") == str(DiagnosticStatus.OK), 60), watch.vla
    finally:
        if fault == signal.SIGSTOP:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # the node has given up on it; do not leave it stopped
    assert int(watch.vla["worker_pid"]) != pid
    chunks = int(watch.vla["chunks"])
    assert spin_until(ex, lambda: int(watch.vla["chunks"]) > chunks, 10), "no chunk from the restarted worker"
    excess = measured_excess(watch.states[start - 50:])
    print(f"{fault.name}: peak velocity / limit {np.round(peak_fraction(watch.states[start - 50:]), 3).tolist()}")
    assert not excess, f"{fault.name}: {len(excess)} joint states beyond the velocity limits: {excess[:5]}"
    assert g.dead() == []
