"""In simulation: sim_node (MuJoCo robot) plus the robot graph, each with its parameter file."""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from omni_vla.ros.graph import SIM_NODES


def generate_launch_description() -> LaunchDescription:
    config = LaunchConfiguration("config_dir")
    return LaunchDescription([
        DeclareLaunchArgument("config_dir", default_value=PathJoinSubstitution([FindPackageShare("omni_vla"), "config"]),
                              description="directory holding the nodes' parameter files"),
        *[
            Node(package="omni_vla", executable=spec.executable, name=spec.executable, output="screen",
                 parameters=[PathJoinSubstitution([config, spec.params_file])])
            for spec in SIM_NODES
        ],
    ])
