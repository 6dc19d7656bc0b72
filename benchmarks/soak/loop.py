"""Does the ROS-free loop hold over millions of ticks: vla_node's assembled loop (build_loop over the inference worker
process, fed like the subscriber callbacks: `omni-vla bench loop`'s rig) runs `--ticks` ticks at `--rate-hz`, and per
window of `--window-ticks` reports tick lateness (p50, p99, max; and the machine probe's, probe.py), missed ticks, overruns, starved ticks, holds,
chunks, worker restarts, and the RSS and open fds of the loop's process and of its worker.

    python benchmarks/soak/loop.py --ticks 10000000 --rate-hz 1000 --window-ticks 60000 --out FILE

Summary against the goals of a soak: RSS growth per hour per process (least-squares line over the windows after the
first, which holds the warm-up), fd growth after the first window, the worst window's p99 over the first's, missed
ticks. FILE is rewritten (atomically) after every window, so a run stopped early keeps what it measured.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("soak_procstats", Path(__file__).with_name("procstats.py"))
PROCSTATS = importlib.util.module_from_spec(SPEC)  # type: ignore[arg-type]
SPEC.loader.exec_module(PROCSTATS)  # type: ignore[union-attr]
SPEC = importlib.util.spec_from_file_location("soak_probe", Path(__file__).with_name("probe.py"))
PROBE = importlib.util.module_from_spec(SPEC)  # type: ignore[arg-type]
SPEC.loader.exec_module(PROBE)  # type: ignore[union-attr]
GOALS = {"rss_mib_per_h": 1.0, "fd_growth": 0, "p99_over_first": 2.0, "missed_ticks": 0}
COUNTS = ("holds", "starved_ticks", "chunks", "requests")


def window_record(sched: Any, rig: Any, c0: dict[str, int], t_s: float, procs: dict[str, int]) -> dict[str, Any]:
    """One window: the scheduler's tick statistics, the controller's counts since `c0`, RSS and fds per process."""
    rec: dict[str, Any] = {"t_end_s": round(t_s, 3), **sched.stats.summary()}
    rec.update({k: rig.controller.counts[k] - c0[k] for k in COUNTS})
    rec["worker_restarts"] = rig.inference.restarts
    rec["state"] = f"{rig.controller.state}: {rig.controller.reason}"
    for name, pid in procs.items():
        sample = PROCSTATS.proc_sample(pid)
        rec.setdefault("rss_mib", {})[name] = None if sample is None else round(sample[0], 3)
        rec.setdefault("fds", {})[name] = None if sample is None else sample[1]
    return rec


def summarise(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The soak's figures against GOALS, from the windows alone (so a stopped run's file can be summarised)."""
    out: dict[str, Any] = {"windows": len(windows), "ticks": sum(w["ticks"] for w in windows),
                           "missed_ticks": sum(w["missed_ticks"] for w in windows),
                           "overruns": sum(w["overruns"] for w in windows),
                           "starved_ticks": sum(w["starved_ticks"] for w in windows),
                           "worker_restarts": windows[-1]["worker_restarts"] if windows else 0}
    after = windows[0]["t_end_s"] if windows else 0.0
    names = sorted({n for w in windows for n in w["rss_mib"]})
    series = {n: [(w["t_end_s"], w["rss_mib"][n], w["fds"][n]) for w in windows if w["rss_mib"].get(n) is not None]
              for n in names}
    out["rss_growth_mib_per_h"] = {n: PROCSTATS.slope_per_hour(s, 1, after) for n, s in series.items()}
    out["fd_growth_after_first_window"] = {n: (s[-1][2] - s[0][2]) if s else None for n, s in series.items()}
    first = windows[0]["p99_lateness_ms"] if windows else 0.0
    worst = max((w["p99_lateness_ms"] for w in windows), default=0.0)
    out["p99_lateness_ms_first_worst"] = [round(first, 4), round(worst, 4)]
    out["p99_worst_over_first"] = round(worst / first, 3) if first > 0 else None
    rel = [w["p99_lateness_ms"] / w["machine_probe"]["p99"] for w in windows
           if w.get("machine_probe", {}).get("p99", 0.0) > 0]
    out["p99_over_machine_probe_worst_window_over_first"] = (round(max(rel) / rel[0], 3) if len(rel) == len(windows) and rel
                                                      and rel[0] > 0 else None)
    growth = [g for g in out["rss_growth_mib_per_h"].values() if g is not None]
    out["goals_met"] = {
        "rss": bool(growth) and max(growth) <= GOALS["rss_mib_per_h"],
        "fds": all(g == GOALS["fd_growth"] for g in out["fd_growth_after_first_window"].values()),
        "p99": out["p99_worst_over_first"] is not None and out["p99_worst_over_first"] <= GOALS["p99_over_first"],
        "missed": out["missed_ticks"] == GOALS["missed_ticks"],
    }
    return out


def soak(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Run the windows, rewriting `args.out` after each."""
    from omni_vla.core.loop import Scheduler
    from omni_vla.runtime.bundle import write_json_atomic
    from omni_vla.tools.bench_loop import WARMUP_TICKS, LoopRig, parse_args

    rig_args = parse_args(["--bundle", str(args.bundle), "--backends", args.backend, "--threads", str(args.threads),
                           "--strategy", args.strategy, "--execution-horizon", str(args.execution_horizon),
                           "--rt-priority", str(args.rt_priority)])
    rig = LoopRig(rig_args, args.backend, args.rate_hz)
    probe = None
    try:
        probe = PROBE.Probe()  # the machine's own wake-up lateness, per window beside the loop's
        procs = {"loop": os.getpid(), "worker": rig.inference.pid}
        sched = Scheduler(args.rate_hz, rig.tick, window=args.window_ticks, rt_priority=args.rt_priority)
        sched.run(max_ticks=WARMUP_TICKS)
        report["scheduling"] = sched.rt_status
        report["feeder_scheduling"] = "; ".join(rig.feeder_scheduling)
        t0, done = time.monotonic(), 0
        probe.take_window()
        while done < args.ticks:
            n = min(args.window_ticks, args.ticks - done)
            sched.stats.reset()
            c0 = {k: rig.controller.counts[k] for k in COUNTS}
            sched.run(max_ticks=n)
            done += sched.stats.ticks
            procs["worker"] = rig.inference.pid or procs["worker"]
            report["windows"].append(window_record(sched, rig, c0, time.monotonic() - t0, procs))
            report["windows"][-1]["machine_probe"] = probe.take_window()
            report["summary"] = summarise(report["windows"])
            if args.out:
                write_json_atomic(args.out, report)
    finally:
        if probe is not None:
            probe.close()
            report["machine_probe"] = {"scheduling": probe.status, "exit_code": probe.proc.returncode}
            if args.out and report["windows"]:
                write_json_atomic(args.out, report)
        rig.close()


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=REPO / "bundles" / "reference")
    ap.add_argument("--backend", default="mnn")
    ap.add_argument("--rate-hz", type=_positive(float), default=1000.0)
    ap.add_argument("--ticks", type=_positive(int), default=10_000_000)
    ap.add_argument("--window-ticks", type=_positive(int), default=60_000, help="ticks per window (<= 100,000)")
    ap.add_argument("--threads", type=_positive(int), default=1)
    ap.add_argument("--strategy", default="rtc")
    ap.add_argument("--execution-horizon", type=_positive(int), default=1,
                    help="1: a new chunk whenever the worker is free, so inference runs throughout")
    ap.add_argument("--rt-priority", type=int, default=50, help="SCHED_FIFO priority of the loop thread; 0: normal")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.window_ticks > 100_000 or not (args.bundle / "manifest.json").is_file():
        ap.error(f"--window-ticks {args.window_ticks} / --bundle {args.bundle}: expected at most 100,000 ticks per "
                 "window (the scheduler's lateness ring) and a bundle directory with a manifest.json")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    report: dict[str, Any] = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                              "goals": GOALS, "commit": commit.stdout.strip(), "cpus": os.cpu_count(), "windows": []}
    sys.setswitchinterval(0.001)  # the tick competes with the feeder thread for the GIL as in vla_node
    saved = os.dup(1)
    os.dup2(2, 1)  # runtimes (MNN) print to fd 1: keep stdout for the JSON
    try:
        soak(args, report)
    except KeyboardInterrupt:
        report["stopped_early"] = True
        if args.out and report["windows"]:
            from omni_vla.runtime.bundle import write_json_atomic

            write_json_atomic(args.out, report)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    print(json.dumps(report.get("summary", {}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
