"""How fast the launched graph stops: the real ROS 2 launch system (../shared/ros2_launch) runs sim.launch.py from a
colcon install space, a probe gives the policy an instruction and waits until safe commands follow its proposals,
then the graph is stopped and every node process is watched until it is gone.

    python benchmarks/shutdown/run.py --runs 20 [--stop ctrl-c,sigterm] [--burners 2] [--install DIR] [--out FILE]

Stops (`--stop`):
  ctrl-c   SIGINT to the launch's process group, as a terminal's Ctrl-C sends it (launch does not forward it)
  sigterm  SIGTERM to the process group, as systemd stops a unit (KillMode=control-group)
  launch   SIGINT to the launch process alone, run non-interactive (`ros2 launch --noninteractive`): launch
           forwards SIGINT to each node itself

Prints JSON: per stop kind, every run's per-process exit time (s after the signal, from /proc), exit codes, the
launch's own exit code and whether launch escalated ("failed to terminate"); then max, p50 and counts.
Without --install it builds one (colcon, like tests/support/launch_graph.py) in a temporary directory.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from omni_vla.tools.domains import claim_domain, lock_fds

REPO = Path(__file__).resolve().parents[2]
RUN_LAUNCH = REPO / ".." / "shared" / "ros2_launch" / "run_launch.py"
NODES = ("sim_node", "vla_node", "safety_supervisor")
STOPS = ("ctrl-c", "sigterm", "launch")
BUDGET_S = 2.0  # every node process gone this long after the stop
UP_BUDGET_S = 40.0  # launch start -> safe commands after the policy's proposals, on a loaded machine
INSTRUCTION = "pick up the red cube"
STARTED = re.compile(r"\[INFO\] \[(\w+)-\d+\]: process started with pid \[(\d+)\]")
FINISHED = re.compile(r"\[(\w+)-\d+\]: process has finished cleanly")
DIED = re.compile(r"\[(\w+)-\d+\]: process has died \[pid \d+, exit code (-?\d+)")
ESCALATION = "failed to terminate"
AT_REST = re.compile(r"stopping: command at rest after (\d+\.\d+) s")
SAFE_TOPIC = "/forward_position_controller/commands"
# run_launch.py's LaunchService, non-interactive: on SIGINT launch itself sends SIGINT to every node.
NONINTERACTIVE = """import sys
sys.path.insert(0, sys.argv[1])
from launch import LaunchDescription, LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
service = LaunchService(argv=[], noninteractive=True)
service.include_launch_description(LaunchDescription([IncludeLaunchDescription(PythonLaunchDescriptionSource(sys.argv[2]))]))
sys.exit(service.run())
"""


def build_install(dest: Path) -> Path:
    """A colcon install space of this checkout (what a robot runs after `colcon build`)."""
    src = dest / "src" / "omni_vla"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", "data", "reports", "results", "runs", "build", "install", "log", "__pycache__", "*.egg-info",
        ".pytest_cache"))
    colcon = Path(sys.executable).parent / "colcon"
    done = subprocess.run([str(colcon), "build", "--packages-select", "omni_vla"], cwd=dest, capture_output=True,
                          text=True, env={**os.environ, "COLCON_HOME": str(dest / "colcon_home")}, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"colcon build failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return dest / "install" / "omni_vla"


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, session id) of `pid`, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1]), int(fields[3])


def session_processes(sid: int, names: dict[int, str]) -> dict[str, int]:
    """Every live process of session `sid` (the launch and everything it started, their children too) by name:
    launch's own names for its nodes, the others by what they run and whose child they are."""
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        stat = _stat(pid)
        if stat is None or stat[2] != sid or stat[0] == "Z":
            continue
        if pid == sid:
            found["launch"] = pid
        elif pid in names:
            found[names[pid]] = pid
        else:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            kind = ("resource_tracker" if "resource_tracker" in cmd else
                    "inference_worker" if "multiprocessing.spawn" in cmd else Path(cmd.split(" ")[0]).name)
            found[f"{names.get(stat[1], stat[1])}/{kind}"] = pid
    return found


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Orphans of the launch (nodes still running when launch itself exits, as on SIGTERM) become this process's
    children while inside, so their exit codes can be read (prctl PR_SET_CHILD_SUBREAPER)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(36, 1, 0, 0, 0)
    try:
        yield
    finally:
        prctl(36, 0, 0, 0, 0)


def _exited(pid: int) -> tuple[bool, int | None]:
    """(gone, exit code when this process reaped it): a zombie still waiting for its live parent counts as gone."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        stat = _stat(pid)
        return stat is None or stat[0] == "Z", None
    if got == 0:
        return False, None
    return True, os.waitstatus_to_exitcode(status)


class Burners:
    """`n` processes spinning on the CPU (a loaded robot computer)."""

    def __init__(self, n: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


class ProbeNode:
    """A ROS node on the launch's domain, spun in its own thread until `close` (subclasses subscribe in __init__, then
    call `start`)."""

    def __init__(self, domain: int, name: str) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor

        self.ctx = Context()
        rclpy.init(context=self.ctx, domain_id=domain)
        self.node = rclpy.create_node(f"{name}_{os.getpid()}", context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set() and self.ctx.ok():
            self.ex.spin_once(timeout_sec=0.01)

    def close(self) -> None:
        import rclpy

        self._stop.set()
        self._thread.join(5)
        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


class Probe(ProbeNode):
    """Gives the policy its instruction, notes when safe commands follow proposals, and records every safe command
    (arrival time, values) through the stop."""

    def __init__(self, domain: int) -> None:
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Float64MultiArray, String
        from trajectory_msgs.msg import JointTrajectory

        super().__init__(domain, "shutdown_probe")
        self.t0 = time.monotonic()
        self.seen: dict[str, float] = {}
        self.commands: list[tuple[float, list[float]]] = []
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.node.create_subscription(JointTrajectory, "/omni_vla/proposed_command",
                                      lambda m: self.seen.setdefault("proposed", time.monotonic() - self.t0), reliable)
        self.node.create_subscription(Float64MultiArray, SAFE_TOPIC, self._on_safe, reliable)
        self.node.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=INSTRUCTION))
        self.start()

    def _on_safe(self, msg: Any) -> None:
        now = time.monotonic()
        self.commands.append((now, list(msg.data)))
        if "proposed" in self.seen:
            self.seen.setdefault("safe_after_proposal", now - self.t0)

    def wait_until_up(self, proc: subprocess.Popen, budget_s: float) -> bool:
        """Safe commands after the policy's proposals within `budget_s`, then a second of motion."""
        while time.monotonic() - self.t0 < budget_s and proc.poll() is None and "safe_after_proposal" not in self.seen:
            time.sleep(0.02)
        time.sleep(1.0)
        return "safe_after_proposal" in self.seen


def last_commands(commands: list[tuple[float, list[float]]], t_sig: float) -> dict[str, Any]:
    """What the controller was left with: commands after the stop, and whether the last one repeats the one before
    (the command at rest: a controller keeping it holds the arm still)."""
    after = [c for t, c in commands if t >= t_sig]
    last_two = [c for _, c in commands[-2:]]
    held = len(last_two) == 2 and max(abs(a - b) for a, b in zip(*last_two)) <= 1e-9
    moving_at_stop = False
    before = [c for t, c in commands if t < t_sig][-2:]
    if len(before) == 2:
        moving_at_stop = max(abs(a - b) for a, b in zip(*before)) > 1e-9
    return {"after_stop": len(after), "held": held, "moving_at_stop": moving_at_stop}


def _stacks(pid: int) -> str:
    """Native stacks of every thread of a process that outlived the budget (gdb), to see where it waits."""
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 25"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"gdb: {exc}"
    return "\n".join(ln for ln in out.stdout.splitlines() if ln.startswith(("#", "Thread")))[-12000:]


def launch_env(install: Path) -> tuple[dict[str, str], int, Path]:
    """The environment a shell with the install space sourced gives `ros2 launch` (on a fresh domain), the domain,
    and sim.launch.py in the install space."""
    site = next(install.glob("lib/python3*/site-packages"))
    domain = claim_domain()
    env = {**os.environ, "AMENT_PREFIX_PATH": str(install), "PYTHONPATH": str(site), "ROS_DOMAIN_ID": str(domain),
           "PYTHONUNBUFFERED": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    return env, domain, install / "share" / "omni_vla" / "launch" / "sim.launch.py"


def default_stop_signals() -> None:
    """In the launch's process, before exec: SIGINT and SIGTERM as a terminal's would be. A harness started in a
    shell's background (a CI script under `&`, nohup) ignores SIGINT, launch would inherit that and never stop."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_once(install: Path, stop: str, workdir: Path, diagnose: bool = False) -> dict[str, Any]:
    """Launch sim.launch.py, wait for the graph, stop it as `stop` says; what every process did and when."""
    env, domain, launch_file = launch_env(install)
    cmd = [sys.executable, str(RUN_LAUNCH.resolve()), str(launch_file)]
    if stop == "launch":
        cmd = [sys.executable, "-c", NONINTERACTIVE, str(RUN_LAUNCH.resolve().parent / "site"), str(launch_file)]
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=default_stop_signals, pass_fds=lock_fds(domain))
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), ln) for ln in proc.stdout), daemon=True)
    reader.start()
    result: dict[str, Any] = {"stop": stop}
    probe = Probe(domain)
    t_sig = time.monotonic()
    try:
        up = probe.wait_until_up(proc, UP_BUDGET_S)
        result["up_s"] = probe.seen.get("safe_after_proposal")
        pids = {m.group(1): int(m.group(2)) for _, ln in list(lines) if (m := STARTED.search(ln))}
        result["graph_up"] = up and set(NODES) <= pids.keys()
        names = {pid: name for name, pid in pids.items()}
        watch = session_processes(proc.pid, names)  # the inference worker and its helpers too
        t_sig = time.monotonic()
        if stop == "launch":
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGINT if stop == "ctrl-c" else signal.SIGTERM)
        gone: dict[str, float] = {}
        codes: dict[str, int] = {}
        deadline = t_sig + 15.0
        while len(gone) < len(watch) and time.monotonic() < deadline:
            now = time.monotonic()
            for name, pid in watch.items():
                if name in gone:
                    continue
                if pid == proc.pid:
                    done, code = proc.poll() is not None, proc.returncode
                else:
                    done, code = _exited(pid)
                if done:
                    gone[name] = round(now - t_sig, 4)
                    if code is not None:
                        codes[name] = code
            if diagnose and now - t_sig > BUDGET_S + 0.5 and "stacks" not in result:
                result["stacks"] = {n: _stacks(pid) for n, pid in watch.items() if n not in gone}
            time.sleep(0.002)
        result["exit_s"] = gone
        result["still_running"] = sorted(set(watch) - set(gone))
        time.sleep(0.2)  # the last commands in flight
    finally:
        probe.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join(5)
    out = "".join(ln for _, ln in lines)
    logged = {**{m.group(1): 0 for m in FINISHED.finditer(out)}, **{m.group(1): int(m.group(2)) for m in DIED.finditer(out)}}
    result["exit_codes"] = {**logged, **codes, "launch": proc.returncode}
    result["commands"] = last_commands(probe.commands, t_sig)
    rest = AT_REST.search(out)
    result["supervisor_at_rest_s"] = float(rest.group(1)) if rest else None
    result["escalated"] = ESCALATION in out
    result["traceback"] = "Traceback" in out
    result["log_tail"] = "" if _ok(result) else out[-3000:]
    return result


def _ok(run: dict[str, Any]) -> bool:
    """The graph was up and commanding when stopped (a stop during start-up proves less), every process of the launch
    gone within the budget, every node's exit code 0, launch never escalated, the last safe command a hold."""
    return (run["graph_up"] and set(NODES) <= run["exit_s"].keys() and not run["still_running"] and not run["escalated"]
            and not run["traceback"]
            and all(t <= BUDGET_S for t in run["exit_s"].values())
            and all(run["exit_codes"].get(n) == 0 for n in NODES) and run["commands"]["held"])


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({n for r in runs for n in r["exit_s"]})
    per = {n: [r["exit_s"][n] for r in runs if n in r["exit_s"]] for n in names}
    worst = [max(r["exit_s"].values()) for r in runs if r["exit_s"]]
    return {"runs": len(runs), "ok": sum(_ok(r) for r in runs), "escalations": sum(r["escalated"] for r in runs),
            "graph_up": sum(r["graph_up"] for r in runs),
            "held": sum(r["commands"]["held"] for r in runs),
            "moving_at_stop": sum(r["commands"]["moving_at_stop"] for r in runs),
            "supervisor_at_rest_max_s": max((r["supervisor_at_rest_s"] for r in runs
                                             if r["supervisor_at_rest_s"] is not None), default=None),
            "within_budget": sum(not r["still_running"] and max(r["exit_s"].values()) <= BUDGET_S for r in runs),
            "max_exit_s": max(worst) if worst else None,
            "per_process_max_s": {n: max(v) for n, v in per.items()},
            "per_process_median_s": {n: round(statistics.median(v), 4) for n, v in per.items()},
            "exit_codes": {n: sorted({r["exit_codes"][n] for r in runs if n in r["exit_codes"]})
                           for n in sorted({n for r in runs for n in r["exit_codes"]})}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per stop kind")
    ap.add_argument("--stop", default="ctrl-c,sigterm", help=f"comma-separated, of {', '.join(STOPS)}")
    ap.add_argument("--burners", type=int, default=2, help="CPU-burning processes beside the graph (load)")
    ap.add_argument("--install", type=Path, help="colcon install space (install/omni_vla); default: build one")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--diagnose", action="store_true", help="native stacks (gdb) of processes that outlive the budget")
    args = ap.parse_args(argv)
    stops = [s.strip() for s in args.stop.split(",") if s.strip()]
    bad = [s for s in stops if s not in STOPS]
    if bad or args.runs < 1:
        print(f"--stop {args.stop!r} / --runs {args.runs}: expected kinds from {STOPS} and runs >= 1", file=sys.stderr)
        return 2
    if not RUN_LAUNCH.is_file():
        print(f"no real ROS 2 launch system at {RUN_LAUNCH.resolve()}", file=sys.stderr)
        return 2
    # Started in a shell's background, this process ignores SIGINT, and launch would inherit that and never see it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a killed benchmark still stops its burners (finally)
    with tempfile.TemporaryDirectory(prefix="shutdown_bench_") as tmp:
        install = args.install.resolve() if args.install else build_install(Path(tmp) / "ws")
        workdir = Path(tmp) / "elsewhere"
        workdir.mkdir()
        burners = Burners(args.burners)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        report: dict[str, Any] = {"budget_s": BUDGET_S, "burners": args.burners, "cpus": os.cpu_count(),
                                  "commit": commit.stdout.strip(), "stops": {}}
        try:
            for stop in stops:
                runs = []
                for i in range(args.runs):
                    with subreaper():
                        run = run_once(install, stop, workdir, args.diagnose)
                    runs.append(run)
                    print(f"{stop} {i + 1}/{args.runs}: {json.dumps(run['exit_s'])} codes {run['exit_codes']} "
                          f"escalated {run['escalated']}", file=sys.stderr)
                report["stops"][stop] = {"summary": summarise(runs), "runs": runs}
        finally:
            burners.close()
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
