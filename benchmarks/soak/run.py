"""Does the launched graph hold over time: the real ROS 2 launch system (../shared/ros2_launch) runs sim.launch.py
from a colcon install space (a bundle of your choice), a probe gives the policy its instruction, and for `--minutes`
every process of the launch is sampled from /proc (RSS, open file descriptors) while both nodes' /diagnostics are
read; per window of `--window-s`: tick lateness (the worst p99 each node reported, and its latest max, beside a
machine probe's: probe.py), missed ticks, starved ticks, holds, the supervisor's clamps, RSS and fds per process.

    python benchmarks/soak/run.py --minutes 60 [--bundle DIR --backend mnn] [--install DIR] --out FILE
        [--param vla_node:rate_hz=2 ...] [--compare-reference]

`--param NODE:KEY=VALUE` sets a parameter in a copy of the install space's config directory (given to the launch as
`config_dir:=`), as a user would edit `config/<node>.yaml`. `--compare-reference` first runs the shipped reference
bundle as shipped (its parameter files, none of `--param`) for the same minutes, in the same command, and reports the
policy's p99 lateness over it.

Prints JSON: the windows, and a summary against the goals (RSS growth per hour per process from a least-squares
line over the samples after the first window, fd growth, p99 lateness of each window over the first's, missed
ticks, clamps). One episode runs throughout: the policy keeps acting after its task is done or failed.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

REPO = Path(__file__).resolve().parents[2]
RUN_LAUNCH = REPO / ".." / "shared" / "ros2_launch" / "run_launch.py"
SAMPLE_S = 5.0
NODES = ("sim_node", "vla_node", "safety_supervisor")


def _module(name: str, path: Path) -> Any:
    """A benchmark script beside this one, loaded by path (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


PROCSTATS = _module("soak_procstats", Path(__file__).with_name("procstats.py"))
proc_sample, slope_per_hour, machine_cpu, cpu_use = (PROCSTATS.proc_sample, PROCSTATS.slope_per_hour,
                                                      PROCSTATS.machine_cpu, PROCSTATS.cpu_use)


SHUTDOWN = _module("shutdown_bench", REPO / "benchmarks" / "shutdown" / "run.py")  # install build, census
PROBE = _module("soak_probe", Path(__file__).with_name("probe.py"))  # the machine's own lateness beside the graph
MACHINE = "machine_probe"


class Diagnostics(SHUTDOWN.ProbeNode):  # type: ignore[name-defined,misc]
    """The probe's view of the graph: the latest /diagnostics key/values of each node, and the policy's instruction."""

    def __init__(self, domain: int, instruction: str) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        super().__init__(domain, "soak_probe")
        self.lock = threading.Lock()
        self.latest: dict[str, dict[str, str]] = {}
        self.p99_max: dict[str, float] = {}
        self.late_max: dict[str, float] = {}
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.node.create_publisher(String, "/omni_vla/instruction", latched).publish(String(data=instruction))
        self.start()

    def _on_diag(self, msg: Any) -> None:
        with self.lock:
            for st in msg.status:
                node = "vla_node" if st.name.startswith("vla_node") else st.name
                values = {kv.key: kv.value for kv in st.values}
                self.latest[node] = values
                for key, worst in (("tick_lateness_p99_ms", self.p99_max), ("tick_lateness_max_ms", self.late_max)):
                    try:
                        late = float(values.get(key, "nan"))
                    except ValueError:
                        continue
                    if late == late:
                        worst[node] = max(worst.get(node, 0.0), late)

    def take_window(self) -> tuple[dict[str, dict[str, str]], dict[str, float], dict[str, float]]:
        """The latest values, and the worst p99 and max lateness each node reported since the last call."""
        with self.lock:
            latest, p99, worst = {k: dict(v) for k, v in self.latest.items()}, dict(self.p99_max), dict(self.late_max)
            self.p99_max.clear()
            self.late_max.clear()
        return latest, p99, worst


def _int(values: dict[str, str], key: str) -> int:
    try:
        return int(float(values.get(key, "0")))
    except ValueError:
        return 0


def _float(values: dict[str, str], key: str) -> float | None:
    try:
        return float(values[key])
    except (KeyError, ValueError):
        return None


def window_record(t: float, latest: dict[str, dict[str, str]], p99: dict[str, float],
                  procs: dict[str, list[tuple[float, float, int]]], since: float,
                  machine: dict[str, float] | None = None, worst: dict[str, float] | None = None) -> dict[str, Any]:
    """One window: `p99` and `worst` are the worst p99 and max each node reported in it, `machine` the probe's."""
    vla, sup = latest.get("vla_node", {}), latest.get("safety_supervisor", {})
    machine, worst = machine or {}, worst or {}
    return {"t_end_s": round(t, 1),
            "p99_lateness_ms": {n: round(v, 4) for n, v in {**p99, **({MACHINE: machine["p99"]} if "p99" in machine
                                                                     else {})}.items()},
            "max_lateness_ms": {**{n: worst.get(n, _float(latest.get(n, {}), "tick_lateness_max_ms"))
                                   for n in ("vla_node", "safety_supervisor")},
                                **({MACHINE: machine["max"]} if "max" in machine else {})},
            "vla": {k: _int(vla, k) for k in ("missed_ticks", "overruns", "starved_ticks", "holds", "commands",
                                               "worker_restarts", "clock_jumps_back")},
            "vla_delay": {k: _float(vla, k) for k in ("inference_latency_p95_ms", "delay_ticks", "delay_headroom_ticks")},
            "vla_state": vla.get("state", ""),
            "supervisor": {"missed_ticks": _int(sup, "missed_ticks"), "clamps_total": _int(sup, "clamps_total"),
                           "shaping_total": _int(sup, "shaping_total"), "ticks": _int(sup, "ticks"),
                           "interventions": {k.removeprefix("interventions/"): _int(sup, k) for k in sorted(sup)
                                             if k.startswith("interventions/")}},
            "supervisor_state": sup.get("state", ""),
            "rss_mib": {n: round(s[-1][1], 2) for n, s in procs.items() if s and s[-1][0] > since},
            "fds": {n: s[-1][2] for n, s in procs.items() if s and s[-1][0] > since}}


def over_probe(windows: list[dict[str, Any]]) -> dict[str, float]:
    """Each node's worst window over its first after dividing every window's p99 by the machine probe's in that
    window: how far the node drifted beyond what the machine itself did (None where a window lacks the probe)."""
    def rel(w: dict[str, Any], node: str) -> float | None:
        late = w["p99_lateness_ms"]
        return late[node] / late[MACHINE] if late.get(MACHINE, 0.0) > 0 and node in late else None
    out: dict[str, float] = {}
    for node in NODES[1:]:
        series = [rel(w, node) for w in windows]
        if series and None not in series and series[0] > 0:
            out[node] = round(max(series) / series[0], 3)  # type: ignore[type-var,operator]
    return out


def summarise(windows: list[dict[str, Any]], procs: dict[str, list[tuple[float, float, int]]],
              window_s: float) -> dict[str, Any]:
    first = windows[0]["p99_lateness_ms"] if windows else {}
    ratio = {n: round(max(w["p99_lateness_ms"].get(n, 0.0) for w in windows) / first[n], 3)
             for n in first if first[n] > 0}
    last = windows[-1] if windows else {}
    return {
        "windows": len(windows),
        "rss_growth_mib_per_h": {n: slope_per_hour(s, 1, window_s) for n, s in procs.items()},
        "fd_growth": {n: (s[-1][2] - s[0][2]) if s else None for n, s in procs.items()},
        "fd_growth_after_first_window": {n: (s[-1][2] - next((x[2] for x in s if x[0] >= window_s), s[-1][2]))
                                         for n, s in procs.items() if s},
        "p99_lateness_worst_window_over_first": ratio,
        "p99_over_machine_probe_worst_window_over_first": over_probe(windows),
        "vla_missed_ticks": last.get("vla", {}).get("missed_ticks"),
        "supervisor_missed_ticks": last.get("supervisor", {}).get("missed_ticks"),
        "supervisor_clamps_total": last.get("supervisor", {}).get("clamps_total"),
        "vla_starved_ticks": last.get("vla", {}).get("starved_ticks"),
        "vla_worker_restarts": last.get("vla", {}).get("worker_restarts"),
    }


def soak(install: Path, workdir: Path, minutes: float, window_s: float, launch_args: list[str],
         instruction: str, checkpoint: Callable[[dict[str, Any]], None] = lambda report: None) -> dict[str, Any]:
    """One launched graph for `minutes`; `checkpoint` gets the report so far after every window (`"partial": true`),
    so a soak stopped early keeps what it measured."""
    shutdown = SHUTDOWN
    env, domain, launch_file = shutdown.launch_env(install)
    proc = subprocess.Popen([sys.executable, str(RUN_LAUNCH.resolve()), str(launch_file), *launch_args], cwd=workdir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=shutdown.default_stop_signals)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    diags = Diagnostics(domain, instruction)
    try:
        probe = PROBE.Probe(env)
    except BaseException:
        diags.close()
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    procs: dict[str, list[tuple[float, float, int]]] = {}
    windows: list[dict[str, Any]] = []
    t0 = time.monotonic()

    def report(partial: bool) -> dict[str, Any]:
        out = "".join(lines)
        return {"minutes": minutes, "window_s": window_s, "launch_args": launch_args, "sample_s": SAMPLE_S,
                "graph_exited_early": proc.returncode is not None and time.monotonic() - t0 < 60.0 * minutes,
                "traceback": "Traceback" in out, "summary": summarise(windows, procs, window_s), "windows": windows,
                "samples": {n: s for n, s in procs.items()}, "log_tail": out[-3000:], "partial": partial,
                "machine_probe": {"scheduling": probe.status, "exit_code": probe.proc.returncode}}
    try:
        while time.monotonic() - t0 < 60.0 and "vla_node" not in diags.latest:
            time.sleep(0.5)
        t0 = time.monotonic()  # the soak's clock starts with the graph up
        diags.take_window()
        probe.take_window()
        next_window = window_s
        cpu_mark, t_mark = machine_cpu(), 0.0
        while (t := time.monotonic() - t0) < 60.0 * minutes and proc.poll() is None:
            started = {m.group(1): int(m.group(2)) for ln in list(lines) if (m := shutdown.STARTED.search(ln))}
            names = {pid: name for name, pid in started.items()}
            for name, pid in shutdown.session_processes(proc.pid, names).items():
                s = proc_sample(pid)
                if s is not None:
                    procs.setdefault(name, []).append((round(t, 1), *s))
            if t >= next_window:
                latest, p99, worst = diags.take_window()
                windows.append(window_record(t, latest, p99, procs, t - SAMPLE_S * 1.5, probe.take_window(), worst))
                cpu_now = machine_cpu()
                windows[-1]["machine"] = cpu_use(cpu_mark, cpu_now, t - t_mark)
                cpu_mark, t_mark = cpu_now, t
                print(json.dumps(windows[-1]), file=sys.stderr)
                checkpoint(report(True))
                next_window += window_s
            time.sleep(SAMPLE_S)
        if len(windows) == 0 or windows[-1]["t_end_s"] < time.monotonic() - t0 - window_s / 2:
            latest, p99, worst = diags.take_window()
            windows.append(window_record(time.monotonic() - t0, latest, p99, procs, 0.0, probe.take_window(), worst))
    finally:
        diags.close()
        probe.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        reader.join(5)
    return report(False)


def node_param(text: str) -> tuple[str, str, Any]:
    """`NODE:KEY=VALUE` (the value read as YAML, as in a parameter file)."""
    node, _, rest = text.partition(":")
    key, sep, value = rest.partition("=")
    if not sep or not node.strip() or not key.strip():
        raise argparse.ArgumentTypeError(f"--param {text!r}: expected NODE:KEY=VALUE, e.g. vla_node:rate_hz=2")
    return node.strip(), key.strip(), yaml.safe_load(value)


def config_dir(install: Path, dest: Path, params: list[tuple[str, str, Any]]) -> Path:
    """A copy of the install space's config directory with `params` set in each node's parameter file."""
    share = install / "share" / "omni_vla" / "config"
    shutil.copytree(share, dest)
    for node, key, value in params:
        path = dest / f"{node}.yaml"
        if not path.is_file():
            raise SystemExit(f"--param {node}:{key}: no parameter file {node}.yaml in {share}")
        doc = yaml.safe_load(path.read_text())
        doc[node]["ros__parameters"][key] = value
        path.write_text(yaml.safe_dump(doc))
    return dest


def ratios(policy: dict[str, Any], reference: dict[str, Any]) -> dict[str, float | None]:
    """Each node's worst-window p99 tick lateness under the policy over the reference bundle's, same command."""
    def worst(report: dict[str, Any], node: str) -> float:
        return max((w["p99_lateness_ms"].get(node, 0.0) for w in report["windows"]), default=0.0)
    return {f"{n}_p99_lateness": (round(worst(policy, n) / worst(reference, n), 3) if worst(reference, n) > 0 else None)
            for n in ("vla_node", "safety_supervisor")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="how long the graph runs (from when it is up)")
    ap.add_argument("--window-s", type=float, default=600.0, help="the reporting window (s)")
    ap.add_argument("--bundle", type=Path, help="bundle_dir for vla_node (default: the launch file's)")
    ap.add_argument("--backend", help="vla_node's backend (default: the launch file's)")
    ap.add_argument("--instruction", default="pick up the red cube")
    ap.add_argument("--install", type=Path, help="colcon install space (install/omni_vla); default: build one")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--param", type=node_param, action="append", default=[], metavar="NODE:KEY=VALUE",
                    help="a node parameter for this run (repeatable), e.g. vla_node:strategy=rtc")
    ap.add_argument("--compare-reference", action="store_true",
                    help="first run the shipped reference bundle the same way; report the ratios of p99 lateness")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.window_s < 2 * SAMPLE_S:
        print(f"--minutes {args.minutes} / --window-s {args.window_s}: expected minutes > 0 and a window of at least "
              f"{2 * SAMPLE_S:g} s", file=sys.stderr)
        return 2
    if not RUN_LAUNCH.is_file():
        print(f"no real ROS 2 launch system at {RUN_LAUNCH.resolve()}", file=sys.stderr)
        return 2
    launch_args = ([f"bundle_dir:={args.bundle.resolve()}"] if args.bundle else []) + \
        ([f"backend:={args.backend}"] if args.backend else [])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="soak_bench_") as tmp:
        install = args.install.resolve() if args.install else SHUTDOWN.build_install(Path(tmp) / "ws")
        workdir = Path(tmp) / "elsewhere"
        workdir.mkdir()
        if args.param:
            launch_args.append(f"config_dir:={config_dir(install, Path(tmp) / 'config', args.param)}")
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        extra = {"params": [f"{n}:{k}={v}" for n, k, v in args.param], "commit": commit.stdout.strip(),
                 "cpus": os.cpu_count()}

        def save(report: dict[str, Any]) -> dict[str, Any]:
            report = {**report, **extra}
            if args.out:
                from omni_vla.runtime.bundle import write_json_atomic
                args.out.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(args.out, report)
            return report

        reference: dict[str, Any] | None = None
        if args.compare_reference:  # as shipped: its own parameter files and backend, only the bundle named
            ref_args = ["bundle_dir:=bundles/reference"]
            reference = soak(install, workdir, args.minutes, args.window_s, ref_args, args.instruction,
                             lambda ref: save({"partial": True, "windows": [], "reference": ref}))
            extra["reference"] = reference

        def with_ratios(report: dict[str, Any]) -> dict[str, Any]:
            if reference is None or not report["windows"]:
                return report
            r = ratios(report, reference)
            return {**report, "ratios": r, "summary": {**report["summary"], "ratios_to_reference": r}}

        policy = soak(install, workdir, args.minutes, args.window_s, launch_args, args.instruction,
                      lambda rep: save(with_ratios(rep)))
        report = save(with_ratios(policy))
    print(json.dumps(report["summary"], indent=1))
    return 0 if not report["graph_exited_early"] else 1


if __name__ == "__main__":
    sys.exit(main())
