"""sim_node: the MuJoCo robot exposed like a ros2_control robot with a forward position controller.

Behaves as a robot's hardware interface does: joint states at joint_state_hz (100 Hz by default,
as the supervisor's 0.1 s joint-state watchdog needs) with the velocities the physics has (zero
while the sim is frozen or the episode is over), each command applied as it arrives (physics is
stepped at joint_state_hz, in real time), cameras at camera_hz. Stamps are the physics clock:
the node's start time plus the simulated time, so they read as the wall clock (vla_node checks
observation age from them); with use_sim_time they are the simulated time itself and the node
publishes /clock from it. Episodes keep their 20 Hz step count (control_hz, the dataset's rate)
and are reset over a JSON topic so a demo can drive many episodes through one long-lived process.

Parameters follow the ROS conventions: one descriptor each (type, description, range from
SimNodeConfig), all read-only (the scene and the topics are built once), and an unknown name in a
params file stops start-up with one line naming it.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.time import Time
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String

from omni_vla_safety.errors import explain
from omni_vla_safety.interrupt import exit_process, ros_main, spin_until_stopped
from omni_vla_safety.ros_params import coerce, descriptor, unknown_overrides
from omni_vla_sim import robot
from omni_vla_sim.env import EnvConfig, PandaTaskEnv

NODE_NAME = "sim_node"
# A late tick steps the physics it owes (stamps stay on the wall clock, as observation age needs);
# only a stall longer than this (a debugger, a suspended process, a loaded start-up) re-anchors the clock
# instead: the physics skips the rest, and the stamps jump with the wall clock (without /clock).
MAX_CATCH_UP_S = 0.5


class SimNodeConfig(BaseModel):
    """Every setting of sim_node (ROS parameters; defaults also in config/sim_node.yaml)."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field("pick_red", description="task of the suite the scene starts with")
    seed: int = Field(1_000_000, ge=0, lt=2**32, description="seed of the first episode")
    image_size: int = Field(128, ge=16, le=1024, description="camera image width and height (px)")
    control_hz: float = Field(20.0, gt=0, le=500,
                              description="episode clock: steps counted and success judged at this rate (Hz)")
    joint_state_hz: float = Field(100.0, ge=10.0, le=1000.0,
                                  description="joint states published and physics stepped at this rate (Hz)")
    camera_hz: float = Field(20.0, gt=0, le=500, description="camera images published at this rate (Hz)")
    joint_limits_file: str = Field("", description="ros2_control joint_limits YAML ('' = the package's)")
    front_image_topic: str = Field("/camera/front/image_raw", description="front camera out (Image rgb8)")
    wrist_image_topic: str = Field("/camera/wrist/image_raw", description="wrist camera out (Image rgb8)")
    joint_states_topic: str = Field("/joint_states", description="joint states out (JointState)")
    command_topic: str = Field("/forward_position_controller/commands",
                               description="position commands in (Float64MultiArray, joint order)")
    episode_topic: str = Field("/sim/episode", description="episode resets in (String JSON)")
    status_topic: str = Field("/sim/status", description="episode status out (String JSON), every control period")


class UnknownParameters(ValueError):
    """A params file or command line names a parameter sim_node does not have (a typo)."""


class SimNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self.cfg = self._read_parameters()
        cfg = self.cfg
        limits_file = Path(cfg.joint_limits_file) if cfg.joint_limits_file else None
        # Cameras are rendered at camera_hz by this node, not at every end of a control period.
        self.env = PandaTaskEnv(cfg.task, EnvConfig(image_size=cfg.image_size, control_hz=cfg.control_hz,
                                                    limits_file=limits_file, render=False))
        self.obs = self.env.reset(cfg.seed)
        self.done = self.success = self.frozen = False
        self.physics_dt = self.env.config.physics_dt
        self.sim_steps = 0  # physics steps of the node's clock since start (advances while frozen too)
        self._in_period = 0  # physics steps since the last end of a control period
        self.overruns = 0
        self.sim_time_on = bool(self.get_parameter("use_sim_time").value)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_front = self.create_publisher(Image, cfg.front_image_topic, qos_profile_sensor_data)
        self.pub_wrist = self.create_publisher(Image, cfg.wrist_image_topic, qos_profile_sensor_data)
        self.pub_joints = self.create_publisher(JointState, cfg.joint_states_topic, qos_profile_sensor_data)
        self.pub_status = self.create_publisher(String, cfg.status_topic, reliable)
        self.pub_clock = self.create_publisher(ClockMsg, "/clock", 10) if self.sim_time_on else None
        self.create_subscription(Float64MultiArray, cfg.command_topic, self._on_command, reliable)
        self.create_subscription(String, cfg.episode_topic, self._on_episode, reliable)
        self._js = JointState(name=list(robot.JOINT_NAMES))
        self._zeros = [0.0] * len(robot.JOINT_NAMES)
        self._camera_every = max(1, round(cfg.joint_state_hz / cfg.camera_hz))
        self._status_every = max(1, round(cfg.joint_state_hz / cfg.control_hz))
        self._ticks = 0
        # A steady timer: the node drives the simulated clock, so it cannot wait on /clock itself.
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        for cam in ("front", "wrist"):  # the renderer's first frame (EGL set-up) before the clock starts
            self.env.render(cam)
        self._t0 = time.monotonic()  # the physics clock starts now: stamps are this instant + simulated time
        self._epoch_ns = self.get_clock().now().nanoseconds if not self.sim_time_on else 0
        self.create_timer(1.0 / cfg.joint_state_hz, self._tick, clock=self._steady)
        self.get_logger().info(f"sim_node: task {cfg.task}, joint states {cfg.joint_state_hz} Hz, cameras "
                               f"{cfg.camera_hz} Hz, episode clock {cfg.control_hz} Hz"
                               + (", publishing /clock" if self.sim_time_on else ""))

    # ----- parameters ---------------------------------------------------------------------------
    def _read_parameters(self) -> SimNodeConfig:
        """Declare each SimNodeConfig field with its descriptor (omni_vla_safety.ros_params, all read-only);
        refuse names we do not know."""
        unknown = unknown_overrides(self._parameter_overrides, set(SimNodeConfig.model_fields) | set(self._parameters))
        if unknown:
            raise UnknownParameters(unknown)
        defaults = SimNodeConfig()
        values = {}
        for name, field in SimNodeConfig.model_fields.items():
            desc = descriptor(name, field, read_only=True)
            override = self._parameter_overrides.get(name)
            value = coerce(desc.type, override.value) if override is not None else getattr(defaults, name)
            values[name] = self.declare_parameter(name, value, desc, ignore_override=True).value
        return SimNodeConfig(**values)

    # ----- inputs -------------------------------------------------------------------------------
    def _on_command(self, msg: Float64MultiArray) -> None:
        """Applied at once: the next physics step follows it (a frozen sim holds its reset pose)."""
        if self.frozen:
            return
        data = np.asarray(msg.data, dtype=np.float64)
        if data.shape != (len(robot.JOINT_NAMES),) or not np.all(np.isfinite(data)):
            self.get_logger().error(f"command refused: expected {len(robot.JOINT_NAMES)} finite values, "
                                    f"got {data.tolist()}; holding the last target", throttle_duration_sec=1.0)
            return
        self.env.set_targets(data)

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
        self.frozen = bool(req.get("frozen", False))
        self.done = self.success = False
        self._in_period = 0
        self.get_logger().info(f"episode reset: task {self.env.task.name} seed {self.env.seed}")
        self._publish_status()

    # ----- the physics tick ---------------------------------------------------------------------
    def _tick(self) -> None:
        """Advance physics to the wall clock (real time), close control periods, publish."""
        due = int((time.monotonic() - self._t0) / self.physics_dt) - self.sim_steps
        limit = round(MAX_CATCH_UP_S / self.physics_dt)
        if due > limit:
            self.overruns += 1
            skipped = (due - limit) * self.physics_dt
            self._t0 += skipped
            if not self.sim_time_on:  # else the stamps are /clock's own time, which skips nothing
                self._epoch_ns += round(skipped * 1e9)
            self.get_logger().warning(f"physics {skipped + MAX_CATCH_UP_S:.2f} s behind the wall clock: "
                                      f"{skipped:.2f} s skipped (overrun {self.overruns})", throttle_duration_sec=1.0)
            due = limit
        if due <= 0:
            return
        self.sim_steps += due
        # The arm keeps following commands once the episode is over, as a robot does: only its verdict is latched
        # (steps and success stop at the end). A frozen sim (an operator's reset) holds the reset pose.
        moving = not self.frozen
        if moving:
            self.env.advance(due)
            if not self.done:
                self._in_period += due
            while self._in_period >= self.env.n_substeps and not self.done:
                self._in_period -= self.env.n_substeps
                _, _, ok, truncated, _ = self.env.end_tick()
                self.success, self.done = ok, ok or truncated
        self._ticks += 1
        stamp = self._stamp()
        if self.pub_clock is not None:
            self.pub_clock.publish(ClockMsg(clock=stamp))
        qpos, qvel = self.env.joint_state()
        js = self._js
        js.header.stamp = stamp
        js.position = qpos.tolist()
        js.velocity = qvel.tolist() if moving else self._zeros
        self.pub_joints.publish(js)
        if self._ticks % self._camera_every == 0:
            self._publish_images(stamp)
        if self._ticks % self._status_every == 0:
            self._publish_status()

    def _stamp(self) -> Any:
        """The physics clock as a ROS time: node start + simulated time (or simulated time alone)."""
        ns = self._epoch_ns + round(self.sim_steps * self.physics_dt * 1e9)
        return Time(nanoseconds=ns).to_msg()

    def _publish_images(self, stamp: Any) -> None:
        for pub, cam in ((self.pub_front, "front"), (self.pub_wrist, "wrist")):
            img = self.env.render(cam)
            msg = Image(height=img.shape[0], width=img.shape[1], encoding="rgb8", is_bigendian=0,
                        step=img.shape[1] * 3, data=img.tobytes())
            msg.header.stamp = stamp
            msg.header.frame_id = f"{cam}_camera"
            pub.publish(msg)

    def _publish_status(self) -> None:
        status = {"task": self.env.task.name, "seed": self.env.seed, "instruction": self.env.instruction.text,
                  "step": self.env.steps, "success": self.success, "done": self.done, "frozen": self.frozen,
                  "sim_time_s": round(self.sim_steps * self.physics_dt, 4), "overruns": self.overruns}
        self.pub_status.publish(String(data=json.dumps(status)))


def main(argv: list[str] | None = None) -> int:
    """Entry point `sim_node`: exits 1 with a one-line reason on bad or unknown parameters."""
    cleanup: list[Callable[[], object]] = []
    with ros_main(argv, cleanup, name=NODE_NAME) as stop:
        try:
            node = SimNode()
        except ValidationError as exc:
            print(f"{NODE_NAME}: refusing to start: {explain(exc)}", file=sys.stderr)
            return 1
        except (UnknownParameters, ParameterException, ValueError) as exc:  # a bad task or seed from env.reset too
            print(f"{NODE_NAME}: refusing to start: {exc}", file=sys.stderr)
            return 1
        cleanup += [node.env.close, node.destroy_node]
        spin_until_stopped(node, stop)
    return 0


def run() -> None:
    """Console script `sim_node`: main(), then the process ends at once (omni_vla_safety.interrupt.exit_process)."""
    exit_process(main())


if __name__ == "__main__":
    run()
