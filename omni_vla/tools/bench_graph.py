"""`omni-vla bench graph`: the command cadence a robot's controller sees from the real nodes over DDS.

The ROS-free `bench loop` times the loop alone; it cannot see DDS, the executors or the other
processes on the two cores. This bench starts safety_supervisor and vla_node (shipped bundle, MNN)
as separate processes like the bringup, a light fake robot in its own process (two 128x128 rgb8
cameras at 30 Hz, joint states at 100 Hz echoing the last safe command) and a probe in its own
process that activates the policy and timestamps every proposal and safe command on arrival.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import rclpy
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.ros.graph import ROBOT_NODES, NodeSpec
from omni_vla.tools.bringup import Bringup
from omni_vla.tools.domains import claim_domain, lock_fds
from omni_vla.tools.errors import existing_bundle, non_negative_float, positive_float
from omni_vla.tools.limits_oracle import check_commands, read_limits
from omni_vla_safety.interrupt import ros_main, spin_until_stopped
from omni_vla_safety.rt import set_realtime_priority

REPO = Path(__file__).resolve().parents[2]
HOME = [0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04]  # the sim's home pose (sim/robot.py HOME_QPOS)
JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
INSTRUCTION = "pick up the red cube"
SAFE_TOPIC = "/forward_position_controller/commands"
# vla_node's diagnostics lifted into the result (counts since the node started, latencies over its recent window)
VLA_FIGURES = ("missed_ticks", "starved_ticks", "holds", "chunks", "splices", "splice_jump_p95", "splice_jump_max",
               "inference_latency_p50_ms", "inference_latency_p95_ms", "delay_ticks", "rate_hz_target",
               "worker_restarts")
PROPOSED_TOPIC = "/omni_vla/proposed_command"


def _init(domain_id: int, name: str) -> tuple[Any, Any]:
    rclpy.init(domain_id=domain_id)
    node = rclpy.create_node(name)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    return node, executor


def attach_fake_robot(node: Any, position: list[float], size: int = 128, camera_hz: float = 30.0,
                      state_hz: float = 100.0) -> None:
    """Two static cameras and joint states reporting `position` (the caller keeps it = the last safe command)."""
    state_pub = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    cameras = [node.create_publisher(Image, f"/camera/{c}/image_raw", qos_profile_sensor_data)
               for c in ("front", "wrist")]
    image = Image(height=size, width=size, encoding="rgb8", step=3 * size,
                  data=bytes((i * 7) % 251 for i in range(3 * size * size)))
    state = JointState(name=list(JOINTS))

    def publish_state() -> None:
        state.header.stamp = node.get_clock().now().to_msg()
        state.position = list(position)
        state_pub.publish(state)

    def publish_images() -> None:
        image.header.stamp = node.get_clock().now().to_msg()
        for pub in cameras:
            pub.publish(image)

    node.create_timer(1.0 / state_hz, publish_state)
    node.create_timer(1.0 / camera_hz, publish_images)


def run_robot(domain_id: int, size: int = 128, camera_hz: float = 30.0, state_hz: float = 100.0) -> None:
    """Fake robot: perfect tracking (joint state = last safe command) and two static cameras. It stops on SIGINT as
    the nodes do (omni_vla_safety.interrupt): a signal landing inside rclpy is a clean exit, not an error."""
    os.environ["ROS_DOMAIN_ID"] = str(domain_id)
    cleanup: list[Callable[[], object]] = []
    with ros_main([], cleanup) as flag:
        node = rclpy.create_node("bench_fake_robot")
        cleanup.append(node.destroy_node)
        position = list(HOME)

        def on_command(msg: Float64MultiArray) -> None:
            position[:] = msg.data

        node.create_subscription(Float64MultiArray, SAFE_TOPIC, on_command,
                                 QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
        attach_fake_robot(node, position, size, camera_hz, state_hz)
        spin_until_stopped(node, flag, executor=SingleThreadedExecutor())


def run_probe(domain_id: int, t_launch: float, warmup: float, duration: float, startup_timeout: float,
              out: Path, priority: int = 0) -> None:
    """The controller's side: activate the policy, timestamp arrivals (CLOCK_MONOTONIC), write JSON.

    `priority` > 0 runs it under SCHED_FIFO like ros2_control's controller manager (50 by default), so
    the figures are the nodes' and not those of a subscriber starved by whatever else the machine runs."""
    # The executor (this thread); DDS's threads start at normal priority (SCHED_RESET_ON_FORK resets threads too).
    scheduling = set_realtime_priority(priority) if priority > 0 else "normal"
    node, executor = _init(domain_id, "bench_probe")
    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    arrivals: dict[str, list[float]] = {"proposed": [], "safe": []}
    safe_values: list[tuple[float, tuple[float, ...]]] = []
    diag: dict[str, dict[str, str]] = {}
    diag_at_start: dict[str, dict[str, str]] = {}  # each status as first seen inside the window
    firsts: dict[str, float] = {}
    window = [float("inf"), float("inf")]  # set once the first proposal arrives
    tick_late: dict[str, float] = {}  # worst of the supervisor's 10 s lateness figures inside the window
    vla_late: dict[str, float] = {}  # and of vla_node's

    def on_status(msg: String) -> None:
        if "active" not in firsts and json.loads(msg.data).get("state") == "active":
            firsts["active"] = time.monotonic()

    def on_diag(msg: DiagnosticArray) -> None:
        for st in msg.status:
            diag[st.name] = values = {kv.key: kv.value for kv in st.values}
            if time.monotonic() >= window[0]:
                diag_at_start.setdefault(st.name, values)
            worst = tick_late if st.name == "safety_supervisor" else vla_late if st.name.startswith("vla_node") else None
            if worst is not None and _covers(values, window, time.monotonic()):
                for key in ("p99", "max"):
                    late = float(values[f"tick_lateness_{key}_ms"])
                    worst[key] = max(worst.get(key, 0.0), late)

    node.create_subscription(JointTrajectory, PROPOSED_TOPIC,
                             lambda m: arrivals["proposed"].append(time.monotonic()), reliable)
    def on_safe(msg: Float64MultiArray) -> None:
        now = time.monotonic()
        arrivals["safe"].append(now)
        safe_values.append((now, tuple(msg.data)))

    node.create_subscription(Float64MultiArray, SAFE_TOPIC, on_safe, reliable)
    node.create_subscription(String, "/omni_vla/safety_status", on_status, 10)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    node.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=INSTRUCTION))
    end = time.monotonic() + startup_timeout
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
        if arrivals["proposed"] and window[0] == float("inf"):  # the startup timeout bounds the wait only
            end = arrivals["proposed"][0] + warmup + duration
            window[:] = [arrivals["proposed"][0] + warmup, end]
    started = bool(arrivals["proposed"])
    if not started:
        window[:] = [end, end]
    result = {"proposed_period_ms": _periods(arrivals["proposed"], window),
              "safe_period_ms": _periods(arrivals["safe"], window), "window_s": round(window[1] - window[0], 3),
              "first_proposal_s": _since(arrivals["proposed"], t_launch), "first_active_s": _since(
                  [firsts["active"]] if "active" in firsts else [], t_launch),
              "cold_start_s": _since(arrivals["safe"], t_launch), "diagnostics": diag,
              "diagnostics_at_window_start": diag_at_start, "policy_started": started, "tick_lateness_ms": tick_late,
              "vla_tick_lateness_ms": vla_late,
              "probe_scheduling": scheduling, "limits_oracle": _oracle(safe_values, window)}
    out.write_text(json.dumps(result))
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()


def _oracle(values: list[tuple[float, tuple[float, ...]]], window: list[float]) -> dict[str, Any]:
    """What reached the robot inside the window, checked against config/joint_limits.yaml by limits_oracle (which
    shares no code with the supervisor), at the supervisor's configured command rate."""
    params = yaml.safe_load((REPO / "config" / "safety_supervisor.yaml").read_text())["safety_supervisor"]
    rate = float(params["ros__parameters"]["rate_hz"])
    inside = np.array([v for t, v in values if window[0] <= t <= window[1] and len(v) == len(JOINTS)])
    return {**check_commands(inside.reshape(-1, len(JOINTS)), read_limits(REPO / "config" / "joint_limits.yaml", JOINTS),
                             rate), "command_rate_hz": rate}


def _covers(values: dict[str, str], window: list[float], now: float) -> bool:
    """A node's lateness figures span its last N ticks: use them only when all lie in the window."""
    try:
        span = float(values["tick_lateness_window_ticks"]) / float(values.get("rate_hz") or values["rate_hz_target"])
    except (KeyError, ValueError, ZeroDivisionError):
        return False
    return window[0] <= now - span and now <= window[1]


def _since(times: list[float], t0: float) -> float | None:
    return round(times[0] - t0, 3) if times else None


def _periods(times: list[float], window: list[float]) -> dict[str, float | int | None]:
    """Arrival periods inside the window (ms): median, p99, max (the worst gap) and the message count."""
    inside = np.array([t for t in times if window[0] <= t <= window[1]])
    if inside.size < 2:
        return {"median": None, "p99": None, "max": None, "count": int(inside.size)}
    periods = np.diff(inside) * 1e3
    return {"median": round(float(np.median(periods)), 3), "p99": round(float(np.percentile(periods, 99)), 3),
            "max": round(float(periods.max()), 3), "count": int(inside.size)}


def _node_figures(result: dict[str, Any]) -> None:
    """Lift the nodes' own tick figures out of their last diagnostics into the required keys."""
    diag = result.get("diagnostics", {})
    safety = diag.get("safety_supervisor", {})
    vla = next((v for k, v in diag.items() if k.startswith("vla_node")), {})

    def num(values: dict[str, str], key: str) -> float | None:
        try:
            return float(values[key])
        except (KeyError, ValueError):
            return None

    late = result.get("tick_lateness_ms") or {}
    result["tick_lateness_ms"] = {"p99": late.get("p99", num(safety, "tick_lateness_p99_ms")),
                                  "max": late.get("max", num(safety, "tick_lateness_max_ms"))}
    missed = num(safety, "missed_ticks")
    result["missed_ticks"] = None if missed is None else int(missed)
    result["safety_scheduling"] = safety.get("scheduling")
    vla_late = result.get("vla_tick_lateness_ms") or {}
    result["vla_tick_lateness_ms"] = {"p99": vla_late.get("p99", num(vla, "tick_lateness_p99_ms")),
                                      "max": vla_late.get("max", num(vla, "tick_lateness_max_ms"))}
    result["vla_loop"] = {k: num(vla, k) for k in VLA_FIGURES}
    # The counts above include start-up (a 1.7 GB model loading next to the supervisor); these are the window's
    # own, from the first diagnostics inside it (they come once per diagnostics period: the window's first second
    # may be counted or not).
    start = result.get("diagnostics_at_window_start", {})
    safety0 = start.get("safety_supervisor", {})
    vla0 = next((v for k, v in start.items() if k.startswith("vla_node")), {})
    result["in_window"] = {
        name: None if None in (num(now, key), num(then, key)) else int(num(now, key) - num(then, key))
        for name, now, then, key in (("supervisor_missed_ticks", safety, safety0, "missed_ticks"),
                                     ("vla_missed_ticks", vla, vla0, "missed_ticks"),
                                     ("starved_ticks", vla, vla0, "starved_ticks"))}


def _child(role: str, domain: int, env: dict[str, str], *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "omni_vla.tools.bench_graph", "--role", role, "--domain", str(domain), *extra]
    return subprocess.Popen(cmd, env=env, cwd=REPO, pass_fds=lock_fds(domain))


def _stop(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def run_bench(args: argparse.Namespace, bundle: Path) -> dict[str, Any]:
    """Start the graph, let the probe measure, stop everything; the probe's figures plus exit codes."""
    domain = args.domain or claim_domain()
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain)}
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    specs = tuple(NodeSpec(s.executable, args.safety_module, s.params_file) if s.executable == "safety_supervisor"
                  else s for s in ROBOT_NODES)
    # The fake robot's static images make the policy reach past the gripper's range; saturating keeps the
    # supervisor on its limiting path (as with a real robot) instead of refusing and holding.
    overrides = {"vla_node": {**dict(args.param), "bundle_dir": str(bundle.resolve()), "backend": args.backend,
                              "autostart": True},
                 "safety_supervisor": {"out_of_range": "saturate", **dict(args.safety_param)}}
    with tempfile.TemporaryDirectory(prefix="bench_graph_") as tmp:
        log_dir = args.log_dir or Path(tmp) / "logs"
        out = Path(tmp) / "probe.json"
        t_launch = time.monotonic()
        probe = _child("probe", domain, env, "--t-launch", repr(t_launch), "--warmup", str(args.warmup),
                       "--duration", str(args.duration), "--startup-timeout", str(args.startup_timeout),
                       "--out", str(out), "--probe-priority", str(args.probe_priority))
        robot = _child("robot", domain, env)
        graph = Bringup(specs=specs, domain_id=domain, overrides=overrides, log_dir=log_dir)
        try:
            graph.start()
            probe.wait(timeout=args.startup_timeout + args.warmup + args.duration + 60)
        finally:
            codes = graph.stop()
            codes["fake_robot"] = _stop(robot)
            codes["probe"] = _stop(probe)
        if not out.is_file():
            raise RuntimeError(f"the probe wrote no result (exit codes {codes}); logs: {_tails(log_dir)}")
        result = json.loads(out.read_text())
        if not result["policy_started"]:
            result["logs"] = _tails(log_dir)
    _node_figures(result)
    result.update(bundle=str(bundle), exit_codes=codes, domain_id=domain, duration_s=args.duration,
                  warmup_s=args.warmup, vla_params=overrides["vla_node"], safety_params=overrides["safety_supervisor"],
                  loadavg=os.getloadavg())
    return result


def compare(policy: dict[str, Any], reference: dict[str, Any]) -> dict[str, float | None]:
    """policy / reference for the figures #30 compares (None where one side has none or the reference is 0)."""
    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    return {"tick_lateness_p99": ratio(policy["tick_lateness_ms"]["p99"], reference["tick_lateness_ms"]["p99"]),
            "vla_tick_lateness_p99": ratio(policy["vla_tick_lateness_ms"]["p99"], reference["vla_tick_lateness_ms"]["p99"]),
            "safe_period_p99": ratio(policy["safe_period_ms"]["p99"], reference["safe_period_ms"]["p99"])}


def node_param(text: str) -> tuple[str, str]:
    """`--param key=value` for a node (e.g. strategy=rtc, inference_timeout_s=30)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--param {text!r}: expected key=value, e.g. strategy=rtc")
    return key.strip(), value.strip()


def _tails(log_dir: Path, chars: int = 1500) -> dict[str, str]:
    return {p.name: p.read_text(errors="replace")[-chars:] for p in sorted(Path(log_dir).glob("*.log"))}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omni-vla bench graph", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--duration", type=positive_float, default=60.0, help="measured seconds (after the warm-up)")
    p.add_argument("--warmup", type=non_negative_float, default=5.0, help="seconds after the first proposal not measured")
    p.add_argument("--startup-timeout", type=positive_float, default=120.0, help="seconds to wait for the first proposal")
    p.add_argument("--bundle", type=existing_bundle, default=REPO / "bundles" / "reference")
    p.add_argument("--backend", default="mnn", choices=ROBOT_BACKENDS)
    p.add_argument("--domain", type=int, default=0, help="ROS_DOMAIN_ID (0: one no other process here has claimed)")
    p.add_argument("--safety-module", default="omni_vla_safety.node",
                   help="module run as safety_supervisor (A/B comparisons of supervisor versions)")
    p.add_argument("--probe-priority", type=int, default=50,
                   help="SCHED_FIFO priority of the measuring subscriber (ros2_control's default 50; 0 = normal)")
    p.add_argument("--log-dir", type=Path, default=None, help="keep the nodes' logs here")
    p.add_argument("--param", type=node_param, action="append", default=[],
                   help="a vla_node parameter for this run, key=value (repeatable)")
    p.add_argument("--safety-param", type=node_param, action="append", default=[],
                   help="a safety_supervisor parameter for this run, key=value (repeatable), e.g. command_timeout_s "
                        "above a slow policy's tick period")
    p.add_argument("--compare-reference", action="store_true",
                   help="then run the shipped reference bundle the same way, in the same command, and report ratios")
    p.add_argument("--role", default="bench", choices=["bench", "robot", "probe"], help=argparse.SUPPRESS)
    p.add_argument("--t-launch", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.role == "robot":
        run_robot(args.domain)
        return 0
    if args.role == "probe":
        run_probe(args.domain, args.t_launch, args.warmup, args.duration, args.startup_timeout, args.out,
                  args.probe_priority)
        return 0
    result = run_bench(args, args.bundle)
    if args.compare_reference:
        ref_logs = args.log_dir / "reference" if args.log_dir else None
        reference = run_bench(argparse.Namespace(**{**vars(args), "log_dir": ref_logs}), REPO / "bundles" / "reference")
        result = {"policy": result, "reference": reference, "ratios": compare(result, reference)}
        if args.json:
            print(json.dumps(result))
        return 0 if result["policy"]["policy_started"] and reference["policy_started"] else 1
    if args.json:
        print(json.dumps(result))
    else:
        for key in ("proposed_period_ms", "safe_period_ms", "tick_lateness_ms", "vla_tick_lateness_ms"):
            print(f"{key:22s} {result[key]}")
        print(f"{'missed_ticks':22s} {result['missed_ticks']} (in the window: {result['in_window']})")
        print(f"{'cold_start_s':22s} {result['cold_start_s']}")
    return 0 if result["policy_started"] else 1


if __name__ == "__main__":
    sys.exit(main())
