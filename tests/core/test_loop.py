"""Fixed-rate scheduler driven by a fake clock: absolute deadlines, overruns, missed-tick skipping."""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from omni_vla.core.loop import ManualClock, MonotonicClock, Scheduler, TickStats

PERIOD = 0.02


class JitteryClock(ManualClock):
    """Wakes up to `jitter` late, like an OS scheduler; `stall` makes chosen wake-ups very late."""

    def __init__(self, jitter: float, seed: int = 0) -> None:
        super().__init__(100.0)
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.stall: dict[int, float] = {}
        self.wakes = 0

    def sleep_until(self, deadline: float) -> None:
        super().sleep_until(deadline)
        self.t += self.rng.uniform(0, self.jitter) + self.stall.get(self.wakes, 0.0)
        self.wakes += 1


def run(clock: ManualClock, n: int, work=None) -> tuple[Scheduler, list[tuple[int, float, float]]]:
    seen: list[tuple[int, float, float]] = []

    def tick(k: int, t: float) -> None:
        seen.append((k, t, clock.now()))
        if work is not None:
            work(k)

    sched = Scheduler(1 / PERIOD, tick, clock=clock)
    sched.run(max_ticks=n)
    return sched, seen


def test_deadlines_are_absolute_so_1000_ticks_do_not_drift() -> None:
    clock = JitteryClock(jitter=0.004)
    sched, seen = run(clock, 1000, work=lambda k: clock.advance(0.005))
    t0 = sched.t0
    assert [k for k, _, _ in seen] == list(range(1000))
    for k, t, _ in seen:
        assert t == t0 + k * PERIOD  # nominal times are t0 + k * period, never accumulated
    last_wake = seen[-1][2]
    # A relative sleep would be late by the sum of jitter and work (~7 s); absolute deadlines
    # keep the 1000th tick within one jitter of its deadline.
    assert 0 <= last_wake - (t0 + 999 * PERIOD) <= 0.004
    assert sched.stats.missed == 0 and sched.stats.overruns == 0
    assert sched.stats.ticks == 1000


def test_overrun_is_counted_and_next_tick_runs_late_not_skipped() -> None:
    clock = ManualClock()
    sched, seen = run(clock, 20, work=lambda k: clock.advance(1.5 * PERIOD if k == 10 else 0.0))
    ks = [k for k, _, _ in seen]
    assert ks == list(range(20))
    assert sched.stats.overruns == 1 and sched.stats.missed == 0
    assert sched.stats.max_lateness == pytest.approx(0.5 * PERIOD)
    assert seen[12][2] == pytest.approx(sched.t0 + 12 * PERIOD), "back on schedule after the late tick"


def test_long_overrun_skips_missed_ticks_instead_of_bursting() -> None:
    clock = ManualClock()
    sched, seen = run(clock, 20, work=lambda k: clock.advance(3.4 * PERIOD if k == 5 else 0.0))
    ks = [k for k, _, _ in seen]
    assert ks[:6] == [0, 1, 2, 3, 4, 5]
    assert ks[6] == 8, "ticks 6 and 7 are skipped; tick 8 runs (0.4 period late)"
    assert ks[7:] == list(range(9, 9 + len(ks) - 7))
    assert sched.stats.missed == 2 and sched.stats.overruns == 1
    wake = [w for _, _, w in seen]
    assert min(np.diff(wake[6:])) >= PERIOD * 0.59, "no two ticks back to back after the overrun"
    assert all(0 <= w - t < PERIOD for _, t, w in seen), "lateness always below one period"


def test_stalled_wakeup_counts_missed_ticks_and_resumes_on_the_grid() -> None:
    clock = JitteryClock(jitter=0.0)
    clock.stall[50] = 3.25 * PERIOD  # the 51st wake-up comes 3.25 periods late
    sched, seen = run(clock, 100)
    ks = [k for k, _, _ in seen]
    assert ks[50] == 53 and sched.stats.missed == 3
    assert sched.stats.max_lateness == pytest.approx(0.25 * PERIOD)
    assert all(t == sched.t0 + k * PERIOD for k, t, _ in seen)


def test_tick_stats_percentiles_match_numpy_over_the_window() -> None:
    stats = TickStats(window=500)
    rng = np.random.default_rng(1)
    values = rng.exponential(0.001, 1200)
    for v in values:
        stats.record(float(v))
    window = np.sort(values[-500:])
    assert stats.percentile(99) == window[int(0.99 * 500)]
    assert stats.percentile(50) == window[250]
    assert stats.max_lateness == values.max()
    s = stats.summary()
    assert s["ticks"] == 1200 and s["p99_lateness_ms"] == pytest.approx(1e3 * window[495])


@pytest.mark.parametrize("recorded, last", [(1200, 300), (1200, 499), (1000, 500), (1001, 500), (120, 300), (0, 10),
                                            (750, 1)])
def test_recent_lateness_is_the_newest_samples_only_across_the_ring_wrap(recorded: int, last: int) -> None:
    stats = TickStats(window=500)
    values = np.random.default_rng(recorded + last).exponential(0.001, recorded)
    for v in values:
        stats.record(float(v))
    p99, worst = stats.recent(99, last)
    newest = np.sort(values[-min(last, 500, recorded):]) if recorded else np.zeros(1)
    assert p99 == newest[min(len(newest) - 1, int(0.99 * len(newest)))] and worst == newest[-1]


def test_recent_lateness_forgets_a_burst_once_it_is_older_than_the_window() -> None:
    stats = TickStats(window=1000)
    for v in [0.05] * 20 + [0.0001] * 200:
        stats.record(v)
    assert stats.recent(99, 200) == (0.0001, 0.0001) and stats.percentile(99) == 0.05


def test_monotonic_clock_never_wakes_before_the_deadline() -> None:
    clock = MonotonicClock()
    start = clock.now()
    for i in range(1, 30):
        deadline = start + i * 0.002
        clock.sleep_until(deadline)
        assert time.perf_counter() >= deadline


def test_stop_from_another_thread_ends_the_real_time_loop() -> None:
    ticks: list[int] = []
    sched = Scheduler(200.0, lambda k, t: ticks.append(k))
    th = threading.Thread(target=sched.run)
    th.start()
    while len(ticks) < 5:
        time.sleep(0.005)
    sched.stop()
    th.join(2.0)
    assert not th.is_alive()
    assert ticks == list(range(len(ticks))) or sched.stats.missed > 0


def test_a_stop_asked_for_before_the_run_starts_ends_it_without_a_tick_and_the_next_run_ticks() -> None:
    ticks: list[int] = []
    sched = Scheduler(200.0, lambda k, t: ticks.append(k), clock=ManualClock())
    sched.stop()  # deactivate, before the activate's thread reached run()
    th = threading.Thread(target=sched.run, kwargs={"max_ticks": 100_000}, daemon=True)
    th.start()
    th.join(2.0)
    assert not th.is_alive() and ticks == []
    sched.run(max_ticks=3)
    assert ticks == [0, 1, 2]


def test_rejects_non_positive_rate() -> None:
    with pytest.raises(ValueError, match="rate_hz"):
        Scheduler(0.0, lambda k, t: None)


def test_realtime_priority_applies_to_the_loop_thread_only_and_is_reported() -> None:
    import os

    policies: list[int] = []
    sched = Scheduler(500.0, lambda k, t: policies.append(os.sched_getscheduler(0)), rt_priority=1)
    th = threading.Thread(target=sched.run, kwargs={"max_ticks": 5})
    th.start()
    th.join(5.0)
    assert len(policies) == 5
    reset = getattr(os, "SCHED_RESET_ON_FORK", 0)
    if sched.rt_status == "SCHED_FIFO 1":
        assert set(policies) == {os.SCHED_FIFO | reset}, "FIFO, and a forked worker is not real-time"
    else:
        assert "unavailable" in sched.rt_status and os.SCHED_FIFO not in policies
    assert os.sched_getscheduler(0) == os.SCHED_OTHER, "the calling process keeps normal scheduling"


def test_lateness_samples_come_back_oldest_first_after_the_window_wraps() -> None:
    stats = TickStats(window=4)
    for v in (1.0, 2.0, 3.0):
        stats.record(v)
    np.testing.assert_array_equal(stats.lateness_s(), [1.0, 2.0, 3.0])
    for v in (4.0, 5.0, 6.0):
        stats.record(v)
    np.testing.assert_array_equal(stats.lateness_s(), [3.0, 4.0, 5.0, 6.0])


@pytest.mark.parametrize("rate_hz, spin_s", [(1000.0, 0.0002), (500.0, 0.0004), (100.0, 0.001), (20.0, 0.001)])
def test_the_spin_before_a_tick_is_at_most_a_fifth_of_the_period(rate_hz: float, spin_s: float) -> None:
    """A 1 ms spin at 1 kHz never slept, so other threads took the GIL from it and ticks began late (decision 0014)."""
    sched = Scheduler(rate_hz, lambda k, t: None)
    assert sched.clock.spin_s == pytest.approx(spin_s)
    shared = MonotonicClock()
    Scheduler(1000.0, lambda k, t: None, clock=shared)
    assert shared.spin_s == pytest.approx(0.0002)  # the node's own clock is fitted too


def _fake_scheduling(monkeypatch: pytest.MonkeyPatch, current: dict[int, tuple[int, int]], gone: int = -1) -> list:
    """os' scheduling calls faked: `current` {tid: (policy, priority)} (default normal); returns the set calls."""
    import os

    from omni_vla.core import loop

    calls: list[tuple[int, int, int]] = []

    def check(tid: int) -> None:
        if tid == gone:
            raise ProcessLookupError(3, "No such process")

    def getscheduler(tid: int) -> int:
        check(tid)
        return current.get(tid, (os.SCHED_OTHER, 0))[0]

    def getparam(tid: int) -> os.sched_param:
        return os.sched_param(current.get(tid, (os.SCHED_OTHER, 0))[1])

    def setscheduler(tid: int, policy: int, param: os.sched_param) -> None:
        check(tid)
        calls.append((tid, policy, param.sched_priority))

    monkeypatch.setattr(loop.os, "sched_getscheduler", getscheduler)
    monkeypatch.setattr(loop.os, "sched_getparam", getparam)
    monkeypatch.setattr(loop.os, "sched_setscheduler", setscheduler)
    return calls


def test_python_threads_are_raised_below_the_loop_and_never_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from omni_vla.core import loop

    release = threading.Event()
    threads = [threading.Thread(target=release.wait, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    above, ended, below = (t.native_id for t in threads)  # the loop at 50; one that ends; one at FIFO 10
    try:
        calls = _fake_scheduling(monkeypatch, {above: (os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, 50),
                                               below: (os.SCHED_FIFO, 10)}, gone=ended)
        status = loop.raise_python_threads(49)
    finally:
        release.set()
    asked = {c[0] for c in calls}
    assert threading.get_native_id() in asked and below in asked and above not in asked and ended not in asked
    assert all(c[1:] == (os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, 49) for c in calls)
    assert status == f"SCHED_FIFO 49 for the Python threads ({len(calls)} raised)"


@pytest.mark.parametrize(("loop_priority", "threads"), [(50, 49), (99, 98), (2, 1), (1, 0), (0, 0), (-3, 0), (100, 0)])
def test_python_threads_run_just_below_a_realtime_loop_and_normal_beside_a_normal_one(loop_priority: int,
                                                                                         threads: int) -> None:
    from omni_vla.core.loop import threads_priority_below

    assert threads_priority_below(loop_priority) == threads


def test_raising_threads_without_privilege_says_so_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    from omni_vla.core import loop

    _fake_scheduling(monkeypatch, {})
    asked: list[int] = []

    def refuse(tid: int, policy: int, param: object) -> None:
        asked.append(tid)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(loop.os, "sched_setscheduler", refuse)
    status = loop.raise_python_threads(49)
    assert status == "SCHED_FIFO 49 unavailable for the Python threads ([Errno 1] Operation not permitted); 0 raised before"
    assert len(asked) == 1


def test_a_raised_thread_starts_threads_at_normal_priority_again() -> None:
    """Why vla_node raises again after configure: SCHED_RESET_ON_FORK resets threads too, not only processes."""
    import os

    seen: list[int] = []

    def child() -> None:
        seen.append(os.sched_getscheduler(0))

    def parent() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
        except PermissionError:
            seen.append(-1)
            return
        t = threading.Thread(target=child)
        t.start()
        t.join()

    p = threading.Thread(target=parent)
    p.start()
    p.join()
    if seen == [-1]:
        pytest.skip("no real-time privilege here")
    assert seen == [os.SCHED_OTHER]
