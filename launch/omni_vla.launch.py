"""On the robot: vla_node (lifecycle node) and safety_supervisor, each with its parameter file.

The robot's own driver must provide the cameras, /joint_states and a forward position controller.

    ros2 launch omni_vla omni_vla.launch.py [bundle_dir:=DIR] [backend:=mnn|executorch] [rate_hz:=HZ]
        [config_dir:=DIR] [namespace:=NS] [use_sim_time:=true|false] [joint_limits_file:=FILE]
        [joint_limits_overlay:=FILE]

The nodes come from omni_vla/ros/graph.py (ROBOT_NODES), the table `omni-vla demo` starts too.
sim.launch.py includes this file and adds sim_node.
"""
import hashlib
import os
import tempfile

import yaml
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from omni_vla.ros.graph import COMMAND_TIMEOUT_PERIODS, JOINT_LIMITS_FILE, JOINT_LIMITS_NODES, ROBOT_NODES, rate_overrides

# Fast DDS (Jazzy's default RMW) announces a new participant 5 times in its first 0.5 s, then every 3 s.
# Measured on the 2-core development machine, vla_node started next to a node that had just started:
# in about half of the starts the two found each other only at the 3 s announcement (first proposal at
# 3.7 s instead of about 1 s). With this profile on vla_node, 6 of 6 starts came up in 0.9-1.6 s. In the
# whole launch, half still waited while the other side (the test's probe, on a robot its drivers) ran
# without it; with the profile on every participant 6 of 6 launches gave their first safe command in
# 1.7-2.7 s. Given to these nodes only, and only when the user has no Fast DDS profile of their own.
FASTDDS_PROFILE = """<?xml version="1.0" encoding="UTF-8" ?>
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <participant profile_name="omni_vla_quick_discovery" is_default_profile="true">
    <rtps><builtin><discovery_config>
      <initialAnnouncements><count>30</count><period><sec>0</sec><nanosec>100000000</nanosec></period></initialAnnouncements>
    </discovery_config></builtin></rtps>
  </participant>
</profiles>
"""
# vla_node is a lifecycle node that configures and activates itself (autostart), so it is started as a plain Node
# action: launch_ros's LifecycleNode action starts a ROS node inside the launch process, whose shutdown joins a thread
# spinning with a 1 s timeout and blocked launch's event loop for up to 1 s at every stop
# (docs/decisions/0012-stop-within-2-s.md). Its lifecycle services are the same either way.
# Launch argument -> the nodes whose parameter of the same name it sets; empty: the parameter file's value.
OVERRIDES = {
    "bundle_dir": ("vla_node",),
    "backend": ("vla_node",),
    "joint_limits_file": JOINT_LIMITS_NODES,
    "joint_limits_overlay": ("safety_supervisor", "vla_node"),
}
ARGUMENTS = (
    ("config_dir", PathJoinSubstitution([FindPackageShare("omni_vla"), "config"]),
     "directory holding the nodes' parameter files (<executable>.yaml)"),
    ("bundle_dir", "",
     "policy bundle directory: absolute, or relative to the working directory, else to share/omni_vla "
     "(the shipped one is bundles/reference); empty: the node's parameter file, else its default"),
    ("backend", "", "runtime of vla_node: mnn or executorch (checked at configure); empty: the node's parameter "
     "file, else its default"),
    ("rate_hz", "", f"vla_node's control rate (Hz; 0: the bundle's); the supervisor's command_timeout_s is raised "
     f"to {COMMAND_TIMEOUT_PERIODS:g} of its periods where its file asks for less; empty: the parameter files' values"),
    ("joint_limits_file", PathJoinSubstitution([LaunchConfiguration("config_dir"), JOINT_LIMITS_FILE]),
     "the robot's joint limits (ros2_control joint_limits format) for safety_supervisor (and sim_node); vla_node "
     "refuses at configure a bundle with a joint that has no limits there"),
    ("joint_limits_overlay", "",
     "joint_limits YAML over joint_limits_file (velocity/acceleration limits a URDF or MJCF lacks) for "
     "safety_supervisor and vla_node; empty: their parameter files' value"),
    ("namespace", "", "namespace of the nodes (topic names in the parameter files are absolute: remap there)"),
    ("use_sim_time", "false", "nodes take time from /clock: true or false"),
)


def declare_arguments():
    return [DeclareLaunchArgument(name, default_value=default, description=desc)
            for name, default, desc in ARGUMENTS]


def _params_file(config_dir, executable, namespaced):
    """The node's parameter file. In a namespace, a copy with its `<executable>:` section keyed
    `/**/<executable>`: rcl matches `vla_node:` only against /vla_node, and the node would run on defaults."""
    path = os.path.join(config_dir, f"{executable}.yaml")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config_dir {config_dir}: no parameter file {executable}.yaml")
    if not namespaced:
        return path
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if executable not in data:
        return path
    data[f"/**/{executable}"] = data.pop(executable)
    return _kept_file(f"{executable}_", ".yaml", yaml.safe_dump(data))


class _Quoted(str):
    """A parameter value written single-quoted: rcl types an unquoted scalar itself (a directory named 1e3 or inf
    would be read as a double), and the nodes' path and name parameters are strings."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Quoted, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", str(text),
                                                                              style="'"))


def _overrides_file(executable, params):
    """The launch arguments' values for one node as a kept parameter file: given as a dict, launch_ros would
    write a new temporary file at every launch and never remove it."""
    values = {k: _Quoted(v) if isinstance(v, str) else v for k, v in params.items()}
    return _kept_file(f"{executable}_args_", ".yaml",
                      yaml.dump({f"/**/{executable}": {"ros__parameters": values}}, Dumper=_Dumper))


def _kept_file(prefix, suffix, text):
    """A file holding `text` under ROS_HOME/omni_vla (else the temp directory), named by its hash: every launch
    with the same content uses the same file, so a robot relaunched all day does not fill its disk with copies."""
    folder = os.path.join(os.environ.get("ROS_HOME") or os.path.expanduser("~/.ros"), "omni_vla")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        folder = tempfile.gettempdir()
    path = os.path.join(folder, f"{prefix}{hashlib.sha256(text.encode()).hexdigest()[:16]}{suffix}")
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def dds_environment() -> dict:
    """FASTRTPS_DEFAULT_PROFILES_FILE for the nodes (FASTDDS_PROFILE), unless the user chose a profile or
    another RMW (the variable means nothing to those)."""
    if os.environ.get("FASTRTPS_DEFAULT_PROFILES_FILE") or os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE"):
        return {}
    if not os.environ.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp").startswith("rmw_fastrtps"):
        return {}
    return {"FASTRTPS_DEFAULT_PROFILES_FILE": _kept_file("fastdds_", ".xml", FASTDDS_PROFILE)}


def node_actions(context, specs):
    """One launch_ros action per graph table entry, with its parameter file and the launch arguments."""
    arg = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    sim_time = arg["use_sim_time"].strip().lower()
    if sim_time not in ("true", "false"):
        raise ValueError(f"use_sim_time:={arg['use_sim_time']!r}: expected true or false")
    namespace = arg["namespace"]
    namespaced = bool(namespace.strip("/") or (context.launch_configurations.get("ros_namespace") or "").strip("/"))
    rated = rate_overrides(arg["rate_hz"], _params_file(arg["config_dir"], "safety_supervisor", False))
    actions = []
    env = dds_environment()
    for spec in specs:
        params = {"use_sim_time": sim_time == "true"}
        params.update({name: str(arg[name]) for name, nodes in OVERRIDES.items()
                       if spec.executable in nodes and arg[name]})
        params.update(rated.get(spec.executable, {}))
        actions.append(Node(package="omni_vla", executable=spec.executable, name=spec.executable,
                            namespace=namespace, output="screen", additional_env=env,
                            parameters=[_params_file(arg["config_dir"], spec.executable, namespaced),
                                        _overrides_file(spec.executable, params)]))
    return actions


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([*declare_arguments(), OpaqueFunction(function=node_actions, args=[ROBOT_NODES])])
