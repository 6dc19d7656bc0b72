"""`omni-vla demo` (README command 1): the whole ROS graph in MuJoCo, in real time.

Brings up sim_node, safety_supervisor and vla_node as separate processes over DDS with the shipped
bundle (or any bundle by `--bundle`, an imported LeRobot ACT too), runs a few episodes of every task, prints success and loop statistics, writes a report,
and shuts everything down. Between episodes it does what an operator would: e-stop, deactivate
the policy, reset the scene, release and reset the e-stop, have the supervisor re-sync its command
to the measured pose (its resync_command service), then start the episode and activate the policy.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.core.settings import node_settings
from omni_vla.ros.graph import config_dir
from omni_vla.runtime.registry import read_any_manifest
from omni_vla.runtime.bundle import BundleManifest
from omni_vla.tools.bringup import Bringup
from omni_vla.tools.domains import claim_domain
from omni_vla.tools.errors import UsageError, existing_bundle, positive_int
from omni_vla_sim.report import LOOP_FIGURES, EpisodeResult, smoothness, summarise, write_report
from omni_vla_sim.showcase import main as showcase
from omni_vla_sim.tasks import EVAL_SEED_BASE, TASKS

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BUNDLE = REPO / "bundles" / "reference"


class DemoProbe:
    """The operator's side of the graph: one rclpy node with the topics and services the demo uses."""

    def __init__(self, domain_id: int) -> None:
        import rclpy  # optional: ROS; `demo --expert` runs without it
        from diagnostic_msgs.msg import DiagnosticArray  # optional: ROS; `demo --expert` runs without it
        from lifecycle_msgs.srv import ChangeState  # optional: ROS; `demo --expert` runs without it
        from rclpy.context import Context  # optional: ROS; `demo --expert` runs without it
        from rclpy.executors import SingleThreadedExecutor  # optional: ROS; `demo --expert` runs without it
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # optional: ROS; `demo --expert` runs without it
        from sensor_msgs.msg import JointState  # optional: ROS; `demo --expert` runs without it
        from std_msgs.msg import Bool, Float64MultiArray, String  # optional: ROS; `demo --expert` runs without it
        from std_srvs.srv import Trigger  # optional: ROS; `demo --expert` runs without it

        self.ctx = Context()
        rclpy.init(context=self.ctx, domain_id=domain_id)
        self.node = rclpy.create_node("omni_vla_demo", context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.String, self.Bool = String, Bool
        self.episode = self.node.create_publisher(String, "/sim/episode", 10)
        self.instruction = self.node.create_publisher(String, "/omni_vla/instruction", latched)
        self.estop = self.node.create_publisher(Bool, "/omni_vla/estop", latched)
        self.reset_estop = self.node.create_client(Trigger, "/omni_vla/reset_estop")
        self.resync = self.node.create_client(Trigger, "/omni_vla/resync_command")
        self.lifecycle = self.node.create_client(ChangeState, "/vla_node/change_state")
        self.ChangeState, self.Trigger = ChangeState, Trigger
        self.status: dict[str, Any] = {}
        self.safety: dict[str, Any] = {}
        self.diag: dict[str, dict[str, str]] = {}
        self.node.create_subscription(String, "/sim/status", lambda m: self.status.update(json.loads(m.data)), 10)
        self.safety_messages = 0
        self.node.create_subscription(String, "/omni_vla/safety_status", self._on_safety, 10)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.measured: tuple[list[str], list[float]] = ([], [])
        self.safe: list[float] = []
        self.node.create_subscription(JointState, "/joint_states",
                                      lambda m: setattr(self, "measured", (list(m.name), list(m.position))),
                                      qos_profile_sensor_data)
        # The supervisor's commands as the robot gets them, with arrival times, while an episode records them.
        self.commanded: list[tuple[float, list[float]]] | None = None
        self.node.create_subscription(Float64MultiArray, "/forward_position_controller/commands", self._on_command, 100)

    def _on_command(self, msg: Any) -> None:
        self.safe = list(msg.data)
        if self.commanded is not None:
            self.commanded.append((time.monotonic(), self.safe))

    def resync_command(self, timeout: float, tol: float = 1e-3) -> bool:
        """Have the supervisor move its command to the measured pose (its resync_command service) and wait until it
        is there: after a scene reset the robot stands at its new start pose (the frozen sim does not move) while the
        supervisor, which never follows a measurement on its own, still commands where the last episode stopped."""
        reply = self.call(self.resync, self.Trigger.Request())
        if not reply.success:
            raise RuntimeError(f"command re-sync refused: {reply.message}")
        end = time.monotonic() + timeout

        def there() -> bool:
            names, positions = self.measured
            return (bool(names and self.safe) and self.safety.get("state") == "hold"
                    and max(abs(a - b) for a, b in zip(self.safe, positions)) <= tol)
        if not self.spin_until(there, timeout):
            return False
        # Two status messages sent after it got there: the counts an episode starts from include what the limiter
        # did on the way (a status older than that would bill it to the episode).
        seen = self.safety_messages
        return self.spin_until(lambda: self.safety_messages >= seen + 2, max(0.5, end - time.monotonic()))

    def _on_safety(self, msg: Any) -> None:
        self.safety.update(json.loads(msg.data))
        self.safety_messages += 1

    def _on_diag(self, msg: Any) -> None:
        for st in msg.status:
            self.diag[st.name] = {kv.key: kv.value for kv in st.values} | {"_level": str(int.from_bytes(
                st.level, "little") if isinstance(st.level, bytes) else st.level), "_message": st.message}

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.ex.spin_once(timeout_sec=0.01)

    def spin_until(self, cond, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.ex.spin_once(timeout_sec=0.01)
            if cond():
                return True
        return False

    def call(self, client, request, timeout: float = 10.0) -> Any:
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {client.srv_name} not available")
        fut = client.call_async(request)
        self.spin_until(fut.done, timeout)
        if not fut.done():
            raise TimeoutError(f"service {client.srv_name} did not answer")
        return fut.result()

    def transition(self, transition_id: int) -> bool:
        req = self.ChangeState.Request()
        req.transition.id = transition_id
        return bool(self.call(self.lifecycle, req).success)

    def close(self) -> None:
        import rclpy  # optional: ROS; `demo --expert` runs without it

        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


def _vla_diag(probe: DemoProbe) -> dict[str, str]:
    return next((v for k, v in probe.diag.items() if "vla" in k.lower()), {})


def run_episode(probe: DemoProbe, task: str, seed: int, timeout: float) -> dict[str, Any]:
    from lifecycle_msgs.msg import Transition  # optional: ROS; `demo --expert` runs without it

    probe.estop.publish(probe.Bool(data=True))
    probe.spin_until(lambda: probe.safety.get("state") == "estop" and probe.safety.get("stopped"), 5)
    probe.transition(Transition.TRANSITION_DEACTIVATE)
    probe.episode.publish(probe.String(data=json.dumps({"task": task, "seed": seed, "frozen": True})))
    probe.spin_until(lambda: probe.status.get("seed") == seed and probe.status.get("frozen"), 10)
    probe.spin_for(0.3)
    probe.estop.publish(probe.Bool(data=False))
    probe.spin_for(0.2)
    reset = probe.call(probe.reset_estop, probe.Trigger.Request())
    if not reset.success:
        raise RuntimeError(f"e-stop reset refused: {reset.message}")
    if not probe.resync_command(timeout=10):
        raise RuntimeError("the supervisor's command did not reach the reset pose within 10 s")
    before = {k: dict(probe.safety.get(k, {})) for k in ("counts", "shaping", "clamps")}
    probe.instruction.publish(probe.String(data=probe.status["instruction"]))
    probe.episode.publish(probe.String(data=json.dumps({"start": True})))
    probe.commanded = []
    probe.transition(Transition.TRANSITION_ACTIVATE)
    t0 = time.monotonic()
    probe.spin_until(lambda: probe.status.get("done") and probe.status.get("seed") == seed, timeout)
    commanded, probe.commanded = probe.commanded, None
    delta = {k: {kind: n - before[k].get(kind, 0) for kind, n in probe.safety.get(k, {}).items()}
             for k in before}
    operator = {"estop", "estop_reset", "ignored_estop", "resync", "resync_done"}  # the demo's own reset between episodes
    return {"task": task, "seed": seed, "instruction": probe.status.get("instruction"),
            "success": bool(probe.status.get("success")), "steps": int(probe.status.get("step", 0)),
            "wall_s": round(time.monotonic() - t0, 2),
            "interventions": sum(n for kind, n in delta["counts"].items() if kind not in operator),
            "shaping": sum(delta["shaping"].values()), "clamps": sum(delta["clamps"].values()),
            "clamps_by_kind": {kind: n for kind, n in delta["clamps"].items() if n},
            "vla": dict(_vla_diag(probe)), **command_smoothness(commanded)}


def command_smoothness(commanded: list[tuple[float, list[float]]]) -> dict[str, float]:
    """Jerk of the supervisor's commands over the episode, at their mean arrival period (DDS delivers in bursts, so
    single gaps say little); nothing when too few arrived to take a third difference."""
    if len(commanded) < 4:
        return {}
    dt = (commanded[-1][0] - commanded[0][0]) / (len(commanded) - 1)
    out = smoothness(np.asarray([c for _, c in commanded]), dt, [])
    return {"jerk_mean": out["jerk_mean"], "jerk_p99": out["jerk_p99"]}


def loop_figures(diag: dict[str, str]) -> dict[str, float]:
    """vla_node's loop figures from its diagnostics strings; a key it did not publish is left out."""
    out = {}
    for key in LOOP_FIGURES:
        try:
            out[key] = float(diag[key])
        except (KeyError, ValueError):
            continue
    return out


def check_chunk_length(bundle: Path) -> None:
    """vla_node refuses at configure a chunk shorter than its execution horizon; say so before the graph starts
    (otherwise the demo only sees vla_node die)."""
    m = read_any_manifest(bundle)
    horizon = m.horizon if isinstance(m, BundleManifest) else m.action.chunk_length
    params = config_dir() / "vla_node.yaml"
    s = node_settings(params).execution_horizon  # 0: the bundle's own execute_steps, within its chunk
    if horizon < s:
        raise UsageError(f"--bundle {bundle}: chunks of {horizon} actions, shorter than vla_node's execution_horizon "
                         f"{s} ({params}); expected a bundle with chunks of >= {s} actions, or a lower execution_horizon")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla demo", description=__doc__)
    p.add_argument("--bundle", type=existing_bundle, default=DEFAULT_BUNDLE,
                   help="policy bundle, exported or imported (default: the shipped bundles/reference)")
    p.add_argument("--backend", default="mnn", choices=ROBOT_BACKENDS)
    p.add_argument("--episodes", type=positive_int, default=2, help="per task")
    p.add_argument("--tasks", nargs="+", default=sorted(TASKS), choices=sorted(TASKS), metavar="TASK",
                   help=f"one or more of {', '.join(sorted(TASKS))}")
    p.add_argument("--out", type=Path, default=Path("reports/demo"))
    p.add_argument("--expert", action="store_true", help="scripted experts only (no policy, no ROS)")
    args = p.parse_args(argv)
    if args.expert:
        return showcase(["--episodes", str(args.episodes), "--out", str(args.out / "expert")])
    if not (args.bundle / "manifest.json").is_file():  # the default bundle is missing from this checkout
        raise UsageError(f"--bundle {args.bundle}: not a policy bundle (no manifest.json); "
                         "pass an exported bundle, or --expert for the scripted experts")
    check_chunk_length(args.bundle)
    domain = claim_domain()
    overrides = {
        "vla_node": {"bundle_dir": str(args.bundle.resolve()), "backend": args.backend, "autostart": True},
    }
    episodes: list[dict[str, Any]] = []
    t_start = time.monotonic()
    with Bringup(domain_id=domain, overrides=overrides, log_dir=args.out / "logs") as graph:
        probe = DemoProbe(domain)
        try:
            ready = probe.spin_until(lambda: probe.status and probe.safety and _vla_diag(probe), 90)
            if not ready or graph.dead():
                raise RuntimeError(f"graph did not come up (dead: {graph.dead()}); see {args.out / 'logs'}")
            for task in args.tasks:
                for k in range(args.episodes):
                    ep = run_episode(probe, task, EVAL_SEED_BASE + k, timeout=TASKS[task].max_steps / 20 + 10)
                    episodes.append(ep)
                    print(f"[demo] {task:22s} seed {ep['seed']}  {'success' if ep['success'] else 'fail':7s} "
                          f"{ep['steps']:4d} ticks  interventions {ep['interventions']} (shaping {ep['shaping']}, "
                          f"clamps {ep['clamps']} {ep['clamps_by_kind'] or ''})", flush=True)
        finally:
            probe.close()
    codes = graph.procs and {n: p.returncode for n, p in graph.procs.items()}
    return _report(args, episodes, codes, time.monotonic() - t_start)


def _report(args: argparse.Namespace, episodes: list[dict[str, Any]], codes: dict, wall: float) -> int:
    results = [EpisodeResult(task=e["task"], seed=e["seed"], instruction=e["instruction"] or "", held_out=False,
                             success=e["success"], steps=e["steps"], interventions=e["interventions"],
                             shaping=e["shaping"], clamps=e["clamps"], clamps_by_kind=e["clamps_by_kind"],
                             jerk_mean=e.get("jerk_mean"), jerk_p99=e.get("jerk_p99"), loop=loop_figures(e["vla"]))
               for e in episodes]
    loop = {k: v for k, v in (episodes[-1]["vla"] if episodes else {}).items()}
    report = summarise(results, {"backend": args.backend, "bundle": str(args.bundle)},
                       {"episodes_per_task": args.episodes, "exit_codes": codes, "vla_diagnostics": loop}, wall)
    write_report(args.out, report, results, title="omni_vla demo (ROS graph, real time)")
    print("\n task                    success  shaping/ep  clamps/ep")
    for t, g in [*report["tasks"].items(), ("overall", report["overall"])]:
        print(f" {t:22s} {g['successes']}/{g['episodes']:<6d} {g['shaping_per_episode']:10.1f} {g['clamps_per_episode']:10.1f}")
    print(f" loop: {json.dumps(loop)}")
    print(f" report: {args.out / 'report.md'}   exit codes: {codes}")
    return 0 if all(c in (0, -2) for c in (codes or {}).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
