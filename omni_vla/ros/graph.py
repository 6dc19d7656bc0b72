"""The ROS graph in one place: which executables run, from which module, with which parameter file.

Both the ROS 2 launch files and the Python bringup read this table, so `ros2 launch` on a robot
and `omni-vla demo` here start the same nodes with the same parameters.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
