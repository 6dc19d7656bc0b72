"""Fixed-rate scheduler on absolute deadlines, with an injectable clock and lateness accounting.

Deadlines are `t0 + k * period` (multiplied, never accumulated), so the loop does not drift. The
real clock sleeps until ~1 ms before a deadline and then spins on perf_counter: measured on this
project's 2-core machine (measured), that gives ~0.02 ms p99 lateness at 50 Hz where a plain
sleep gives the kernel's timer slack. A tick that wakes a period or more late runs as the newest
due tick and the skipped ones are counted as missed: never a burst of catch-up commands.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Protocol

import numpy as np


class Clock(Protocol):
    """Seconds on a monotonic time base, and a way to wait for a deadline on it."""

    def now(self) -> float: ...

    def sleep_until(self, deadline: float) -> None: ...


SPIN_FRACTION = 0.2  # of the period, at most: what a loop may spend spinning before each tick


class MonotonicClock:
    """perf_counter (CLOCK_MONOTONIC on Linux, shared by all processes); sleep, then spin."""

    def __init__(self, spin_s: float = 0.001) -> None:
        self.spin_s = spin_s
        self.now = time.perf_counter

    def fit_period(self, period: float) -> None:
        """Spin for at most SPIN_FRACTION of the period. A spinning thread holds the GIL: at 1 kHz a 1 ms spin never
        slept, so the feeder and worker threads took the GIL from it by the switch interval and the tick began a
        period late (4.6% of ticks missed, against 0-1 in 5,000 with 0.2 ms: docs/decisions/0014)."""
        self.spin_s = min(self.spin_s, SPIN_FRACTION * period)

    def sleep_until(self, deadline: float) -> None:
        rest = deadline - time.perf_counter() - self.spin_s
        if rest > 0:
            time.sleep(rest)
        while time.perf_counter() < deadline:
            pass


class PolledClock:
    """Seconds read from a callable (ROS time under use_sim_time, given by the node); a wait polls it,
    so the loop runs on simulated time: faster, slower or paused with the simulation. `wake` ends a
    wait at once (stop), since the time it waits for may never come."""

    def __init__(self, now: Callable[[], float], poll_s: float = 0.001) -> None:
        self.now = now
        self.poll_s = poll_s
        self._wake = threading.Event()

    def sleep_until(self, deadline: float) -> None:
        """Returns at the deadline, when woken, or when time goes back (a simulation reset, a bag replayed
        from its start): the deadline may then be hours away."""
        start = t = self.now()
        while start <= t < deadline and not self._wake.wait(self.poll_s):
            t = self.now()

    def wait_for_start(self) -> bool:
        """Wait until time is running (ROS time is 0 until the first /clock); False when woken first."""
        while self.now() <= 0.0:
            if self._wake.wait(self.poll_s):
                return False
        return True

    def wake(self) -> None:
        self._wake.set()

    def rearm(self) -> None:
        self._wake.clear()


class ManualClock:
    """A clock that only moves when told to (tests, simulated time)."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def sleep_until(self, deadline: float) -> None:
        if deadline > self.t:
            self.t = deadline

    def advance(self, dt: float) -> None:
        self.t += dt


class TickStats:
    """Lateness ring buffer and counters, preallocated so recording allocates nothing."""

    def __init__(self, window: int = 100_000) -> None:
        self._late = np.zeros(window, dtype=np.float64)
        self._scratch = np.zeros(window, dtype=np.float64)
        self.ticks = 0
        self.missed = 0
        self.overruns = 0
        self.clock_jumps_back = 0
        self.max_lateness = 0.0

    def record(self, lateness: float) -> None:
        self._late[self.ticks % self._late.shape[0]] = lateness
        self.ticks += 1
        if lateness > self.max_lateness:
            self.max_lateness = lateness

    def percentile(self, q: float) -> float:
        """Lateness percentile (s) over the window; sorts a scratch copy (no allocation)."""
        n = min(self.ticks, self._late.shape[0])
        if n == 0:
            return 0.0
        s = self._scratch[:n]
        np.copyto(s, self._late[:n])
        s.sort()
        return float(s[min(n - 1, int(q / 100.0 * n))])

    def recent(self, q: float, last: int) -> tuple[float, float]:
        """Percentile `q` and max (s) of the newest `last` samples: what the loop does now, on a span the
        caller chooses (diagnostics: the supervisor's 10 s). Sorts into the scratch buffer (no allocation)."""
        size = self._late.shape[0]
        n = min(self.ticks, size, max(int(last), 1))
        if n == 0:
            return 0.0, 0.0
        end = self.ticks % size
        start = end - n
        s = self._scratch[:n]
        if start >= 0:
            np.copyto(s, self._late[start:end])
        else:
            np.copyto(s[:-start], self._late[start:])
            np.copyto(s[-start:], self._late[:end])
        s.sort()
        return float(s[min(n - 1, int(q / 100.0 * n))]), float(s[n - 1])

    def lateness_s(self) -> np.ndarray:
        """A copy of the recorded lateness samples (s), oldest first once the window wrapped (allocates)."""
        if self.ticks <= self._late.shape[0]:
            return self._late[:self.ticks].copy()
        i = self.ticks % self._late.shape[0]
        return np.concatenate([self._late[i:], self._late[:i]])

    def reset(self) -> None:
        self.ticks = self.missed = self.overruns = self.clock_jumps_back = 0
        self.max_lateness = 0.0

    def summary(self) -> dict[str, float | int]:
        return {
            "ticks": self.ticks,
            "missed_ticks": self.missed,
            "overruns": self.overruns,
            "clock_jumps_back": self.clock_jumps_back,
            "p50_lateness_ms": 1e3 * self.percentile(50),
            "p99_lateness_ms": 1e3 * self.percentile(99),
            "max_lateness_ms": 1e3 * self.max_lateness,
        }


TickFn = Callable[[int, float], None]
"""Called once per tick with (tick index k, nominal tick time t0 + k * period)."""


class Scheduler:
    """Calls `tick_fn` at a fixed rate until stopped; records lateness, missed ticks, overruns."""

    def __init__(self, rate_hz: float, tick_fn: TickFn, clock: Clock | None = None, window: int = 100_000,
                 rt_priority: int = 0) -> None:
        """`rt_priority` > 0: run the loop thread under SCHED_FIFO at that priority when the OS allows
        (ros2_control does the same); on a busy machine it keeps other processes from delaying ticks."""
        if rate_hz <= 0:
            raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
        self.rt_priority = rt_priority
        self.rt_status = "off"
        self.period = 1.0 / rate_hz
        self.tick_fn = tick_fn
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        fit = getattr(self.clock, "fit_period", None)
        if fit is not None:
            fit(self.period)
        self.stats = TickStats(window)
        self._stop = threading.Event()
        self.t0 = 0.0
        self.next_tick = 0  # tick indices keep increasing across run() calls (the queue is on ticks)

    def stop(self) -> None:
        self._stop.set()
        wake = getattr(self.clock, "wake", None)  # a PolledClock may be waiting for time that never comes
        if wake is not None:
            wake()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, max_ticks: int | None = None, start: float | None = None) -> None:
        """Run ticks until `stop()` or until stats.ticks reaches `max_ticks` (missed ones not counted).

        Tick k of this run is due at t0 + (k - k0) * period, k0 being the first tick of the run. A stop asked for
        before the run began (a lifecycle deactivate racing the activate's new thread) ends it before its first
        tick; the request is spent when the run returns."""
        try:
            self._run(max_ticks, start)
        finally:
            self._stop.clear()

    def _run(self, max_ticks: int | None, start: float | None) -> None:
        rearm = getattr(self.clock, "rearm", None)
        if rearm is not None:
            rearm()
        if self.rt_priority > 0:
            self.rt_status = set_realtime_priority(self.rt_priority)
        period = self.period
        clock = self.clock
        stats = self.stats
        last = clock.now()
        self.t0 = t0 = last if start is None else start
        k = k0 = self.next_tick
        while not self._stop.is_set() and (max_ticks is None or stats.ticks < max_ticks):
            deadline = t0 + (k - k0) * period
            clock.sleep_until(deadline)
            now = clock.now()
            if now < last:
                # Time went back (ROS time: a simulation reset, a bag replayed from its start): the schedule
                # restarts from now instead of waiting for the old deadline; inputs captured before the jump
                # are then ahead of the loop's time, which the controller treats as stale (it holds).
                self.t0 = t0 = deadline = now
                k0 = k
                stats.clock_jumps_back += 1
            elif now < deadline and not self._stop.is_set():
                continue  # woken by a jump back that left time after the last tick: the deadline still stands
            last = now
            late = now - deadline
            if late >= period:
                skip = int(late // period)
                k += skip
                stats.missed += skip
                deadline = t0 + (k - k0) * period
                late = now - deadline
            stats.record(late)
            self.tick_fn(k, deadline)
            if clock.now() - deadline > period:
                stats.overruns += 1
            k += 1
            self.next_tick = k


def threads_priority_below(loop_priority: int) -> int:
    """The SCHED_FIFO priority of a loop's Python threads: just below its loop thread, which must preempt them;
    0 (normal scheduling) where the loop itself is not above the lowest real-time priority."""
    return loop_priority - 1 if 1 < loop_priority <= 99 else 0


def raise_python_threads(priority: int) -> str:
    """SCHED_FIFO `priority` for this process's Python threads below it (the executor, a client's reader): a
    normal-priority thread preempted by another process while it holds the GIL keeps a SCHED_FIFO loop thread
    waiting (the supervisor measured 8 ms on a busy machine). Native threads (DDS's, BLAS pools) never take the GIL
    and keep their priority: an idle BLAS worker spin-waits, which must not happen above normal processes.
    Never lowers a thread. SCHED_RESET_ON_FORK: neither a child process nor a thread started later inherits it
    (the kernel resets both), so call again once new threads exist."""
    reset = getattr(os, "SCHED_RESET_ON_FORK", 0)
    raised = 0
    for thread in threading.enumerate():
        tid = thread.native_id
        try:
            if tid is None:
                continue
            realtime = (os.sched_getscheduler(tid) & ~reset) in (os.SCHED_FIFO, os.SCHED_RR)
            if realtime and os.sched_getparam(tid).sched_priority >= priority:
                continue  # the loop thread, above
            os.sched_setscheduler(tid, os.SCHED_FIFO | reset, os.sched_param(priority))
            raised += 1
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except (AttributeError, OSError) as exc:
            return f"SCHED_FIFO {priority} unavailable for the Python threads ({exc}); {raised} raised before"
    return f"SCHED_FIFO {priority} for the Python threads ({raised} raised)"


def set_realtime_priority(priority: int) -> str:
    """SCHED_FIFO for the calling thread; returns what happened (no privilege is not an error).

    SCHED_RESET_ON_FORK: a worker process restarted from this thread runs at normal priority."""
    try:
        policy = os.SCHED_FIFO | getattr(os, "SCHED_RESET_ON_FORK", 0)
        os.sched_setscheduler(0, policy, os.sched_param(priority))
    except (AttributeError, OSError) as exc:
        return f"SCHED_FIFO {priority} unavailable ({exc}); running at normal priority"
    return f"SCHED_FIFO {priority}"
