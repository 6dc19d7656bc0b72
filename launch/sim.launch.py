"""In simulation: sim_node (MuJoCo robot) plus the robot graph of omni_vla.launch.py, with the same
launch arguments (bundle_dir, backend, config_dir, namespace, use_sim_time, joint_limits_file; the
joint limits go to sim_node too: one file for the simulated robot and its supervisor).

    ros2 launch omni_vla sim.launch.py [bundle_dir:=DIR] [backend:=mnn|executorch] ...

The nodes come from omni_vla/ros/graph.py: SIM_NODES = sim_node + ROBOT_NODES.
"""
import os

from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource, load_python_launch_file_as_module
from launch_ros.actions import Node  # noqa: F401 - sim_node is a launch_ros Node, built by node_actions

from omni_vla.ros.graph import ROBOT_NODES, SIM_NODES

ROBOT_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "omni_vla.launch.py")


def generate_launch_description() -> LaunchDescription:
    robot = load_python_launch_file_as_module(ROBOT_LAUNCH)
    return LaunchDescription([
        # Declares the launch arguments (an include is unscoped: they hold here too), starts ROBOT_NODES.
        IncludeLaunchDescription(PythonLaunchDescriptionSource(ROBOT_LAUNCH)),
        OpaqueFunction(function=robot.node_actions, args=[[s for s in SIM_NODES if s not in ROBOT_NODES]]),
    ])
