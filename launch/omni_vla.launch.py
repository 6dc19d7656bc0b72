"""On the robot: vla_node and safety_supervisor, each with its parameter file.

The robot's own driver must provide the cameras, /joint_states and a forward position controller.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from omni_vla.ros.graph import ROBOT_NODES


def node_actions(specs):
    config = LaunchConfiguration("config_dir")
    return [
        Node(package="omni_vla", executable=spec.executable, name=spec.executable, output="screen",
             parameters=[PathJoinSubstitution([config, spec.params_file])])
        for spec in specs
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("config_dir", default_value=PathJoinSubstitution([FindPackageShare("omni_vla"), "config"]),
                              description="directory holding the nodes' parameter files"),
        *node_actions(ROBOT_NODES),
    ])
