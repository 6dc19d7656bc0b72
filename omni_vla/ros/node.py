"""vla_node: the ROS 2 lifecycle node around the ROS-free core (Controller + Scheduler + worker).

Lifecycle: configure validates the parameters, checks the joint names against the bundle and
starts the inference worker (load + warm-up); activate starts the fixed-rate loop; deactivate
stops commanding; cleanup/shutdown stop the worker. `autostart` runs configure + activate at start
for bringups without a lifecycle manager (and exits non-zero if configure fails).

Threads: subscriber callbacks run in the executor (main thread) and only copy the newest message
into preallocated buffers under a lock; the Scheduler runs in its own thread, calls the controller
and publishes (rclpy publish is thread-safe). Diagnostics go out from an executor timer.

Parameters: one descriptor per VlaNodeConfig field (omni_vla_safety.ros_params), read-only except
LIVE_PARAMETERS, which are read at each use (the next tick, message or diagnostics period); the
others build the worker, the queue, the scheduler or the subscriptions at configure, so they are set
at start-up (params file, launch arguments, -p) and a change means restarting the node. A parameter name the node does not have (a typo in the params
file) fails configure naming it; set_parameters is validated by the same pydantic model.

Time: with use_sim_time the loop ticks on ROS time (/clock, polled: a paused simulation pauses the
loop) and staleness is judged on it; without it, ticks are on the monotonic clock. Either way an
observation's age is taken from its header.stamp against this node's ROS clock (transport time
counts), and a zero or future stamp (clock skew beyond max_future_stamp_s) falls back to arrival
time, counted in diagnostics. The core only sees seconds and clock callables. ROS time jumping back (a
simulation reset, a bag replayed from its start) restarts the loop's schedule from the new time (counted as
clock_jumps_back); inputs from before the jump are then ahead of it, so the loop holds as stale until new
ones arrive. Inference latency (hence the RTC delay in ticks) is measured in wall time.

The node is an adapter: configure reads the parameters and picks the clocks, the rest is
omni_vla.ros.assembly (ROS-free); diagnostics are built by omni_vla.ros.diagnostics (levels there);
the tick steps the loop on a snapshot of the observation (Loop.tick), so callbacks
never wait for a step. hardware_id is "<policy>@<manifest sha256[:8]> (<backend>)": what this status is about is the
exported model running on a runtime; the hash changes with every re-export, so an operator can tell
which model version on which backend misbehaves (the robot is told by the namespace of the node).
"""
from __future__ import annotations

import array
import sys
import threading
from typing import Any, Callable

import numpy as np
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from pydantic import ValidationError
from rcl_interfaces.msg import SetParametersResult
from rclpy.exceptions import ParameterException
from rclpy.lifecycle import Node, State, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from omni_vla.cloud import Replanner
from omni_vla.core.assembly import Loop
from omni_vla.core.controller import Controller
from omni_vla.core.loop import MonotonicClock, PolledClock, Scheduler, raise_python_threads, threads_priority_below
from omni_vla.core.perception import (ImageRejected, InstructionRejected, JointStateRejected, ObservationStore,
                                      check_encoding, decode_compressed)
from omni_vla.core.settings import LIVE_LOOP_SETTINGS, VlaNodeConfig, flatten
from omni_vla.inference.client import RuntimeFactory, open_runtime
from omni_vla.inference.worker import ProcessInference
from omni_vla.ros.assembly import Assembly, ConfigureError, assemble
from omni_vla.ros.diagnostics import NodeCounts, Since, loop_report
from omni_vla.ros.replan_io import ReplanIO
from omni_vla_safety.errors import explain
from omni_vla_safety.interrupt import exit_process, ros_main, spin_until_stopped
from omni_vla_safety.ros_params import coerce, descriptor, model_fields, plain, unknown_overrides

NODE_NAME = "vla_node"
# Read at each use, so set_parameters applies them at once; every other parameter is read-only.
LIVE_PARAMETERS = LIVE_LOOP_SETTINGS | {"diagnostics_period_s", "replan_intervention_kinds"}


def _defaults() -> dict[str, Any]:
    """Flat parameter defaults and descriptions, from the pydantic model."""
    model = VlaNodeConfig.model_construct(bundle_dir="")
    flat = flatten(model)
    flat["bundle_dir"] = ""
    return flat


def seconds(stamp: Any) -> float:
    """builtin_interfaces/Time in seconds (0.0 for an unset stamp)."""
    return stamp.sec + stamp.nanosec * 1e-9


def image_array(msg: Image) -> np.ndarray:
    """sensor_msgs/Image (rgb8/bgr8) as an [H, W, 3] view; ImageRejected naming what is wrong."""
    check_encoding(msg.encoding)
    h, w, step = msg.height, msg.width, msg.step
    data = np.frombuffer(msg.data, np.uint8)
    if h == 0 or w == 0 or step < 3 * w or data.size < h * step:
        raise ImageRejected(f"image {w}x{h} step {step} with {data.size} bytes is inconsistent (need {h}x{3 * w})")
    return data[: h * step].reshape(h, step)[:, : 3 * w].reshape(h, w, 3)


class VlaNode(Node):
    """Lifecycle node publishing the policy's proposed joint command at a fixed rate."""

    def __init__(self, runtime_factory: RuntimeFactory = open_runtime, **kwargs: Any) -> None:
        """`runtime_factory` builds the runtime inside the worker (a module-level function, pickled)."""
        super().__init__(NODE_NAME, **kwargs)
        self._runtime_factory = runtime_factory
        self._param_names: list[str] = []
        self._refused: dict[str, Any] = {}  # overrides of the wrong type or range: reported at configure
        self._declare_parameters()
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.cfg: VlaNodeConfig | None = None
        self.hardware_id = ""
        self.sim_time = False
        self.loop_clock: MonotonicClock | PolledClock = MonotonicClock()
        self.inference: ProcessInference | None = None
        self.loop: Loop | None = None
        self.controller: Controller | None = None
        self.replanner: Replanner | None = None
        self.replan_io: ReplanIO | None = None
        self.store: ObservationStore | None = None
        self.scheduler: Scheduler | None = None
        self._thread: threading.Thread | None = None
        self.threads_scheduling = "normal"  # the executor's and other Python threads (main() may raise them)
        self._threads_priority = 0
        self._subs: list[Any] = []
        self._pubs: list[Any] = []
        self._timer: Any = None
        self._active = False
        self._last_status = ("", "")
        self.counts = NodeCounts()
        self._since = Since()

    @property
    def autostart(self) -> bool:
        return bool(self.get_parameter("autostart").value)

    # ----- parameters ------------------------------------------------------------------------------
    def _declare_parameters(self) -> None:
        """One descriptor per field; an override rclpy refuses (type, range) is kept for configure's
        message, which pydantic words, instead of a traceback from the constructor."""
        defaults = _defaults()
        overrides = self._parameter_overrides
        for name, field in model_fields(VlaNodeConfig):
            desc = descriptor(name, field, read_only=name not in LIVE_PARAMETERS)
            value = coerce(desc.type, overrides[name].value) if name in overrides else defaults[name]
            try:
                self.declare_parameter(name, value, desc, ignore_override=True)
            except ParameterException:
                self._refused[name] = plain(value)
                self.declare_parameter(name, defaults[name], desc, ignore_override=True)
            self._param_names.append(name)

    def _flat_parameters(self) -> dict[str, Any]:
        return {n: plain(self.get_parameter(n).value) for n in self._param_names}

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """rclpy has checked read-only, type and range; the settings model checks the rest (one line on
        refusal), then a configured node applies the live ones at once."""
        changes = {p.name: plain(p.value) for p in params if p.name in self._param_names}
        if not changes:
            return SetParametersResult(successful=True)
        flat = {**self._flat_parameters(), **changes}
        try:
            candidate = VlaNodeConfig.from_ros_parameters(flat)
        except ValidationError as exc:
            reason = explain(exc, only=changes)
            if reason:
                return SetParametersResult(successful=False, reason=reason)
            candidate = None  # the changed values are fine; something else is unset (bundle_dir before configure)
        if self.cfg is not None and candidate is not None:
            self._apply_live({k: getattr(candidate, k) for k in changes})
        self.get_logger().info(f"parameters changed: {changes}")
        return SetParametersResult(successful=True)

    def _apply_live(self, changes: dict[str, Any]) -> None:
        """The configured node takes LIVE_PARAMETERS at once (the loop at its next tick)."""
        cfg = self.cfg.model_copy(update=changes)  # type: ignore[union-attr]
        self.cfg = cfg
        if self.loop is not None and changes.keys() & LIVE_LOOP_SETTINGS:
            self.loop.update(cfg.loop())
        if "diagnostics_period_s" in changes and self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics)
        if "replan_intervention_kinds" in changes and self.replan_io is not None:
            self.replan_io.set_kinds(cfg.replan_intervention_kinds)

    def _parameter_problem(self) -> str | None:
        """A misspelled or unknown name in the params file or command line: rclpy would ignore it."""
        return unknown_overrides(self._parameter_overrides, self._parameters)

    # ----- lifecycle ---------------------------------------------------------------------------
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        log = self.get_logger()
        self.sim_time = bool(self.get_parameter("use_sim_time").value)
        self.loop_clock = PolledClock(self._ros_now) if self.sim_time else MonotonicClock()
        try:
            problem = self._parameter_problem()
            if problem is not None:
                raise ConfigureError(problem)
            built = assemble({**self._flat_parameters(), **self._refused}, self._runtime_factory,
                             self.loop_clock.now, self._ros_now)
        except ConfigureError as exc:
            log.error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        except Exception as exc:  # noqa: BLE001 - rclpy would swallow it without a word
            log.error(f"configure failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        try:
            self._adopt(built)
        except Exception as exc:  # noqa: BLE001 - rclpy would swallow it without a word; the worker must not outlive it
            self.inference = self.inference or built.inference
            self.replanner = self.replanner or built.replanner
            self.release()
            log.error(f"configure failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        for warning in built.warnings():
            log.warning(warning)
        log.info(built.summary(self.sim_time))
        self._raise_threads()  # the threads configure started (the worker's client, a re-planner's)
        return TransitionCallbackReturn.SUCCESS

    def _adopt(self, built: Assembly) -> None:
        """Take the assembled parts and build the ROS side around them: topics, re-plan I/O, the scheduler."""
        cfg = self.cfg = built.cfg
        self.inference, self.replanner, self.loop, self.hardware_id = (built.inference, built.replanner, built.loop,
                                                                       built.hardware_id)
        self.controller, self.store = built.loop.controller, built.loop.store
        self._make_io(cfg)
        if built.replanner is not None:
            self.replan_io = ReplanIO(self, cfg, built.replanner)
            client = built.replanner.config.client
            self.get_logger().info(f"cloud re-planning: {client.uri} ({client.protocol})")
        # Lateness percentiles over the last minute of ticks (sorted at diagnostics rate).
        self.scheduler = Scheduler(cfg.rate_hz, self._tick, clock=self.loop_clock,
                                   window=max(1000, int(60 * cfg.rate_hz)), rt_priority=cfg.realtime_priority)

    def raise_threads(self) -> None:
        """From now on the node's Python threads (this executor, and after each configure the threads it started)
        run under SCHED_FIFO just below the loop thread, which raises itself to `realtime_priority` when it starts.
        The entry point's choice, not a library's: tests build nodes inside their own process."""
        value = self.get_parameter("realtime_priority").value
        if isinstance(value, int):
            self._threads_priority = threads_priority_below(value)
            self._raise_threads()

    def _raise_threads(self) -> None:
        if self._threads_priority:
            status = raise_python_threads(self._threads_priority)
            if not status.endswith("(0 raised)") or self.threads_scheduling == "normal":
                self.threads_scheduling = status  # in diagnostics; a later call with nothing new keeps the first's

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        assert self.scheduler is not None and self.controller is not None
        self.controller.reset()
        if isinstance(self.loop_clock, PolledClock):
            self.loop_clock.rearm()
        self._thread = threading.Thread(target=self._run_loop, name="vla_loop", daemon=True)
        self._active = True
        self._thread.start()
        self.get_logger().info("active: commanding")
        return TransitionCallbackReturn.SUCCESS

    def _run_loop(self) -> None:
        """The Scheduler; on ROS time it first waits for the first /clock (time 0 is 'not started')."""
        clock, sched = self.loop_clock, self.scheduler
        if isinstance(clock, PolledClock) and not clock.wait_for_start():
            return
        if sched is not None:
            sched.run()

    def _ros_now(self) -> float:
        """This node's ROS clock in seconds (simulated time under use_sim_time)."""
        return self.get_clock().now().nanoseconds * 1e-9

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        self._stop_loop()
        self.get_logger().info("inactive: no commands")
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: State) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def release(self) -> None:
        """Stop the loop, the worker and the ROS interfaces (idempotent)."""
        self._stop_loop()
        for sub in self._subs:
            self.destroy_subscription(sub)
        for pub in self._pubs:
            self.destroy_publisher(pub)
        if self._timer is not None:
            self.destroy_timer(self._timer)
        self._subs, self._pubs, self._timer = [], [], None
        if self.replan_io is not None:
            self.replan_io.destroy()
        if self.replanner is not None:
            self.replanner.close()
        if self.inference is not None:
            self.inference.close()
        self.inference = self.controller = self.scheduler = self.replanner = self.replan_io = self.loop = None

    def _stop_loop(self) -> None:
        self._active = False
        if self.scheduler is not None:
            self.scheduler.stop()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    # ----- ROS interfaces --------------------------------------------------------------------
    def _make_io(self, cfg: VlaNodeConfig) -> None:
        t = cfg.topics
        topics = t.camera_topics()
        unused = sorted(set(topics) - set(self.store.cameras))  # type: ignore[union-attr]
        if unused:
            self.get_logger().info(f"cameras {unused} in topics.cameras are not read by this policy: not subscribed")
        for camera in self.store.cameras:  # type: ignore[union-attr]
            topic = topics[camera]
            if cfg.compressed_images:
                cb = (lambda c: lambda m: self._on_compressed(c, m))(camera)
                self._subs.append(self.create_subscription(CompressedImage, topic + "/compressed", cb, qos_profile_sensor_data))
            else:
                cb = (lambda c: lambda m: self._on_image(c, m))(camera)
                self._subs.append(self.create_subscription(Image, topic, cb, qos_profile_sensor_data))
        self._subs.append(self.create_subscription(JointState, t.joint_states, self._on_joints, qos_profile_sensor_data))
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._subs.append(self.create_subscription(String, t.instruction, self._on_instruction, latched))
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self._cmd_pub = self.create_publisher(JointTrajectory, t.proposed_command, reliable)
        self._diag_pub = self.create_publisher(DiagnosticArray, t.diagnostics, 10)
        self._pubs = [self._cmd_pub, self._diag_pub]
        self._timer = self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics)
        # One reusable command message: the positions array.array is filled in place through a numpy view.
        msg = JointTrajectory()
        msg.joint_names = list(cfg.joint_names)
        point = JointTrajectoryPoint()
        point.positions = array.array("d", [0.0] * len(cfg.joint_names))
        ns = int(round(1e9 / cfg.rate_hz))
        point.time_from_start = Duration(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
        msg.points = [point]
        self._cmd = msg
        self._positions = np.frombuffer(point.positions, np.float64)

    def _reject(self, kind: str, exc: Exception) -> None:
        self.counts.rejected[kind] += 1
        self.counts.last_rejection = str(exc)
        self.get_logger().warning(f"rejected {kind}: {exc}", throttle_duration_sec=2.0)

    def _on_image(self, camera: str, msg: Image) -> None:
        try:
            self.store.put_image(camera, image_array(msg), msg.encoding, seconds(msg.header.stamp))  # type: ignore[union-attr]
        except ImageRejected as exc:
            self._reject("images", exc)

    def _on_compressed(self, camera: str, msg: CompressedImage) -> None:
        try:
            img = decode_compressed(msg.data, msg.format)
            self.store.put_image(camera, img, "bgr8", seconds(msg.header.stamp))  # type: ignore[union-attr]
        except ImageRejected as exc:
            self._reject("images", exc)

    def _on_joints(self, msg: JointState) -> None:
        try:
            self.store.put_joints(msg.name, msg.position, msg.velocity, seconds(msg.header.stamp))  # type: ignore[union-attr]
        except JointStateRejected as exc:
            self._reject("joint_states", exc)

    def _on_instruction(self, msg: String) -> None:
        try:
            self.store.set_instruction(msg.data)  # type: ignore[union-attr]
        except InstructionRejected as exc:
            self._reject("instructions", exc)
            return
        self.get_logger().info(f"instruction: {msg.data!r}")

    # ----- the tick (scheduler thread) -------------------------------------------------------
    def _tick(self, k: int, t: float) -> None:
        try:
            self._step(k, t)
        except Exception as exc:  # fail closed: no command this tick, say why, keep the loop alive
            self.counts.tick_errors += 1
            self.get_logger().error(f"tick {k} failed, not commanding: {exc!r}", throttle_duration_sec=1.0)

    def _step(self, k: int, t: float) -> None:
        loop = self.loop
        if loop is None or not self._active:
            return
        action = loop.tick(k, t)
        if action is not None:
            np.copyto(self._positions, action)
            self._cmd.header.stamp = self.get_clock().now().to_msg()
            self._cmd_pub.publish(self._cmd)
        ctl = loop.controller
        if ctl.state != self._last_status[0] or ctl.reason != self._last_status[1]:
            self._last_status = (ctl.state, ctl.reason)
            self._log_status(ctl.state, ctl.reason)

    def _log_status(self, state: str, reason: str) -> None:
        # rclpy fixes a call site's severity on first use: one call per severity.
        if state == "ERROR":
            self.get_logger().error(f"{state}: {reason}")
        else:
            self.get_logger().info(f"{state}: {reason or 'commanding'}")

    # ----- diagnostics (executor thread) ------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        sched, inf, loop = self.scheduler, self.inference, self.loop
        if sched is None or inf is None or loop is None:
            return
        report = loop_report(loop, sched, inf, self._active, self.counts, self._since, self.sim_time)
        values = report.values
        if self.replan_io is not None:
            values.update(self.replan_io.diagnostics())
        values["threads_scheduling"] = self.threads_scheduling
        status = DiagnosticStatus(level=bytes([report.level]), name=f"{self.get_name()}: control loop",
                                  message=report.message, hardware_id=self.hardware_id)
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(msg)


def main(argv: list[str] | None = None) -> int:
    """Entry point `vla_node` (`python -m omni_vla.ros.node --ros-args ...`)."""
    cleanup: list[Callable[[], object]] = []
    with ros_main(argv, cleanup, name="vla_node") as stop:
        # The tick thread competes with the executor for the GIL: take it back within 1 ms, not 5 ms.
        sys.setswitchinterval(0.001)
        node = VlaNode()
        cleanup += [node.release, node.destroy_node]
        node.raise_threads()
        if node.autostart:
            node.trigger_configure()
            if node.controller is None:
                return 1  # configure logged the one line saying why
            node.trigger_activate()
        spin_until_stopped(node, stop)
    return 0


def run() -> None:
    """Console script `vla_node`: main(), then the process ends at once (omni_vla_safety.interrupt.exit_process)."""
    exit_process(main())


if __name__ == "__main__":
    run()
