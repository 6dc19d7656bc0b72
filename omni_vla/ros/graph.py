"""The ROS graph in one place: which executables run, from which module, with which parameter file.

Both the ROS 2 launch files and the Python bringup read this table, so `ros2 launch` on a robot
and `omni-vla demo` here start the same nodes with the same parameters.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from omni_vla_safety.config import MAX_TIMEOUT_S, SupervisorConfig


@dataclass(frozen=True)
class NodeSpec:
    executable: str  # console script installed in lib/omni_vla
    module: str  # python -m entry for the bringup
    params_file: str  # under config/


ROBOT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec("safety_supervisor", "omni_vla_safety.node", "safety_supervisor.yaml"),
    NodeSpec("vla_node", "omni_vla.ros.node", "vla_node.yaml"),
)
SIM_NODES: tuple[NodeSpec, ...] = (NodeSpec("sim_node", "omni_vla_sim.node", "sim_node.yaml"),) + ROBOT_NODES
# The nodes given the robot's joint limits file (launch argument joint_limits_file, config/joint_limits.yaml by
# default): the supervisor enforces it, sim_node builds the robot from it, vla_node checks the bundle's joints
# against it and shapes its commands to it.
JOINT_LIMITS_NODES: tuple[str, ...] = ("safety_supervisor", "sim_node", "vla_node")
JOINT_LIMITS_FILE = "joint_limits.yaml"  # under config/


def config_dir() -> Path:
    """config/ of the source tree, or share/omni_vla/config of an installed package."""
    source = Path(__file__).resolve().parents[2] / "config"  # omni_vla/ros/graph.py -> the checkout
    if source.is_dir():
        return source
    try:
        from ament_index_python.packages import get_package_share_directory  # optional: only in a sourced ROS install

        return Path(get_package_share_directory("omni_vla")) / "config"
    except Exception as exc:  # noqa: BLE001 - any failure means we cannot locate the files
        raise FileNotFoundError(f"cannot find omni_vla's config directory ({exc})") from exc


COMMAND_TIMEOUT_PERIODS = 4.0
"""A launch's `rate_hz` raises the supervisor's command_timeout_s to this many of the policy's periods (never lowers
it): vla_node proposes once a tick, so a timeout under a period would stop the arm between every two proposals."""


def rate_overrides(rate_text: str, supervisor_params_file: Path) -> dict[str, dict[str, float]]:
    """The parameters a launch's `rate_hz` sets: vla_node's rate, and the supervisor's command timeout raised to
    COMMAND_TIMEOUT_PERIODS of its period when the supervisor's file asks for less. Empty or 0: nothing (vla_node
    then runs at the bundle's rate, and the timeout is the file's). ValueError, one line, on a bad value."""
    text = rate_text.strip()
    if not text:
        return {}
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    lowest = COMMAND_TIMEOUT_PERIODS / MAX_TIMEOUT_S
    if not (rate == 0.0 or lowest <= rate <= 1000.0):
        raise ValueError(f"rate_hz:={rate_text!r}: expected 0 (the bundle's rate) or {lowest:g} to 1000 Hz "
                         f"(the supervisor's command_timeout_s, {COMMAND_TIMEOUT_PERIODS:g} periods, is at most "
                         f"{MAX_TIMEOUT_S:g} s)")
    if rate == 0.0:
        return {"vla_node": {"rate_hz": 0.0}}
    with open(supervisor_params_file) as f:
        params = ((yaml.safe_load(f) or {}).get("safety_supervisor") or {}).get("ros__parameters") or {}
    current = float(params.get("command_timeout_s", SupervisorConfig.model_fields["command_timeout_s"].default))
    needed = COMMAND_TIMEOUT_PERIODS / rate
    out: dict[str, dict[str, float]] = {"vla_node": {"rate_hz": rate}}
    if needed > current:
        out["safety_supervisor"] = {"command_timeout_s": round(needed, 6)}
    return out
