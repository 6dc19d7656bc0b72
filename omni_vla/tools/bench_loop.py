"""Benchmark of the real-time loop: tick lateness, missed ticks, heap growth and cold start per backend.

The loop runs exactly as in vla_node minus ROS: a Scheduler on the monotonic clock calls
Controller.step on an ObservationStore while a feeder thread writes camera frames (30 Hz, 128x128
RGB) and joint states (100 Hz) into it like the subscriber callbacks do, and the policy runs in its
worker process. execution_horizon=1 by default, so a new chunk is requested on every tick at which
the worker is free: inference runs for the whole measurement. The loop thread runs under SCHED_FIFO
50 like vla_node's default, the feeder at 49 like its executor (--rt-priority 0 for normal scheduling;
"scheduling" and "feeder_scheduling" in the JSON say which one really applied).

    python -m omni_vla.tools.bench_loop --bundle bundles/reference --json [--ticks 10000] [--backends mnn,executorch]

Prints {"<backend>@<rate>": {...}, "<backend>": <its 50 Hz entry>, "settings": {...}}. Heap growth
is measured separately (tracemalloc slows every allocation) over --heap-ticks ticks after warm-up;
cold start is a fresh process's time from its start to its first command.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.cloud import ReplanConfig, Replanner
from omni_vla.core.assembly import build_loop
from omni_vla.core.chunking import STRATEGIES
from omni_vla.core.loop import Scheduler, set_realtime_priority, threads_priority_below
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import open_runtime
from omni_vla.inference.worker import ProcessInference
from omni_vla.tools.errors import non_negative_float, non_negative_int, positive_int

WARMUP_TICKS = 200


HOME = (0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04)  # the sim's home pose (sim/robot.py HOME_QPOS)


def _factory(spec: str | None) -> Any:
    if not spec:
        return open_runtime
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _feeder(store: Any, stop: threading.Event, size: int, dof: int, priority: int, status: list[str]) -> None:
    """Camera frames at 30 Hz and joint states at 100 Hz, as ROS callbacks would deliver them; `priority` > 0:
    under SCHED_FIFO there, as vla_node's executor runs just below its loop thread (what applied goes to `status`)."""
    status.append(set_realtime_priority(priority) if priority > 0 else "normal")
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (size, size, 3), dtype=np.uint8) for _ in range(4)]
    names = list(store.joint_names)
    # A pose inside the Panda's limits (all zeros is not: joint 4 spans [-3.07, -0.07]); serve-openpi refuses others.
    pos = list(HOME)[:dof] if dof <= len(HOME) else [0.0] * dof
    i = 0
    while not stop.is_set():
        if i % 3 == 0:
            store.put_image("front", frames[i % 4], "rgb8")
            store.put_image("wrist", frames[(i + 1) % 4], "bgr8")
        store.put_joints(names, pos, pos)
        i += 1
        time.sleep(0.01)


class LoopRig:
    """The node's assembled loop (build_loop) over a worker process, fed like the subscriber callbacks."""

    def __init__(self, args: argparse.Namespace, backend: str, rate_hz: float, cloud_url: str | None = None,
                 network: str = "process") -> None:
        inference = ProcessInference(backend, args.bundle, args.threads, factory=_factory(args.runtime_factory),
                                     timeout_s=2.0).start()
        try:
            settings = LoopSettings(rate_hz=rate_hz, strategy=args.strategy, execution_horizon=args.execution_horizon,
                                    joint_names=list(inference.joint_names or LoopSettings().joint_names)[: inference.action_dim])
            replanner = _cloud_replanner(cloud_url, rate_hz, args.replan_cadence, network) if cloud_url else None
            self.loop = build_loop(settings, inference, replanner=replanner)
        except BaseException:
            inference.close()  # a worker process left running keeps the benchmark from ever exiting
            raise
        self.inference, self.controller, self.store = inference, self.loop.controller, self.loop.store
        self.store.set_instruction(args.instruction)
        self._stop = threading.Event()
        self.feeder_scheduling: list[str] = []
        self._feed = threading.Thread(target=_feeder, args=(self.store, self._stop, 128, inference.action_dim,
                                                            threads_priority_below(getattr(args, "rt_priority", 0)),
                                                            self.feeder_scheduling), daemon=True)
        self._feed.start()
        while self.store.obs["wrist"] is None or self.store.obs["qpos"] is None:
            time.sleep(0.005)

    @property
    def commands(self) -> int:
        return self.loop.commands

    def tick(self, k: int, t: float) -> None:
        self.loop.tick(k, t)

    def close(self) -> None:
        self._stop.set()
        self._feed.join(1.0)
        self.loop.close()


def _cloud_replanner(url: str, rate_hz: float, cadence_s: float, network: str) -> Any:
    """A Replanner asking `url` for a plan every `cadence_s` (the only trigger), as vla_node would."""
    cfg = ReplanConfig.model_validate({
        "enabled": True, "rate_hz": rate_hz, "max_plan_age_s": 2.0, "client": {"uri": url}, "network": network,
        "triggers": {"cadence_s": cadence_s, "stall_window_s": 0, "intervention_count": 0,
                     "on_instruction_change": False, "min_interval_s": 0},
    })
    return Replanner(cfg).start()


def start_cloud(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    """`omni-vla serve-openpi` with the bundle policy and injected latency, in its own process."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "omni_vla_sim.openpi_server", "--policy", "bundle", "--bundle-dir", str(args.bundle),
           "--port", str(port), "--latency-ms", str(args.cloud_latency_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": _pythonpath()})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return proc, f"ws://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"serve-openpi did not come up on port {port}")


def bench_rate(args: argparse.Namespace, backend: str, rate_hz: float, cloud_url: str | None = None,
               network: str = "process") -> dict[str, Any]:
    rig = LoopRig(args, backend, rate_hz, cloud_url, network)
    try:
        sched = Scheduler(rate_hz, rig.tick, rt_priority=args.rt_priority)
        sched.run(max_ticks=WARMUP_TICKS)
        sched.stats.reset()
        rig.loop.commands = 0
        c0 = dict(rig.controller.counts)
        t0 = time.perf_counter()
        sched.run(max_ticks=args.ticks)
        wall = time.perf_counter() - t0
        out: dict[str, Any] = {"rate_hz": rate_hz, **sched.stats.summary()}
        out["_lateness_ms"] = 1e3 * sched.stats.lateness_s()  # merged over rounds by _run, then dropped
        counts = {k: rig.controller.counts[k] - c0[k] for k in c0}
        out.update(
            commands=rig.commands, inference_requests=counts["requests"], chunks=counts["chunks"],
            holds=counts["holds"], starved_ticks=counts["starved_ticks"],
            inference_latency_ms=rig.controller.latency_summary(), worker_restarts=rig.inference.restarts,
            wall_s=round(wall, 3), final_state=f"{rig.controller.state}: {rig.controller.reason}",
            scheduling=sched.rt_status, feeder_scheduling="; ".join(rig.feeder_scheduling),
        )
        if rig.loop.replanner is not None:
            st = rig.loop.replanner.status()
            out["cloud"] = {"network": network, "plans_spliced": counts["cloud_plans"], "connected": st["connected"],
                            **{k: st[k] for k in ("requests", "replies", "plans", "rejected", "expired", "timeouts")}}
        out["heap_growth_bytes"] = heap_growth(sched, args.heap_ticks)
        return out
    finally:
        rig.close()


def merge_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry from several rounds: percentiles over all their ticks, counts summed, worst max."""
    late = np.concatenate([r.pop("_lateness_ms") for r in runs])
    out = dict(runs[-1])
    out.update(ticks=sum(r["ticks"] for r in runs), missed_ticks=sum(r["missed_ticks"] for r in runs),
               overruns=sum(r["overruns"] for r in runs), max_lateness_ms=max(r["max_lateness_ms"] for r in runs),
               p50_lateness_ms=float(np.percentile(late, 50)), p99_lateness_ms=float(np.percentile(late, 99)),
               heap_growth_bytes=max(r["heap_growth_bytes"] for r in runs), rounds=len(runs))
    for key in ("commands", "inference_requests", "chunks", "holds", "starved_ticks", "worker_restarts"):
        out[key] = sum(r[key] for r in runs)
    if "cloud" in out:
        out["cloud"] = {k: (sum(r["cloud"][k] for r in runs) if isinstance(v, int) and not isinstance(v, bool) else v)
                        for k, v in out["cloud"].items()}
    if len(runs) > 1:
        out["p99_lateness_ms_per_round"] = [round(r["p99_lateness_ms"], 4) for r in runs]
    return out


def heap_growth(sched: Any, ticks: int) -> int:
    """Bytes still allocated after `ticks` more ticks (Python heap, all threads, tracemalloc)."""
    sched.run(max_ticks=sched.stats.ticks + 100)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sched.run(max_ticks=sched.stats.ticks + ticks)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def cold_start(args: argparse.Namespace, backend: str) -> float:
    """Seconds from launching a fresh Python process to its first command."""
    cmd = [sys.executable, "-m", "omni_vla.tools.bench_loop", "--probe-cold-start", "--backends", backend,
           "--bundle", str(args.bundle), "--threads", str(args.threads), "--instruction", args.instruction]
    if args.runtime_factory:
        cmd += ["--runtime-factory", args.runtime_factory]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": _pythonpath()})
    if res.returncode != 0:
        raise RuntimeError(f"cold-start probe failed: {res.stderr.strip()[-2000:]}")
    stamp = [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("FIRST_COMMAND_PERF_COUNTER ")]
    if not stamp:
        raise RuntimeError(f"cold-start probe printed no stamp: {res.stdout[-500:]!r}")
    return round(float(stamp[0]) - t0, 3)


def _pythonpath() -> str:
    extra = [p for p in sys.path if p and Path(p).is_dir()]
    return os.pathsep.join(extra)


def probe_cold_start(args: argparse.Namespace) -> int:
    """In the fresh process: start everything, tick until the first command, print perf_counter."""
    backend = args.backends.split(",")[0]
    rig = LoopRig(args, backend, 50.0)
    first: list[float] = []

    def tick(k: int, t: float) -> None:
        rig.tick(k, t)
        if rig.commands and not first:
            first.append(time.perf_counter())
            sched.stop()

    sched = Scheduler(50.0, tick)
    try:
        sched.run(max_ticks=500)
    finally:
        rig.close()
    if not first:
        print(f"no command within 500 ticks: {rig.controller.state}: {rig.controller.reason}", file=sys.stderr)
        return 1
    print(f"FIRST_COMMAND_PERF_COUNTER {first[0]:.6f}", flush=True)
    return 0


def _rates(text: str) -> str:
    """argparse type: a comma list of loop rates in Hz within what LoopSettings accepts, kept as text."""
    top = next(m.le for m in LoopSettings.model_fields["rate_hz"].metadata if hasattr(m, "le"))
    for part in text.split(","):
        try:
            ok = 0 < float(part) <= top
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"expected a comma list of rates in Hz > 0 and <= {top:g}, got {text!r}")
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="omni-vla bench loop", description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, default=Path("bundles/reference"), help="exported bundle directory")
    p.add_argument("--backends", default=",".join(reversed(ROBOT_BACKENDS)), help=f"comma list of {ROBOT_BACKENDS}")
    p.add_argument("--rates", type=_rates, default="50,100", help="comma list of loop rates (Hz)")
    p.add_argument("--ticks", type=positive_int, default=10_000, help="measured ticks per backend, rate and round")
    p.add_argument("--rounds", type=positive_int, default=1,
                   help="interleaved rounds of every variant (percentiles over all)")
    p.add_argument("--heap-ticks", type=non_negative_int, default=1_000, help="ticks under tracemalloc for heap growth")
    p.add_argument("--threads", type=positive_int, default=1, help="runtime threads (the loop keeps the other core)")
    # rtc by default: it also exercises the pinned-prefix path, the costliest splice per tick.
    p.add_argument("--strategy", default="rtc", choices=STRATEGIES)
    p.add_argument("--execution-horizon", type=positive_int, default=1, help="1: request a chunk whenever the worker is free")
    p.add_argument("--instruction", default="pick up the red cube")
    p.add_argument("--runtime-factory", default=None, help="module:function(backend, bundle_dir, threads) -> runtime")
    p.add_argument("--rt-priority", type=non_negative_int, default=50,
                   help="SCHED_FIFO priority of the loop thread, as vla_node.yaml (0: normal scheduling)")
    p.add_argument("--no-cold-start", action="store_true")
    p.add_argument("--json", action="store_true", help="print JSON only")
    p.add_argument("--cloud", action="store_true",
                   help="also measure each backend/rate with cloud re-planning against a local serve-openpi process")
    p.add_argument("--cloud-latency-ms", type=non_negative_float, default=300.0, help="latency the cloud server injects")
    p.add_argument("--replan-cadence", type=non_negative_float, default=0.5, help="seconds between cloud requests (--cloud)")
    p.add_argument("--cloud-network", default="process",
                   help="comma list of where the client runs (process, thread): one cloud run each (--cloud)")
    p.add_argument("--probe-cold-start", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.runtime_factory and not (args.bundle / "manifest.json").is_file():
        p.error(f"argument --bundle: {args.bundle}: no manifest.json there (expected a policy bundle directory "
                "written by `omni-vla export`, or --runtime-factory)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe_cold_start:
        return probe_cold_start(args)
    # The tick competes with the feeder thread for the GIL, as in vla_node: same switch interval.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)  # runtimes (MNN) print to fd 1, in this process and its workers: keep the JSON clean
    try:
        results = _run(args)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        sys.setswitchinterval(switch)
    if results is None:
        return 2
    print(json.dumps(results, indent=2))
    return 0


def _run(args: argparse.Namespace) -> dict[str, Any] | None:
    if not args.runtime_factory and not (args.bundle / "manifest.json").is_file():
        print(f"no bundle at {args.bundle} (export one, or pass --bundle)", file=sys.stderr)
        return None
    results: dict[str, Any] = {
        "settings": {
            "ticks": args.ticks, "rounds": args.rounds, "heap_ticks": args.heap_ticks, "warmup_ticks": WARMUP_TICKS, "threads": args.threads,
            "rt_priority": args.rt_priority, "strategy": args.strategy, "execution_horizon": args.execution_horizon,
            "camera": "128x128 rgb8/bgr8 at 30 Hz", "bundle": str(args.bundle), "cpus": os.cpu_count(),
        },
    }
    networks = [n for n in args.cloud_network.split(",") if n]
    if any(n not in ("process", "thread") for n in networks):
        print(f"--cloud-network must list process and/or thread, got {args.cloud_network!r}", file=sys.stderr)
        return None
    server, url = start_cloud(args) if args.cloud else (None, None)
    if url:
        results["settings"].update(cloud=url, cloud_latency_ms=args.cloud_latency_ms, replan_cadence_s=args.replan_cadence)
    try:
        for backend in [b for b in args.backends.split(",") if b]:
            cold = None if args.no_cold_start else cold_start(args, backend)
            for rate in [float(r) for r in args.rates.split(",") if r]:
                variants = [None] + (networks if url else [])
                runs: dict[Any, list[dict[str, Any]]] = {v: [] for v in variants}
                for _ in range(args.rounds):  # interleaved rounds: load that drifts hits every variant alike
                    for v in variants:
                        runs[v].append(bench_rate(args, backend, rate, url if v else None, v or "process"))
                entry = merge_rounds(runs[None])
                entry["cold_start_s"] = cold
                results[f"{backend}@{rate:g}"] = entry
                _say(args, f"{backend}@{rate:g}", entry)
                for network in variants[1:]:
                    cloud = merge_rounds(runs[network])
                    ratio = cloud["p99_lateness_ms"] / max(entry["p99_lateness_ms"], 1e-6)
                    cloud["p99_lateness_ratio_vs_no_cloud"] = float(f"{ratio:.4g}")  # 4 significant digits
                    name = f"{backend}@{rate:g}+cloud" + ("" if network == "process" else f"-{network}")
                    results[name] = cloud
                    _say(args, name, cloud)
            first = f"{backend}@{float(args.rates.split(',')[0]):g}"
            results[backend] = results[first]
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    return results


def _say(args: argparse.Namespace, name: str, entry: dict[str, Any]) -> None:
    if not args.json:
        print(f"{name}: p99 {entry['p99_lateness_ms']:.3f} ms, max {entry['max_lateness_ms']:.3f} ms, "
              f"missed {entry['missed_ticks']}, heap {entry['heap_growth_bytes']} B, cold {entry.get('cold_start_s')} s",
              file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
