"""omni_vla: a fixed-rate VLA policy loop for robots, ROS-free at its core."""

__version__ = "0.1.0"

JOINT_NAMES: tuple[str, ...] = tuple(f"panda_joint{i}" for i in range(1, 8)) + ("panda_finger_joint1",)
