"""safety_supervisor: the ROS 2 shell around `Supervisor` (messages and parameters only).

A plain rclpy Node (not lifecycle): it must run from start-up with no manager to activate it.
One timer at rate_hz publishes the limited command (or the controlled stop / hold); all
callbacks run in one single-threaded executor, so the state machine needs no locks.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from types import FrameType
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from pydantic import ValidationError
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rcl_interfaces.msg import ParameterDescriptor
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from omni_vla_safety.config import NODE_NAME, SupervisorConfig, resolve_path
from omni_vla_safety.limits import LimitsError, load_enforced_limits
from omni_vla_safety.supervisor import ACTIVE, ESTOP, Supervisor

_LEVELS = {ACTIVE: DiagnosticStatus.OK, ESTOP: DiagnosticStatus.ERROR}
LOG_PERIOD_S = 1.0  # per intervention kind: first message logged, the rest counted


class SafetySupervisorNode(Node):
    """Subscribes proposals, joint states and the e-stop; publishes limited position commands."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self.config = self._read_parameters()
        limits_path = resolve_path(self.config.joint_limits_file)
        overlay = resolve_path(self.config.joint_limits_overlay) if self.config.joint_limits_overlay else None
        limits = load_enforced_limits(limits_path, self.config.joint_names, overlay)
        self.supervisor = Supervisor(self.config, limits)
        cfg = self.config
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.command_pub = self.create_publisher(Float64MultiArray, cfg.command_topic, reliable)
        self.status_pub = self.create_publisher(String, cfg.status_topic, reliable)
        self.diag_pub = self.create_publisher(DiagnosticArray, cfg.diagnostics_topic, 10)
        self.create_subscription(JointTrajectory, cfg.proposed_command_topic, self._on_command, reliable)
        self.create_subscription(JointState, cfg.joint_states_topic, self._on_joint_state, qos_profile_sensor_data)
        # Reliable + volatile: compatible with latched (transient local) and plain publishers alike.
        self.create_subscription(Bool, cfg.estop_topic, self._on_estop, reliable)
        self.create_service(Trigger, cfg.reset_estop_service, self._on_reset)
        self._msg = Float64MultiArray()
        self._status_every = max(1, round(cfg.status_period_s * cfg.rate_hz))
        self._diag_every = max(1, round(cfg.diagnostics_period_s * cfg.rate_hz))
        self._ticks = 0
        self._last_log: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.create_timer(cfg.dt, self._on_tick)
        self.get_logger().info(f"limits from {limits_path}; {len(cfg.joint_names)} joints at {cfg.rate_hz} Hz; "
                               f"command timeout {cfg.command_timeout_s} s")

    def _read_parameters(self) -> SupervisorConfig:
        """Declare every SupervisorConfig field as a parameter; pydantic validates the values."""
        defaults = SupervisorConfig()
        any_type = ParameterDescriptor(dynamic_typing=True)
        values = {}
        for name in SupervisorConfig.model_fields:
            values[name] = self.declare_parameter(name, getattr(defaults, name), any_type).value
        return SupervisorConfig(**values)

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_joint_state(self, msg: JointState) -> None:
        self.supervisor.on_joint_state(msg.name, msg.position, self._now())

    def _on_command(self, msg: JointTrajectory) -> None:
        now = self._now()
        if not msg.points:
            self.supervisor.reject("rejected_no_points", "trajectory has no points")
            return
        stamp = msg.header.stamp
        t = None if (stamp.sec == 0 and stamp.nanosec == 0) else stamp.sec + stamp.nanosec * 1e-9
        self.supervisor.on_command(msg.joint_names, msg.points[0].positions, t, now)

    def _on_estop(self, msg: Bool) -> None:
        self.supervisor.on_estop(msg.data, self._now())

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.supervisor.reset_estop(self._now())
        if response.success:
            self.get_logger().info(f"reset_estop: {response.message}")
        else:
            self.get_logger().warning(f"reset_estop refused: {response.message}")
        return response

    def _on_tick(self) -> None:
        sup = self.supervisor
        out = sup.tick(self._now())
        if out is not None:
            self._msg.data = out
            self.command_pub.publish(self._msg)
        self._log_events()
        self._ticks += 1  # counts while waiting too: status says why nothing is published
        if self._ticks % self._status_every == 0:
            self.status_pub.publish(String(data=json.dumps(sup.status(), separators=(",", ":"))))
        if self._ticks % self._diag_every == 0:
            self.diag_pub.publish(self._diagnostics())

    def _log_events(self) -> None:
        events = self.supervisor.events
        now = time.monotonic()
        while events:
            kind, message = events.popleft()
            if now - self._last_log.get(kind, -1e9) >= LOG_PERIOD_S:
                extra = self._suppressed.pop(kind, 0)
                suffix = f" (+{extra} more {kind} since last report)" if extra else ""
                self.get_logger().warning(f"[{kind}] {message}{suffix}")
                self._last_log[kind] = now
            else:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1

    def _diagnostics(self) -> DiagnosticArray:
        status = self.supervisor.status()
        diag = DiagnosticStatus(name=NODE_NAME, hardware_id="omni_vla",
                                level=_LEVELS.get(status["state"], DiagnosticStatus.WARN),
                                message=f"{status['state']}: {status['reason']}")
        diag.values = [KeyValue(key="state", value=status["state"]),
                       KeyValue(key="last_reason", value=status["reason"]),
                       KeyValue(key="last_intervention", value=status["last_intervention"]),
                       KeyValue(key="stopped", value=str(status["stopped"])),
                       KeyValue(key="estop_latched", value=str(status["estop_latched"]))]
        diag.values += [KeyValue(key=f"interventions/{k}", value=str(v)) for k, v in sorted(status["counts"].items())]
        msg = DiagnosticArray(status=[diag])
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg


class _Sigint:
    """Ctrl-C seen. rclpy chains to this handler; its KeyboardInterrupt comes out as a RuntimeError when
    it lands inside a pybind11 call, which is then a clean shutdown. (Own copy: safety imports nothing
    from the project.)"""

    seen = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        cls.seen = True
        raise KeyboardInterrupt


def main(args: list[str] | None = None) -> int:
    """Entry point `safety_supervisor`: exits 1 with the reason on bad parameters or limits."""
    signal.signal(signal.SIGINT, _Sigint.handler)
    rclpy.init(args=args)
    node = None
    code = 0
    try:
        node = SafetySupervisorNode()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except (LimitsError, ValidationError, FileNotFoundError) as exc:
        print(f"safety_supervisor: refusing to start: {exc}", file=sys.stderr)
        code = 1
    except RuntimeError:
        if not _Sigint.seen:
            raise
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
