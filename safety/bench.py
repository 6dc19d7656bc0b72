"""Cost of the per-command path (validate + limit) for 7 and 14 joints: `omni-vla bench safety`.

With `--fuzz N`, instead: N hostile steps per robot description and rate (100 Hz, 1 kHz) through
the supervisor, every output judged by the independent oracle of the test suite
(tests/safety/safety_oracle.py, loaded from the source checkout: it is written apart from safety/),
reporting violations by kind and steps per second.

Measured in-process, one thread, on a moving command stream (sinusoids inside the Panda
limits, fresh stamps), each call timed with perf_counter_ns. "7" is one Panda arm,
"14" two arms with the same limits. `with_bookkeeping` adds the state machine tick
(watchdog checks, intervention counting) to show the whole cost of one period.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Sequence

from omni_vla_safety.config import SupervisorConfig, resolve_path
from omni_vla_safety.limits import JointLimitSet, load_limit_sets
from omni_vla_safety.supervisor import Supervisor

ARM = [f"panda_joint{i}" for i in range(1, 8)]


def _setup(n_joints: int, limits_file: str) -> tuple[Supervisor, list[str], list[list[float]]]:
    arm_limits = load_limit_sets(resolve_path(limits_file))
    arms = n_joints // len(ARM)
    names = [f"arm{a}_{j}" for a in range(arms) for j in ARM] if arms > 1 else list(ARM)
    limits: list[JointLimitSet] = [arm_limits[j] for _ in range(arms) for j in ARM]
    config = SupervisorConfig(joint_names=names)
    sup = Supervisor(config, limits)
    # A 20 Hz policy: a new proposal every 5 ticks, sinusoids with peak speeds up to ~1.2 rad/s.
    mids = [0.5 * (s.hard.min_position + s.hard.max_position) for s in limits]
    amps = [0.3 * (s.hard.max_position - s.hard.min_position) for s in limits]
    stream = [[m + a * math.sin(1.2 * (1 + i % 3) / (3 * a) * (k // 5 * 5) * 0.01)
               for i, (m, a) in enumerate(zip(mids, amps))] for k in range(4000)]
    sup.on_joint_state(names, stream[0], 0.0)
    return sup, names, stream


def _percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    p99 = ordered[min(len(ordered) - 1, int(math.ceil(0.99 * len(ordered))) - 1)]
    return {"median_us": round(statistics.median(ordered) / 1e3, 3), "p99_us": round(p99 / 1e3, 3)}


def _run(n_joints: int, repetitions: int, limits_file: str, bookkeeping: bool) -> tuple[list[int], int]:
    sup, names, stream = _setup(n_joints, limits_file)
    limiter, clock, dt = sup.limiter, time.perf_counter_ns, sup.config.dt
    samples: list[int] = []
    for k in range(repetitions + 500):
        positions = stream[k % len(stream)]
        now = k * dt
        sup.on_joint_state(names, limiter.q, now)
        if bookkeeping:
            t0 = clock()
            sup.on_command(names, positions, now, now)
            sup.tick(now)
            t1 = clock()
        else:
            t0 = clock()
            target = sup.validate(names, positions, now, now)
            limiter.limit(target, sup.measured)
            t1 = clock()
        if k >= 500:
            samples.append(t1 - t0)
    return samples, sum(sup.counts.values())


def measure(n_joints: int, repetitions: int, limits_file: str) -> dict[str, object]:
    """Median/p99 microseconds of validate+limit, and of on_command+tick, per command."""
    core, _ = _run(n_joints, repetitions, limits_file, bookkeeping=False)
    full, interventions = _run(n_joints, repetitions, limits_file, bookkeeping=True)
    result: dict[str, object] = _percentiles(core)
    result["with_bookkeeping"] = _percentiles(full)
    result["interventions_per_command"] = round(interventions / (repetitions + 500), 3)
    return result


def _fuzz_modules() -> tuple[object, list[object]]:
    tests = Path(__file__).resolve().parent.parent / "tests"
    if not (tests / "safety" / "safety_oracle.py").is_file():
        raise FileNotFoundError(f"{tests / 'safety' / 'safety_oracle.py'}: the oracle lives in the source "
                                "checkout's tests/safety/")
    sys.path[:0] = [str(tests / "safety"), str(tests / "support")]
    return importlib.import_module("safety_fuzz"), importlib.import_module("safety_robots").fuzz_robots()


def _fuzz_one(k: int, rate: float, steps: int, chunk: int) -> dict[str, object]:
    """Robot k of the fuzzed descriptions at one rate (in a worker process: modules loaded there)."""
    safety_fuzz, robots = _fuzz_modules()
    robot = robots[k]
    done, kinds, t0 = 0, {}, time.perf_counter()
    seed = 0
    while done < steps:
        n = min(chunk, steps - done)
        rig = safety_fuzz.run_random(robot, rate, n, seed=seed)  # type: ignore[attr-defined]
        for kind, count in rig.oracle.counts().items():
            kinds[kind] = kinds.get(kind, 0) + count
        done, seed = done + n, seed + 1
    wall = time.perf_counter() - t0
    jerk_limited = sum(math.isfinite(j.jmax) for j in robot.oracle_joints)  # type: ignore[attr-defined]
    return {"robot": robot.name, "joints": len(robot.names), "rate_hz": rate, "steps": done,  # type: ignore[attr-defined]
            "jerk_limited_joints": jerk_limited, "episodes": seed, "violations": sum(kinds.values()), "violations_by_kind": kinds,
            "steps_per_s": round(done / wall)}


def _commit() -> str:
    """The checkout's commit, `-dirty` when changed (the oracle and the generator are read from its tests/): which
    code a result judged."""
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def fuzz(steps: int, chunk: int, rates: Sequence[float], jobs: int = 1) -> dict[str, object]:
    """Run the oracle-checked hostile generator; seeds differ per chunk so starts and faults vary. With jobs > 1,
    each robot and rate in its own process (same seeds, same result; steps_per_s is then per process)."""
    _, robots = _fuzz_modules()
    cases = [(k, rate) for k in range(len(robots)) for rate in rates]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            runs = list(pool.map(_fuzz_one, *zip(*cases), [steps] * len(cases), [chunk] * len(cases)))
    else:
        runs = [_fuzz_one(k, rate, steps, chunk) for k, rate in cases]
    return {"fuzz": runs, "total_steps": sum(r["steps"] for r in runs),  # type: ignore[misc]
            "total_violations": sum(r["violations"] for r in runs)}  # type: ignore[misc]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the benchmark (JSON with --json); returns 0 (1 when fuzzing found a violation)."""
    parser = argparse.ArgumentParser(prog="omni-vla bench safety", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repetitions", type=int, default=20000, help="timed commands per size")
    parser.add_argument("--limits", default="config/joint_limits.yaml", help="joint limits file (Panda)")
    parser.add_argument("--fuzz", type=int, default=0, metavar="N",
                        help="instead: N oracle-checked hostile steps per robot and rate")
    parser.add_argument("--fuzz-episode", type=int, default=100000, metavar="STEPS",
                        help="steps per fuzz episode (each a new seed, start and fault mix)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="fuzz robots and rates in N processes (the same runs, in parallel)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.fuzz < 0 or args.fuzz_episode < 1 or args.jobs < 1:
        parser.error("--fuzz must be >= 0, --fuzz-episode >= 1 and --jobs >= 1")
    if args.fuzz:
        commit = _commit()  # at the start: the code the runs load, not what the checkout holds when they end
        try:
            result = fuzz(args.fuzz, args.fuzz_episode, (100.0, 1000.0), args.jobs)
        except (FileNotFoundError, ImportError) as exc:
            print(f"omni-vla bench safety --fuzz: {exc}", file=sys.stderr)
            return 2
        result.update(python=platform.python_version(), machine=platform.machine(), commit=commit)
        print(json.dumps(result) if args.json else json.dumps(result, indent=1))
        return 1 if result["total_violations"] else 0
    if args.repetitions < 100:
        parser.error("--repetitions must be at least 100 for a p99")
    report: dict[str, object] = {str(n): measure(n, args.repetitions, args.limits) for n in (7, 14)}
    report.update(repetitions=args.repetitions, threads=1, implementation="plain-python loops",
                  path="validate (names, size, finite, age) + limit (position, stopping distance, velocity, "
                       "max step, acceleration, jerk)",
                  python=platform.python_version(), machine=platform.machine())
    if args.json:
        print(json.dumps(report))
    else:
        for n in ("7", "14"):
            r = report[n]
            print(f"{n:>2} joints: median {r['median_us']} us, p99 {r['p99_us']} us "  # type: ignore[index]
                  f"(with bookkeeping {r['with_bookkeeping']})")  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main())
