"""safety_supervisor: the ROS 2 shell around `Supervisor` (messages, parameters, the tick thread).

A plain rclpy Node (not lifecycle): it must run from start-up with no manager to activate it.
Callbacks run in the executor and feed the Supervisor under a lock held for microseconds; a
dedicated tick thread publishes the limited command (or the controlled stop / hold) at rate_hz on
absolute deadlines. A ROS timer in the single-threaded executor gave the controller p99 11.6 ms and
a 39.9 ms worst gap at 100 Hz (measured on the 2-core development machine), because every callback and log line delayed the tick.
Under use_sim_time the tick is a ROS timer instead, so its period is simulated time. Stop signals
and the process's life: interrupt.ros_main, as every node of the project, except that rclpy does not shut the
context down on a stop signal here: the node's last act is a controlled stop (`stop_and_hold`), published before
it exits, so the controller (which keeps the last command) is left holding the arm at rest.

Parameters: one descriptor per SupervisorConfig field (type, description, range: ros_params, which
vla_node and sim_node use too); unknown names in the parameter overrides refuse start-up; LIVE_PARAMETERS change at run time after pydantic
re-validates the whole config, the rest are read-only (the limiter and the subscriptions are built
from them once).
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Callable

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from pydantic import ValidationError
from rcl_interfaces.msg import SetParametersResult
from rclpy.duration import Duration
from rclpy.exceptions import NameValidationException, ParameterException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from omni_vla_safety.config import NODE_NAME, SupervisorConfig, resolve_path
from omni_vla_safety.errors import explain, one_line
from omni_vla_safety.interrupt import exit_process, ros_main, spin_until_stopped
from omni_vla_safety.limits import LimitsError, load_enforced_limits
from omni_vla_safety.ros_params import coerce, descriptor, plain, unknown_overrides
from omni_vla_safety.rt import LATENESS_WINDOW, DeadlineTicker, set_realtime_priority
from omni_vla_safety.supervisor import ACTIVE, ESTOP, Supervisor

_LEVELS = {ACTIVE: DiagnosticStatus.OK, ESTOP: DiagnosticStatus.ERROR}
LOG_PERIOD_S = 1.0  # per intervention kind: first message logged, the rest counted
# Read by the Supervisor at each use (or by this node): safe to change while running. The others
# are baked into the limiter, the acceptance bounds or the subscriptions at start-up.
LIVE_PARAMETERS = frozenset({"command_timeout_s", "joint_state_timeout_s", "max_future_stamp_s", "out_of_range",
                             "status_period_s", "diagnostics_period_s"})
RT_PRIORITY = 60  # SCHED_FIFO for the tick: above vla_node's loop (50), as the last line before the robot
# On the way out: at most this long braking to rest (the Panda's worst case from full speed is about 0.35 s).
EXIT_STOP_TIMEOUT_S = 1.0
EXIT_ACK_TIMEOUT_S = 0.2  # then at most this long for the controllers to acknowledge the last command


class UnknownParameters(ValueError):
    """The parameter file or command line names a parameter this node does not have (a typo)."""


class CommandOutput:
    """The limited command in the shape the robot's controllers take (ros2_control):
    forward_position: Float64MultiArray in joint order (forward_command_controller);
    joint_trajectory: JointTrajectory with joint names and one point due one period later
    (joint_trajectory_controller); with gripper_output set, the gripper joint goes alone to
    gripper_topic (its own forward or trajectory controller) and the arm output leaves it out.
    control_msgs (GripperCommand) has no pip wheel, so the gripper uses the same two message types."""

    def __init__(self, node: Node, cfg: SupervisorConfig, qos: QoSProfile) -> None:
        names = list(cfg.joint_names)
        self.gripper = names.index(cfg.gripper_joint) if cfg.gripper_output != "none" else -1
        self.arm = [i for i in range(len(names)) if i != self.gripper]
        self.all = self.gripper < 0
        self.publishers: list[Any] = []  # the controllers' publishers: the last command must reach them
        period = JointTrajectoryPoint().time_from_start
        period.sec, period.nanosec = int(cfg.dt), round((cfg.dt % 1.0) * 1e9)
        self.arm_send = self._sender(node, cfg.output, cfg.trajectory_topic if cfg.output == "joint_trajectory"
                                     else cfg.command_topic, [names[i] for i in self.arm], period, qos)
        self.grip_send = (self._sender(node, cfg.gripper_output, cfg.gripper_topic, [cfg.gripper_joint], period, qos)
                          if self.gripper >= 0 else None)

    def _sender(self, node: Node, kind: str, topic: str, names: list[str], period: Any, qos: QoSProfile) -> Any:
        if kind == "joint_trajectory":
            pub = node.create_publisher(JointTrajectory, topic, qos)
            self.publishers.append(pub)
            msg = JointTrajectory(joint_names=names, points=[JointTrajectoryPoint(time_from_start=period)])

            def send_trajectory(values: list[float]) -> None:
                # Zero stamp: start on receipt (a controller on another clock would otherwise drop it).
                msg.points[0].positions = values
                pub.publish(msg)
            return send_trajectory
        pub = node.create_publisher(Float64MultiArray, topic, qos)
        self.publishers.append(pub)
        msg = Float64MultiArray()

        def send_array(values: list[float]) -> None:
            msg.data = values
            pub.publish(msg)
        return send_array

    def publish(self, out: list[float]) -> None:
        if self.all:
            self.arm_send(out)
            return
        self.arm_send([out[i] for i in self.arm])
        self.grip_send([out[self.gripper]])


class SafetySupervisorNode(Node):
    """Subscribes proposals, joint states and the e-stop; publishes limited position commands."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._check_overrides()
        self.config = self._read_parameters()
        limits_path = resolve_path(self.config.joint_limits_file)
        overlay = resolve_path(self.config.joint_limits_overlay) if self.config.joint_limits_overlay else None
        limits = load_enforced_limits(limits_path, self.config.joint_names, overlay)
        self.supervisor = Supervisor(self.config, limits)
        self._lock = threading.Lock()  # Supervisor state: executor callbacks vs the tick thread
        cfg = self.config
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.output = CommandOutput(self, cfg, reliable)
        self.status_pub = self.create_publisher(String, cfg.status_topic, reliable)
        self.diag_pub = self.create_publisher(DiagnosticArray, cfg.diagnostics_topic, 10)
        self.create_subscription(JointTrajectory, cfg.proposed_command_topic, self._on_command, reliable)
        self.create_subscription(JointState, cfg.joint_states_topic, self._on_joint_state, qos_profile_sensor_data)
        # Reliable + volatile: compatible with latched (transient local) and plain publishers alike.
        self.create_subscription(Bool, cfg.estop_topic, self._on_estop, reliable)
        self.create_service(Trigger, cfg.reset_estop_service, self._on_reset)
        self.create_service(Trigger, cfg.resync_command_service, self._on_resync)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        # The controller that consumes our commands is the hardware this status is about.
        topic = cfg.trajectory_topic if cfg.output == "joint_trajectory" else cfg.command_topic
        self.hardware_id = topic.strip("/").rpartition("/")[0] or topic
        self._set_periods(cfg)
        self._ticks = 0
        self.ticker: DeadlineTicker | None = None  # the wall-clock tick's deadlines and lateness
        self.tick_error: BaseException | None = None
        self._last_log: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.create_timer(0.1, self._log_events)  # logging is I/O: never on the tick thread
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.get_parameter("use_sim_time").value:
            self.scheduling = "ROS timer (use_sim_time)"
            self.create_timer(cfg.dt, self._tick)
        else:
            self.scheduling = "starting"
            self._thread = threading.Thread(target=self._run_ticks, name="safety_tick", daemon=True)
            self._thread.start()
        self.get_logger().info(f"limits from {limits_path}; {len(cfg.joint_names)} joints at {cfg.rate_hz} Hz; "
                               f"command timeout {cfg.command_timeout_s} s")

    # ----- parameters ---------------------------------------------------------------------------
    def _check_overrides(self) -> None:
        """A misspelled key would silently keep its default: refuse every name we do not know."""
        problem = unknown_overrides(self._parameter_overrides, set(SupervisorConfig.model_fields) | set(self._parameters))
        if problem is not None:
            raise UnknownParameters(problem)

    def _read_parameters(self) -> SupervisorConfig:
        """Declare every SupervisorConfig field with its own descriptor; pydantic validates the values."""
        defaults = SupervisorConfig()
        values = {}
        for name, field in SupervisorConfig.model_fields.items():
            desc = descriptor(name, field, read_only=name not in LIVE_PARAMETERS)
            value = getattr(defaults, name)
            if name in self._parameter_overrides:
                value = coerce(desc.type, self._parameter_overrides[name].value)
            values[name] = plain(self.declare_parameter(name, value, desc, ignore_override=True).value)
        return SupervisorConfig(**values)

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """rclpy has checked read-only, type and range; pydantic checks the rest, then it applies live."""
        changes = {p.name: plain(p.value) for p in params if p.name in SupervisorConfig.model_fields}
        if not changes:
            return SetParametersResult(successful=True)
        try:
            config = SupervisorConfig(**{**self.config.model_dump(), **changes})
        except ValidationError as exc:
            return SetParametersResult(successful=False, reason=explain(exc))
        with self._lock:
            self.config = self.supervisor.config = config
            self._set_periods(config)
        self.get_logger().info(f"parameters changed: {changes}")
        return SetParametersResult(successful=True)

    def _set_periods(self, cfg: SupervisorConfig) -> None:
        self._status_every = max(1, round(cfg.status_period_s * cfg.rate_hz))
        self._diag_every = max(1, round(cfg.diagnostics_period_s * cfg.rate_hz))

    # ----- inputs (executor thread) -------------------------------------------------------------
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_joint_state(self, msg: JointState) -> None:
        now = self._now()
        with self._lock:
            self.supervisor.on_joint_state(msg.name, msg.position, now)

    def _on_command(self, msg: JointTrajectory) -> None:
        """Every row with its time_from_start: the Supervisor follows the trajectory, interpolated."""
        now = self._now()
        stamp = msg.header.stamp
        t = None if (stamp.sec == 0 and stamp.nanosec == 0) else stamp.sec + stamp.nanosec * 1e-9
        rows = [(p.time_from_start.sec + p.time_from_start.nanosec * 1e-9, p.positions) for p in msg.points]
        with self._lock:
            self.supervisor.on_trajectory(msg.joint_names, rows, t, now)

    def _on_estop(self, msg: Bool) -> None:
        now = self._now()
        with self._lock:
            self.supervisor.on_estop(msg.data, now)

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._answer("reset_estop", self.supervisor.reset_estop, response)

    def _on_resync(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._answer("resync_command", self.supervisor.resync_command, response)

    def _answer(self, name: str, action: Callable[[float], tuple[bool, str]],
                response: Trigger.Response) -> Trigger.Response:
        """An operator's Trigger: the Supervisor decides under the lock; the answer is logged either way."""
        now = self._now()
        with self._lock:
            response.success, response.message = action(now)
        if response.success:
            self.get_logger().info(f"{name}: {response.message}")
        else:
            self.get_logger().warning(f"{name} refused: {response.message}")
        return response

    # ----- the tick ------------------------------------------------------------------------------
    def _run_ticks(self) -> None:
        """The tick on absolute deadlines (DeadlineTicker): one command per period, never a catch-up burst."""
        self.scheduling = set_realtime_priority(RT_PRIORITY)
        self.ticker = ticker = DeadlineTicker(self.config.dt)
        try:
            while not self._stop.is_set():
                ticker.wait()
                self._tick()
        except Exception as exc:  # noqa: BLE001 - a dead tick must end the process, not go quiet
            if self._stop.is_set() or not self.context.ok():
                return
            self.tick_error = exc
            self.get_logger().fatal(f"tick thread failed: {exc!r}; shutting down")
            rclpy.try_shutdown(context=self.context)

    def _tick(self) -> None:
        """One period: the Supervisor under the lock; messages are built and published outside it."""
        now = self._now()
        with self._lock:
            out = self.supervisor.tick(now)
            self._ticks += 1  # counts while waiting too: status says why nothing is published
            status_due = self._ticks % self._status_every == 0
            diag_due = self._ticks % self._diag_every == 0
            status = self.supervisor.status() if status_due or diag_due else None
        if out is not None:
            self.output.publish(out)
        if status_due:
            self.status_pub.publish(String(data=json.dumps(status, separators=(",", ":"))))
        if diag_due:
            self.diag_pub.publish(self._diagnostics(status))

    def _log_events(self) -> None:
        events = self.supervisor.events  # deque: append/popleft are atomic across threads
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

    def _diagnostics(self, status: dict[str, Any]) -> DiagnosticArray:
        diag = DiagnosticStatus(name=NODE_NAME, hardware_id=self.hardware_id,
                                level=_LEVELS.get(status["state"], DiagnosticStatus.WARN),
                                message=f"{status['state']}: {status['reason']}")
        ticker = self.ticker
        p99, worst = ticker.recent_lateness() if ticker is not None else (0.0, 0.0)
        values = {"state": status["state"], "last_reason": status["reason"],
                  "last_intervention": status["last_intervention"], "stopped": status["stopped"],
                  "estop_latched": status["estop_latched"], "ticks": self._ticks, "rate_hz": self.config.rate_hz,
                  "tick_lateness_p99_ms": round(1e3 * p99, 4), "tick_lateness_max_ms": round(1e3 * worst, 4),
                  "tick_lateness_window_ticks": min(self._ticks, LATENESS_WINDOW),
                  "tick_lateness_max_since_start_ms": round(1e3 * (ticker.max_lateness if ticker else 0.0), 4),
                  "missed_ticks": ticker.missed if ticker is not None else 0,
                  "scheduling": self.scheduling, "command_timeout_s": self.config.command_timeout_s,
                  "joint_state_timeout_s": self.config.joint_state_timeout_s}
        values.update({f"interventions/{k}": v for k, v in sorted(status["counts"].items())})
        values["shaping_total"] = sum(status["shaping"].values())
        values["clamps_total"] = sum(status["clamps"].values())
        values.update({f"shaping/{k}": v for k, v in sorted(status["shaping"].items())})
        values.update({f"clamps/{k}": v for k, v in sorted(status["clamps"].items())})
        diag.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        msg = DiagnosticArray(status=[diag])
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def stop_and_hold(self, timeout_s: float = EXIT_STOP_TIMEOUT_S) -> bool:
        """The last act before the process exits: latch a stop (the e-stop's controlled stop at the deceleration
        limits, then hold) and keep publishing until the command is at rest and a hold has gone out after it, so the
        controller holds the arm still instead of at a point of a motion cut short. True when at rest in time."""
        if not self.context.ok():
            return False  # the context is gone (a failed tick shut it down): nothing can be published
        t0 = time.monotonic()
        with self._lock:
            self.supervisor.on_estop(True, self._now())
        ticking = self._thread is not None and self._thread.is_alive()
        at_rest = 0
        try:
            while time.monotonic() - t0 < timeout_s and at_rest < 2:
                if not ticking:  # use_sim_time (a ROS timer, no longer spun) or a dead tick thread: tick here
                    self._tick()
                time.sleep(self.config.dt)
                with self._lock:
                    at_rest = at_rest + 1 if self.supervisor.status()["stopped"] else 0
        except Exception as exc:  # noqa: BLE001 - report it; the process is exiting either way
            self.get_logger().error(f"stopping: controlled stop failed: {exc!r}")
            return False
        self._stop.set()  # no tick after the hold: the last command out is the one at rest
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        # The process exits right after: wait (briefly) until the controllers' subscriptions have acknowledged the
        # hold, or a lost packet that DDS would have resent is never resent.
        acked = all(pub.wait_for_all_acked(Duration(seconds=EXIT_ACK_TIMEOUT_S)) for pub in self.output.publishers)
        took = time.monotonic() - t0
        if not acked:
            self.get_logger().warning(f"stopping: the hold was not acknowledged within {EXIT_ACK_TIMEOUT_S} s")
        if at_rest < 2:
            self.get_logger().error(f"stopping: command not at rest after {took:.2f} s; exiting anyway")
            return False
        self.get_logger().info(f"stopping: command at rest after {took:.2f} s; the controller holds it")
        return True

    def destroy_node(self) -> None:
        """Stop the tick thread before its publishers go away."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    """Entry point `safety_supervisor`: exits 1 with a one-line reason on bad parameters or limits."""
    scheduling: list[str] = []

    def before_init() -> None:
        # Real-time for the executor (this thread runs it): a normal-priority thread preempted while holding the
        # GIL kept the SCHED_FIFO tick waiting up to 8 ms on a busy machine. DDS's threads, started by rclpy.init,
        # run at normal priority (SCHED_RESET_ON_FORK resets new threads too); they never take the GIL.
        scheduling.append(set_realtime_priority(RT_PRIORITY - 1))

    # The tick thread competes with the executor for the GIL: take it back within 1 ms, not 5 ms.
    sys.setswitchinterval(0.001)
    cleanup: list[Any] = []
    node: SafetySupervisorNode | None = None
    try:
        with ros_main(args, cleanup, before_init=before_init, rclpy_signals=False, name=NODE_NAME) as stop:
            node = SafetySupervisorNode()
            cleanup += [node.stop_and_hold, node.destroy_node]
            node.get_logger().info(f"executor thread: {scheduling[0]}")
            spin_until_stopped(node, stop)
    except ValidationError as exc:
        print(f"{NODE_NAME}: refusing to start: {explain(exc)}", file=sys.stderr)
        return 1
    except (LimitsError, UnknownParameters, ParameterException, FileNotFoundError) as exc:
        print(f"{NODE_NAME}: refusing to start: {exc}", file=sys.stderr)
        return 1
    except NameValidationException as exc:  # a topic or service name rclpy refuses when it is made
        print(f"{NODE_NAME}: refusing to start: {one_line(str(exc))}", file=sys.stderr)
        return 1
    return 1 if node is not None and node.tick_error is not None else 0


def run() -> None:
    """Console script `safety_supervisor`: main(), then the process ends at once (interrupt.exit_process)."""
    exit_process(main())


if __name__ == "__main__":
    run()
