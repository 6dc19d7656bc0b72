"""vla_node runs imported LeRobot bundles (format 3: an ACT, a SmolVLA) by changing only bundle_dir: configured,
active, and proposing named joint targets over real DDS from a fake robot's cameras and joint states."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from lerobot_env import SMOLVLA_TASK, imported_act, imported_smolvla
from rosutil import REPO, run_against_node

JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
HOME = [0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04]
INSTRUCTION = "pick up the red cube"
SPEC = {"seed": 7, "cameras": ["front", "wrist"], "image_size": [64, 64], "state_dim": 8, "action_dim": 8, "env_dim": 4,
        "act": {"chunk_size": 16, "n_action_steps": 16, "dim_model": 64, "n_heads": 4, "dim_feedforward": 128,
                "n_encoder_layers": 1, "n_decoder_layers": 1, "use_vae": False}}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    table = {INSTRUCTION: [1.0, 0.0, 0.0, 0.0]}
    return imported_act(tmp_path_factory.mktemp("imported"), SPEC, table=table)


@pytest.mark.slow
def test_vla_node_runs_an_imported_act_bundle_by_changing_only_bundle_dir(imported: Path) -> None:
    params = {"bundle_dir": str(imported), "backend": "mnn", "autostart": "true"}
    code = run_against_node("omni_vla.ros.node", REPO / "config" / "vla_node.yaml", params,
                            lambda probe, ex: _scenario(probe, ex, INSTRUCTION, "lerobot_act@"))
    assert code == 0


@pytest.mark.slow
def test_vla_node_runs_an_imported_smolvla_bundle_by_changing_only_bundle_dir(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Its tokenizer runs in the node on the instruction topic's text; cameras and joints matched by name."""
    bundle = imported_smolvla(tmp_path_factory.mktemp("smolvla"))
    params = {"bundle_dir": str(bundle), "backend": "mnn", "autostart": "true"}
    code = run_against_node("omni_vla.ros.node", REPO / "config" / "vla_node.yaml", params,
                            lambda probe, ex: _scenario(probe, ex, SMOLVLA_TASK, "lerobot_smolvla@"))
    assert code == 0


def _scenario(probe, ex, instruction: str, policy: str) -> None:  # noqa: ANN001 - rclpy node and executor
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rosutil import spin_until
    from std_msgs.msg import String
    from trajectory_msgs.msg import JointTrajectory

    from omni_vla.tools.bench_graph import attach_fake_robot

    proposals: list[JointTrajectory] = []
    hardware: list[str] = []
    probe.create_subscription(JointTrajectory, "/omni_vla/proposed_command", proposals.append,
                              QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
    probe.create_subscription(DiagnosticArray, "/diagnostics",
                              lambda m: hardware.extend(s.hardware_id for s in m.status if s.name.startswith("vla_node")), 10)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    probe.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=instruction))
    attach_fake_robot(probe, list(HOME))
    t0 = time.monotonic()
    assert spin_until(ex, lambda: len(proposals) >= 10 and hardware, 60.0), (
        f"{len(proposals)} proposals, diagnostics {hardware[-1:]} after {time.monotonic() - t0:.1f} s")
    assert all(list(p.joint_names) == JOINTS and len(p.points) >= 1 for p in proposals)
    assert hardware[-1].startswith(policy) and hardware[-1].endswith("(mnn)")
