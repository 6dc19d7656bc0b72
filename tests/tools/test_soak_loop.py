"""The ROS-free soak: its summary judges the goals from the windows, and a short real run writes every window."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_bundles import tiny_bundle
from scripts import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def loop():
    return load_script("benchmarks/soak/loop.py", "soak_loop")


def _window(t: float, p99: float, rss: float, fds: int, missed: int = 0) -> dict:
    return {"t_end_s": t, "ticks": 1000, "missed_ticks": missed, "overruns": 0, "starved_ticks": 0,
            "worker_restarts": 0, "p99_lateness_ms": p99, "rss_mib": {"loop": rss, "worker": 50.0},
            "fds": {"loop": fds, "worker": 9}}


def test_steady_windows_meet_every_goal(loop):
    s = loop.summarise([_window(600.0 * i, 0.2, 100.0 + (5.0 if i == 1 else 0.0), 12) for i in range(1, 7)])
    assert s["goals_met"] == {"rss": True, "fds": True, "p99": True, "missed": True}
    assert s["ticks"] == 6000 and s["rss_growth_mib_per_h"]["worker"] == 0.0  # the warm-up window is left out


def test_rss_that_grows_after_the_first_window_fails_the_goal(loop):
    s = loop.summarise([_window(600.0 * i, 0.2, 100.0 + 0.2 * i, 12) for i in range(1, 7)])
    assert s["rss_growth_mib_per_h"]["loop"] == pytest.approx(1.2) and not s["goals_met"]["rss"]


def test_a_late_window_a_missed_tick_or_a_new_fd_each_fail_their_goal(loop):
    ws = [_window(600.0 * i, 0.2, 100.0, 12) for i in range(1, 5)]
    ws[2] = _window(1800.0, 0.41, 100.0, 12, missed=1)
    ws[3] = _window(2400.0, 0.2, 100.0, 13)  # one more fd than the first window's, at the end
    s = loop.summarise(ws)
    assert s["p99_worst_over_first"] == 2.05 and s["missed_ticks"] == 1
    assert s["goals_met"] == {"rss": True, "fds": False, "p99": False, "missed": False}


def test_lateness_beyond_the_machines_is_the_loops_p99_over_the_probes_worst_window_over_first(loop):
    ws = [_window(600.0 * i, p99, 100.0, 12) for i, p99 in enumerate((0.2, 0.8, 0.3), start=1)]
    for w, probe in zip(ws, (0.1, 0.4, 0.05)):  # the machine got 4x worse in window 2, the loop with it
        w["machine_probe"] = {"p99": probe, "max": 1.0}
    s = loop.summarise(ws)
    assert s["p99_worst_over_first"] == 4.0 and s["p99_over_machine_probe_worst_window_over_first"] == 3.0
    ws[1]["machine_probe"] = {}
    assert loop.summarise(ws)["p99_over_machine_probe_worst_window_over_first"] is None


@pytest.mark.slow
def test_a_short_run_writes_each_window_with_both_processes(tmp_path_factory, tmp_path):
    out = tmp_path / "soak.json"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "soak" / "loop.py"), "--bundle",
                          str(tiny_bundle(tmp_path_factory)), "--ticks", "1500", "--window-ticks", "500",
                          "--rate-hz", "500", "--rt-priority", "2", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [w["ticks"] for w in report["windows"]] == [500, 500, 500]
    assert all(w["rss_mib"]["worker"] > 0 and w["fds"]["loop"] > 3 for w in report["windows"])
    assert report["summary"]["ticks"] == 1500 and json.loads(res.stdout)["windows"] == 3
    assert all("machine_probe" in w for w in report["windows"]) and report["machine_probe"]["scheduling"]
    # The loop at SCHED_FIFO 2, the feeder one below (or "SCHED_FIFO 1 unavailable ..." without the privilege).
    assert report["scheduling"].startswith("SCHED_FIFO 2") and report["feeder_scheduling"].startswith("SCHED_FIFO 1")
    assert any("p99" in w["machine_probe"] for w in report["windows"]), "the probe reports once a second"


def test_a_window_past_the_lateness_ring_is_refused_in_one_line():
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "soak" / "loop.py"), "--window-ticks", "200000"],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 2 and "100,000" in res.stderr and "Traceback" not in res.stderr
