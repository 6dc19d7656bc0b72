"""How long vla_node takes to exit on SIGINT under use_sim_time, after tests/ros/test_vla_node_time.py's scenario.

    python experiments/shutdown_hang/repro.py BUNDLE [RUNS]     # e.g. next to two `python3 -c "while True: pass"`

Prints the exit code and the seconds from SIGINT to exit per run; a node still running 8 s after SIGINT gets
SIGABRT, so `-X faulthandler` prints every thread's stack (the output is shown for any non-zero exit). Measured
2026-12-02 with two busy loops beside it: about 1 in 10 runs did not exit within 10 s, at b31340c as at 4a2a1fe
(0.4-2.7 s otherwise). The stacks: the loop thread waiting for simulated time (as it should), the main thread still
in rclpy.spin's wait 8 s after the SIGINT, which rclpy's handling had missed. Since then vla_node spins with a
0.1 s timeout and ends on the stop signal itself (`omni_vla.ros.interrupt.spin_until_stopped`): 0 of 14 runs hung
(`bundles/reference`, two busy loops), 0.47-0.78 s each.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests")] + [str(REPO / "tests" / p) for p in ("ros", "support", "inference")]

import test_vla_node_time as scenario  # noqa: E402 - the test's own scenario and parameters
from rosutil import free_domain_id, ros_context  # noqa: E402


def once(bundle: Path) -> tuple[int, float, str]:
    params = {"bundle_dir": str(bundle), "backend": "mnn", "autostart": "true", "use_sim_time": "true",
              "max_obs_age_s": 0.3, "diagnostics_period_s": 0.1, "realtime_priority": 0}
    domain = free_domain_id()
    cmd = [sys.executable, "-X", "faulthandler", "-m", "omni_vla.ros.node", "--ros-args", "--params-file",
           str(scenario.PARAMS_FILE)] + [a for k, v in params.items() for a in ("-p", f"{k}:={v}")]
    with ros_context(domain) as (probe, ex):
        proc = subprocess.Popen(cmd, env={**os.environ, "ROS_DOMAIN_ID": str(domain)}, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        scenario._sim_time_scenario(probe, ex)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            proc.wait()
        took = time.monotonic() - t0
        out = proc.stdout.read() if proc.stdout else ""
    return proc.returncode, took, out


def main() -> int:
    bundle, runs = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 10
    for _ in range(runs):
        code, took, out = once(bundle)
        print(f"exit {code} after SIGINT in {took:.2f} s", flush=True)
        if code != 0:
            print(out[-6000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
