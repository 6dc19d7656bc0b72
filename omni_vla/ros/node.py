"""vla_node: the ROS 2 lifecycle node around the ROS-free core (Controller + Scheduler + worker).

Lifecycle: configure validates the parameters, checks the joint names against the bundle and
starts the inference worker (load + warm-up); activate starts the fixed-rate loop; deactivate
stops commanding; cleanup/shutdown stop the worker. `autostart` runs configure + activate at start
for bringups without a lifecycle manager (and exits non-zero if configure fails).

Threads: subscriber callbacks run in the executor (main thread) and only copy the newest message
into preallocated buffers under a lock; the Scheduler runs in its own thread, calls the controller
and publishes (rclpy publish is thread-safe). Diagnostics go out from an executor timer.
"""
from __future__ import annotations

import array
import sys
import threading
from typing import Any, Callable

import cv2
import numpy as np
import rclpy
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from pydantic import ValidationError
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.lifecycle import Node, State, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from omni_vla.cloud import Replanner
from omni_vla.core.assembly import Loop, build_loop
from omni_vla.core.controller import Controller
from omni_vla.core.loop import Scheduler
from omni_vla.core.perception import ImageRejected, JointStateRejected, ObservationStore, check_encoding
from omni_vla.core.settings import VlaNodeConfig, flatten
from omni_vla.inference.client import RuntimeFactory, open_runtime
from omni_vla.inference.worker import ProcessInference
from omni_vla.ros.interrupt import ros_main
from omni_vla.ros.paths import resolve_bundle_dir
from omni_vla.ros.replan_io import ReplanIO, open_replanner
from omni_vla.runtime.bundle import BundleError, read_manifest

NODE_NAME = "vla_node"
_LEVEL = {"OK": DiagnosticStatus.OK, "WAITING": DiagnosticStatus.WARN, "ERROR": DiagnosticStatus.ERROR}


def _defaults() -> dict[str, Any]:
    """Flat parameter defaults and descriptions, from the pydantic model."""
    model = VlaNodeConfig.model_construct(bundle_dir="")
    flat = flatten(model)
    flat["bundle_dir"] = ""
    return flat


def _description(name: str) -> str:
    head = name.split(".")[0]
    field = VlaNodeConfig.model_fields.get(head)
    desc = field.description if field is not None and field.description else head
    return f"topic name ({name.split('.')[-1]})" if head == "topics" else desc


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
        for name, value in _defaults().items():
            self.declare_parameter(name, value, ParameterDescriptor(description=_description(name), dynamic_typing=True))
            self._param_names.append(name)
        self.cfg: VlaNodeConfig | None = None
        self.inference: ProcessInference | None = None
        self.loop: Loop | None = None
        self.controller: Controller | None = None
        self.replanner: Replanner | None = None
        self.replan_io: ReplanIO | None = None
        self.store: ObservationStore | None = None
        self.scheduler: Scheduler | None = None
        self._thread: threading.Thread | None = None
        self._subs: list[Any] = []
        self._pubs: list[Any] = []
        self._timer: Any = None
        self._active = False
        self._last_status = ("", "")
        self.rejected = {"images": 0, "joint_states": 0}
        self.last_rejection = ""
        self.tick_errors = 0
        self._prev_ticks = (0, 0.0)

    @property
    def autostart(self) -> bool:
        return bool(self.get_parameter("autostart").value)

    # ----- lifecycle ---------------------------------------------------------------------------
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        log = self.get_logger()
        try:
            flat = {n: self.get_parameter(n).value for n in self._param_names}
            cfg = VlaNodeConfig.from_ros_parameters(flat)
            # Relative: under the working directory, else the installed share/omni_vla (ros2 launch).
            cfg = cfg.model_copy(update={"bundle_dir": resolve_bundle_dir(cfg.bundle_dir)})
            read_manifest(cfg.bundle_dir)  # a missing or bad bundle fails here, before a worker is spawned
        except BundleError as exc:
            log.error(f"configure failed: bad bundle: {exc}")
            return TransitionCallbackReturn.FAILURE
        except (ValidationError, ValueError) as exc:
            log.error(f"configure failed: invalid parameters: {exc}")
            return TransitionCallbackReturn.FAILURE
        try:
            inference = ProcessInference.from_settings(cfg.backend, str(cfg.bundle_dir), cfg.threads, cfg.worker(),
                                                       factory=self._runtime_factory, noise_scale=cfg.noise_scale).start()
        except Exception as exc:
            log.error(f"configure failed: cannot start the {cfg.backend} runtime for {cfg.bundle_dir}: {exc}")
            return TransitionCallbackReturn.FAILURE
        replanner = None
        try:
            replanner = open_replanner(cfg)
            self.loop = build_loop(cfg.loop(), inference, replanner=replanner)
        except (ValidationError, ValueError, OSError) as exc:
            inference.close()
            if replanner is not None:
                replanner.close()
            log.error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.cfg, self.inference, self.replanner = cfg, inference, replanner
        self.controller, self.store = self.loop.controller, self.loop.store
        self._make_io(cfg)
        if replanner is not None:
            self.replan_io = ReplanIO(self, cfg, replanner)
            log.info(f"cloud re-planning: {replanner.config.client.uri} ({replanner.config.client.protocol})")
        # Lateness percentiles over the last minute of ticks (sorted at diagnostics rate).
        self.scheduler = Scheduler(cfg.rate_hz, self._tick, window=max(1000, int(60 * cfg.rate_hz)),
                                   rt_priority=cfg.realtime_priority)
        log.info(f"configured: {cfg.backend} bundle {cfg.bundle_dir}, {cfg.rate_hz:g} Hz, strategy {cfg.strategy}, "
                 f"execution horizon {cfg.execution_horizon}, worker pid {inference.pid}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        assert self.scheduler is not None and self.controller is not None
        self.controller.reset()
        self._thread = threading.Thread(target=self.scheduler.run, name="vla_loop", daemon=True)
        self._active = True
        self._thread.start()
        self.get_logger().info("active: commanding")
        return TransitionCallbackReturn.SUCCESS

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
        for camera, topic in (("front", t.front_image), ("wrist", t.wrist_image)):
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
        self.rejected[kind] += 1
        self.last_rejection = str(exc)
        self.get_logger().warning(f"rejected {kind}: {exc}", throttle_duration_sec=2.0)

    def _on_image(self, camera: str, msg: Image) -> None:
        try:
            self.store.put_image(camera, image_array(msg), msg.encoding)  # type: ignore[union-attr]
        except ImageRejected as exc:
            self._reject("images", exc)

    def _on_compressed(self, camera: str, msg: CompressedImage) -> None:
        img = cv2.imdecode(np.frombuffer(msg.data, np.uint8), cv2.IMREAD_COLOR)
        try:
            if img is None:
                raise ImageRejected(f"cannot decode {msg.format!r} compressed image")
            self.store.put_image(camera, img, "bgr8")  # type: ignore[union-attr]
        except ImageRejected as exc:
            self._reject("images", exc)

    def _on_joints(self, msg: JointState) -> None:
        try:
            self.store.put_joints(msg.name, msg.position, msg.velocity)  # type: ignore[union-attr]
        except JointStateRejected as exc:
            self._reject("joint_states", exc)

    def _on_instruction(self, msg: String) -> None:
        self.store.set_instruction(msg.data)  # type: ignore[union-attr]
        self.get_logger().info(f"instruction: {msg.data!r}")

    # ----- the tick (scheduler thread) -------------------------------------------------------
    def _tick(self, k: int, t: float) -> None:
        try:
            self._step(k, t)
        except Exception as exc:  # fail closed: no command this tick, say why, keep the loop alive
            self.tick_errors += 1
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
        ctl, sched, inf = self.controller, self.scheduler, self.inference
        if ctl is None or sched is None or inf is None:
            return
        st = sched.stats
        now = sched.clock.now()
        ticks0, t0 = self._prev_ticks
        rate = (st.ticks - ticks0) / (now - t0) if t0 and now > t0 else 0.0
        self._prev_ticks = (st.ticks, now)
        s = ctl.status()
        lat = s["inference_latency"]
        state = s["state"] if self._active else "INACTIVE"
        status = DiagnosticStatus(
            level=_LEVEL.get(state, DiagnosticStatus.WARN), name=f"{self.get_name()}: control loop",
            message=("inactive" if not self._active else (s["reason"] or "commanding")),
            hardware_id=f"{inf.backend}",
        )
        values = {
            "state": state, "backend": inf.backend, "strategy": s["strategy"], "rate_hz_target": self.cfg.rate_hz,
            "loop_rate_hz": round(rate, 2), "tick_lateness_p99_ms": round(1e3 * st.percentile(99), 4),
            "tick_lateness_max_ms": round(1e3 * st.max_lateness, 4), "missed_ticks": st.missed,
            "overruns": st.overruns, "inference_latency_p50_ms": round(lat["p50_ms"], 3),
            "inference_latency_p95_ms": round(lat["p95_ms"], 3), "delay_ticks": s["delay_ticks"],
            "queue_depth": s["queue_depth"], "commands": s["commands"], "holds": s["holds"],
            "starved_ticks": s["starved_ticks"], "worker_state": inf.worker_state, "worker_restarts": inf.restarts,
            "rejected_images": self.rejected["images"] + s["rejected_images"],
            "rejected_joint_states": self.rejected["joint_states"], "last_rejection": self.last_rejection,
            "tick_errors": self.tick_errors, "scheduling": sched.rt_status, "cloud_plans": s["cloud_plans"],
        }
        if self.replan_io is not None:
            values.update(self.replan_io.diagnostics())
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(msg)


def main(argv: list[str] | None = None) -> int:
    """Entry point `vla_node` (`python -m omni_vla.ros.node --ros-args ...`)."""
    cleanup: list[Callable[[], object]] = []
    with ros_main(argv, cleanup):
        # The tick thread competes with the executor for the GIL: take it back within 1 ms, not 5 ms.
        sys.setswitchinterval(0.001)
        node = VlaNode()
        cleanup += [node.release, node.destroy_node]
        if node.autostart:
            node.trigger_configure()
            if node.controller is None:
                print("vla_node: autostart configure failed (see the error above)", file=sys.stderr)
                return 1
            node.trigger_activate()
        rclpy.spin(node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
