"""vla_node with cloud re-planning over real DDS and a real OpenPI server on loopback.

Only explicit requests (topic, service) and counted supervisor interventions may ask the cloud here
(stall and instruction triggers are off), so every request the server sees has a known cause; the
served plan is a distinctive constant pose, so its rows are recognisable among the commands.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from omni_vla_sim.openpi_server import PolicyServer
from rosutil import REPO, run_against_node
from tiny_bundles import tiny_bundle
from vla_node_io import INSTRUCTION, JOINTS, image_msg

PLAN = np.array([0.2, -0.5, 0.1, -2.0, 0.05, 1.7, 0.6, 0.03])


class PosePolicy:
    """Always the same pose, 32 rows (longer than the local chunk: it runs whole); counts requests."""

    metadata = {"action_horizon": 32, "action_dim": 8}

    def __init__(self) -> None:
        self.requests = 0
        self.lock = threading.Lock()

    def reset(self) -> None:
        pass

    def infer(self, obs: dict) -> dict:
        with self.lock:
            self.requests += 1
        return {"actions": np.tile(PLAN, (32, 1))}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bundle(tmp_path_factory)


def _openpi_yaml(path: Path, uri: str) -> Path:
    cfg = yaml.safe_load((REPO / "config" / "openpi.yaml").read_text())
    cfg["openpi"].update(enabled=True, max_plan_age_s=2.0)
    cfg["openpi"]["client"]["uri"] = uri
    cfg["openpi"]["triggers"].update(stall_window_s=0.0, on_instruction_change=False, intervention_count=2,
                                     intervention_window_s=5.0, min_interval_s=0.0, cadence_s=0.0)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_explicit_requests_and_counted_interventions_bring_cloud_plans_through_the_node(bundle: Path,
                                                                                      tmp_path: Path) -> None:
    policy = PosePolicy()
    with PolicyServer(policy).thread() as st:
        params = {"bundle_dir": str(bundle), "backend": "mnn", "autostart": "true", "rate_hz": 20.0,
                  "max_obs_age_s": 2.0, "openpi_config": str(_openpi_yaml(tmp_path / "openpi.yaml", st.uri))}
        run_against_node("omni_vla.ros.node", REPO / "config" / "vla_node.yaml", params,
                         lambda probe, ex: _scenario(probe, ex, policy))


def _scenario(probe, ex, policy: PosePolicy) -> None:
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String
    from std_srvs.srv import Trigger
    from trajectory_msgs.msg import JointTrajectory

    rng = np.random.default_rng(0)
    commands: list[np.ndarray] = []
    diags: list[dict[str, str]] = []
    reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    probe.create_subscription(JointTrajectory, "/omni_vla/proposed_command",
                              lambda m: commands.append(np.array(m.points[0].positions)), reliable)
    probe.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diags.extend(
        {kv.key: kv.value for kv in s.values} for s in m.status if s.name.startswith("vla_node")), 10)
    front = probe.create_publisher(Image, "/camera/front/image_raw", qos_profile_sensor_data)
    wrist = probe.create_publisher(Image, "/camera/wrist/image_raw", qos_profile_sensor_data)
    joints = probe.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    replan = probe.create_publisher(String, "/omni_vla/replan", reliable)
    supervisor_diag = probe.create_publisher(DiagnosticArray, "/diagnostics", 10)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    probe.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=INSTRUCTION))
    home = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04]

    def feed(seconds: float, until=lambda: False) -> None:
        end = time.monotonic() + seconds
        next_pub = 0.0
        while time.monotonic() < end and not until():
            if time.monotonic() >= next_pub:
                front.publish(image_msg(rng))
                wrist.publish(image_msg(rng))
                joints.publish(JointState(name=JOINTS, position=home))
                next_pub = time.monotonic() + 0.02
            ex.spin_once(timeout_sec=0.005)

    def supervisor(**counts: int) -> None:
        st = DiagnosticStatus(name="safety_supervisor", values=[
            KeyValue(key=f"interventions/{k}", value=str(v)) for k, v in counts.items()])
        supervisor_diag.publish(DiagnosticArray(status=[st]))

    def plan_rows() -> int:
        return sum(bool(np.allclose(c, PLAN, atol=1e-9)) for c in commands)

    feed(60.0, until=lambda: len(commands) >= 20)
    assert len(commands) >= 20, "the local policy commands before any cloud plan"
    feed(1.0)
    assert policy.requests == 0 and plan_rows() == 0, "nothing asks the cloud without a trigger"

    # Routine acceleration shaping does not count toward the intervention trigger.
    for k in range(1, 6):
        supervisor(acceleration=50 * k, position=0)
        feed(0.2)
    assert policy.requests == 0, "acceleration shaping asked the cloud"

    # An explicit request on the topic: the plan arrives and its rows are commanded.
    replan.publish(String(data="operator"))
    feed(5.0, until=lambda: plan_rows() >= 16)
    assert policy.requests == 1 and plan_rows() >= 16, (policy.requests, plan_rows())

    # The service does the same.
    client = probe.create_client(Trigger, "/omni_vla/request_plan")
    assert client.wait_for_service(timeout_sec=10.0)
    future = client.call_async(Trigger.Request())
    feed(5.0, until=future.done)
    assert future.done() and future.result().success
    feed(5.0, until=lambda: policy.requests >= 2)
    assert policy.requests == 2

    # Position clamps counted by the supervisor (two within the window) trigger a plan.
    supervisor(acceleration=400, position=1)
    feed(0.3)
    supervisor(acceleration=450, position=3)
    feed(5.0, until=lambda: policy.requests >= 3)
    assert policy.requests == 3

    feed(3.0, until=lambda: bool(diags) and int(diags[-1].get("cloud_plans", 0)) >= 3)
    d = diags[-1]
    assert int(d["cloud_plans"]) >= 3 and d["cloud_connected"] == "True"
    assert int(d["cloud_explicit_requests"]) == 2 and int(d["cloud_rejected"]) == 0
    assert float(d["loop_rate_hz"]) > 15, "the loop kept its rate through the re-plans"
