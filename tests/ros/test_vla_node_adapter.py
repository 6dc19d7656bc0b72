"""vla_node's ROS-free parts: the diagnostics it publishes, the supervisor's counters it reads back and
configure's refusals. Nothing here imports rclpy."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from omni_vla.core.loop import TickStats
from omni_vla.ros.assembly import ConfigureError, assemble
from omni_vla.ros.diagnostics import ERROR, OK, WARN, InterventionCounter, NodeCounts, Since, intervention_total, loop_report

JOINTS = ["a", "b"]


def _status(**over: object) -> dict:
    s = {"state": "OK", "reason": "", "inference_latency": {"p50_ms": 10.0, "p95_ms": 20.0}, "strategy": "rtc",
         "delay_ticks": 1, "queue_depth": 5, "delay_headroom_ticks": 2, "commands": 7, "holds": 0, "starved_ticks": 0,
         "splice_jump": {"p95": 0.001, "max": 0.002, "count": 3}, "chunks": 2, "rejected_images": 1, "cloud_plans": 0,
         "non_finite_chunks": 1}
    return {**s, **over}


def _rig(status: dict, healthy: bool = True, fallbacks: int = 0, now: float = 10.0) -> tuple:
    store = SimpleNamespace(stamp_fallbacks=fallbacks, last_stamp_fallback="front: zero stamp; arrival time used",
                            lock=threading.Lock(), stamps={"front": 9.9, "joints": None}, cameras=("front",))
    ctl = SimpleNamespace(status=lambda: status, too_slow=lambda s: f"too slow at {s:g} s")
    loop = SimpleNamespace(controller=ctl, store=store, settings=SimpleNamespace(rate_hz=20.0))
    stats = TickStats()
    for late in [0.05] * 10 + [0.002] + [0.001] * 999:  # a start-up burst, then 1000 ticks (50 s at 20 Hz)
        stats.record(late)
    sched = SimpleNamespace(stats=stats, clock=SimpleNamespace(now=lambda: now), rt_status="SCHED_FIFO 50")
    inf = SimpleNamespace(healthy=healthy, reason="worker died" if not healthy else "", worker_state="running",
                          backend="mnn", pid=123, restarts=0)
    return loop, sched, inf


def test_an_active_healthy_loop_reports_ok_commanding_with_its_figures() -> None:
    since = Since(ticks=910, t=5.0)
    counts = NodeCounts(rejected={"images": 2, "joint_states": 3, "instructions": 5}, last_rejection="bad", tick_errors=4)
    r = loop_report(*_rig(_status()), active=True, counts=counts, since=since, sim_time=False)
    assert (r.level, r.message) == (OK, "commanding")
    v = r.values
    assert v["loop_rate_hz"] == 20.0 and (since.ticks, since.t) == (1010, 10.0)
    assert v["rejected_images"] == 3 and v["rejected_joint_states"] == 3 and v["tick_errors"] == 4
    assert v["rejected_instructions"] == 5 and v["non_finite_chunks"] == 1
    assert v["front_age_ms"] == pytest.approx(100.0) and v["joint_state_age_ms"] == "none"
    assert v["time_source"] == "monotonic" and v["scheduling"] == "SCHED_FIFO 50" and v["rate_hz_target"] == 20.0
    assert v["state"] == "OK" and v["worker_pid"] == 123 and v["splices"] == 3
    # lateness over the last 1000 ticks, as the supervisor reports it; the start-up burst only since start
    assert (v["tick_lateness_p99_ms"], v["tick_lateness_max_ms"], v["tick_lateness_window_ticks"]) == (1.0, 2.0, 1000)
    assert v["tick_lateness_max_since_start_ms"] == 50.0


def test_inactive_is_ok_and_a_dead_worker_is_an_error_even_then() -> None:
    r = loop_report(*_rig(_status(state="WAITING")), active=False, counts=NodeCounts(), since=Since(),
                    sim_time=True)
    assert (r.level, r.message, r.values["state"]) == (OK, "inactive", "INACTIVE")
    assert r.values["loop_rate_hz"] == 0.0 and r.values["time_source"] == "ROS time (use_sim_time)"
    r = loop_report(*_rig(_status(), healthy=False), active=False, counts=NodeCounts(), since=Since(), sim_time=False)
    assert (r.level, r.message) == (ERROR, "worker died")


def test_waiting_warns_and_new_stamp_fallbacks_warn_once_per_period() -> None:
    r = loop_report(*_rig(_status(state="WAITING", reason="waiting for the first front camera image")), active=True,
                    counts=NodeCounts(), since=Since(), sim_time=False)
    assert (r.level, r.message) == (WARN, "waiting for the first front camera image")
    since = Since()
    r = loop_report(*_rig(_status(), fallbacks=2), active=True, counts=NodeCounts(), since=since, sim_time=False)
    assert r.level == WARN and r.message == "commanding; 2 header.stamp(s) not usable (front: zero stamp; arrival time used)"
    r = loop_report(*_rig(_status(), fallbacks=2), active=True, counts=NodeCounts(), since=since, sim_time=False)
    assert (r.level, r.message) == (OK, "commanding")


def test_inference_slower_than_the_queue_allows_warns_with_the_advice() -> None:
    r = loop_report(*_rig(_status(delay_headroom_ticks=-1)), active=True, counts=NodeCounts(), since=Since(),
                    sim_time=False)
    assert (r.level, r.message) == (WARN, "commanding; too slow at 0.02 s")
    r = loop_report(*_rig(_status(state="ERROR", reason="refused", delay_headroom_ticks=-1)), active=True,
                    counts=NodeCounts(), since=Since(), sim_time=False)
    assert r.level == ERROR


def test_the_supervisors_counters_are_summed_for_the_watched_kinds_only() -> None:
    values = [("interventions/watchdog_command", "2"), ("interventions/clamp", "5"), ("interventions/estop", "x"),
              ("state", "active"), ("other/watchdog_command", "9")]
    assert intervention_total(values, {"watchdog_command", "clamp", "estop"}) == 7
    assert intervention_total(values, {"clamp"}) == 5 and intervention_total(values, set()) == 0


def test_new_interventions_count_from_the_second_status_on_and_are_capped() -> None:
    c = InterventionCounter(["clamp"])
    assert c.new([("interventions/clamp", "3")]) == 0  # the first status seen: a baseline
    assert c.new([("interventions/clamp", "5")]) == 2
    assert c.new([("interventions/clamp", "5")]) == 0
    assert c.new([("interventions/clamp", "100")]) == 16
    assert c.new([("interventions/clamp", "1")]) == 0  # the supervisor restarted: a new baseline
    assert c.new([("interventions/clamp", "2")]) == 1


@pytest.mark.parametrize("flat, expected", [
    ({"bundle_dir": "/nonexistent/bundle"}, "bad bundle: bundle_dir '/nonexistent/bundle'"),
    ({"bundle_dir": "/nonexistent/bundle", "rate_hz": -1.0}, "invalid parameters: rate_hz: must be >= 0"),
])
def test_configure_refusals_come_as_one_line_before_any_worker_starts(flat: dict, expected: str) -> None:
    with pytest.raises(ConfigureError) as info:
        assemble(flat, runtime_factory=None, clock=lambda: 0.0, stamp_clock=lambda: 0.0)  # type: ignore[arg-type]
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_the_adapter_modules_import_without_rclpy() -> None:
    code = ("import sys; sys.modules['rclpy'] = None\n"
            "import omni_vla.ros.assembly, omni_vla.ros.diagnostics, omni_vla.core.snapshot\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
