"""sim_node: the MuJoCo robot exposed like a ros2_control robot with a forward position controller.

Publishes camera images and /joint_states, applies Float64MultiArray position commands, and steps
physics in real time at the control rate. Episodes are reset over a JSON topic so a demo or an
evaluation can drive many episodes through one long-lived process.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import rclpy
from pydantic import BaseModel, ConfigDict, Field
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String

from omni_vla.ros.interrupt import ros_main
from omni_vla_sim import robot
from omni_vla_sim.env import EnvConfig, PandaTaskEnv


class SimNodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = "pick_red"
    seed: int = Field(1_000_000, ge=0, lt=2**32)
    image_size: int = Field(128, ge=16, le=1024)
    control_hz: float = Field(20.0, gt=0, le=500)
    camera_hz: float = Field(20.0, gt=0, le=500)
    joint_limits_file: str = ""
    front_image_topic: str = "/camera/front/image_raw"
    wrist_image_topic: str = "/camera/wrist/image_raw"
    joint_states_topic: str = "/joint_states"
    command_topic: str = "/forward_position_controller/commands"
    episode_topic: str = "/sim/episode"
    status_topic: str = "/sim/status"


class SimNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("sim_node", **kwargs)
        defaults = SimNodeConfig()
        for name, value in defaults.model_dump().items():
            self.declare_parameter(name, value)
        self.cfg = SimNodeConfig(**{n: self.get_parameter(n).value for n in SimNodeConfig.model_fields})
        limits_file = Path(self.cfg.joint_limits_file) if self.cfg.joint_limits_file else None
        self.env = PandaTaskEnv(self.cfg.task, EnvConfig(
            image_size=self.cfg.image_size, control_hz=self.cfg.control_hz, limits_file=limits_file))
        self.obs = self.env.reset(self.cfg.seed)
        self.target = self.obs["qpos"].copy()
        self.done = False
        self.success = False
        self.frozen = False
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_front = self.create_publisher(Image, self.cfg.front_image_topic, qos_profile_sensor_data)
        self.pub_wrist = self.create_publisher(Image, self.cfg.wrist_image_topic, qos_profile_sensor_data)
        self.pub_joints = self.create_publisher(JointState, self.cfg.joint_states_topic, qos_profile_sensor_data)
        self.pub_status = self.create_publisher(String, self.cfg.status_topic, reliable)
        self.create_subscription(Float64MultiArray, self.cfg.command_topic, self._on_command, reliable)
        self.create_subscription(String, self.cfg.episode_topic, self._on_episode, reliable)
        self._camera_every = max(1, round(self.cfg.control_hz / self.cfg.camera_hz))
        self.create_timer(1.0 / self.cfg.control_hz, self._tick)
        self.get_logger().info(f"sim_node: task {self.cfg.task}, {self.cfg.control_hz} Hz")

    def _on_command(self, msg: Float64MultiArray) -> None:
        if self.frozen:
            return
        data = np.asarray(msg.data, dtype=np.float64)
        if data.shape != (len(robot.JOINT_NAMES),) or not np.all(np.isfinite(data)):
            self.get_logger().error(f"command refused: expected {len(robot.JOINT_NAMES)} finite values, "
                                    f"got {data.tolist()}; holding the last target")
            return
        self.target[:] = data

    def _on_episode(self, msg: String) -> None:
        """{"task", "seed", "instruction", "frozen"} resets; {"start": true} unfreezes.

        A frozen sim ignores commands and holds the reset pose, so an operator can re-sync the
        supervisor (e-stop, reset) before the robot follows commands again.
        """
        try:
            req = json.loads(msg.data)
            if req.get("start"):
                self.frozen = False
                self.get_logger().info("episode started")
                return
            self.obs = self.env.reset(int(req["seed"]), req.get("instruction"), task=req.get("task"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.get_logger().error(f"episode request refused: {exc}")
            return
        self.target = self.obs["qpos"].copy()
        self.frozen = bool(req.get("frozen", False))
        self.done = self.success = False
        self.get_logger().info(f"episode reset: task {self.env.task.name} seed {self.env.seed}")
        self._publish()

    def _tick(self) -> None:
        if not self.done and not self.frozen:
            self.obs, _, ok, truncated, _ = self.env.step(self.target)
            self.success, self.done = ok, ok or truncated
        self._publish()

    def _publish(self) -> None:
        stamp = self.get_clock().now().to_msg()
        js = JointState(name=list(robot.JOINT_NAMES), position=self.obs["qpos"].tolist(),
                        velocity=self.obs["qvel"].tolist())
        js.header.stamp = stamp
        self.pub_joints.publish(js)
        if self.env.steps % self._camera_every == 0:
            for pub, cam in ((self.pub_front, "front"), (self.pub_wrist, "wrist")):
                img = self.obs[cam]
                msg = Image(height=img.shape[0], width=img.shape[1], encoding="rgb8", is_bigendian=0,
                            step=img.shape[1] * 3, data=img.tobytes())
                msg.header.stamp = stamp
                msg.header.frame_id = f"{cam}_camera"
                pub.publish(msg)
        status = {"task": self.env.task.name, "seed": self.env.seed, "instruction": self.env.instruction.text,
                  "step": self.env.steps, "success": self.success, "done": self.done, "frozen": self.frozen}
        self.pub_status.publish(String(data=json.dumps(status)))


def main(argv: list[str] | None = None) -> int:
    cleanup: list[Callable[[], object]] = []
    with ros_main(argv, cleanup):
        node = SimNode()
        cleanup += [node.env.close, node.destroy_node]
        rclpy.spin(node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
