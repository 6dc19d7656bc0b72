"""Real-time scheduling for the supervisor's tick: SCHED_FIFO, and absolute deadlines that never drift.

omni_vla.core.loop keeps its own SCHED_FIFO call and Scheduler: the robot core never imports the
supervisor's package (tests/test_architecture.py), and this package imports nothing of the project.
"""
from __future__ import annotations

import os
import time
from array import array
from typing import Callable

SPIN_S = 0.0005  # sleep until this close to a deadline, then spin on the clock (the kernel's wake-up slack)
LATENESS_WINDOW = 1000  # wake-ups kept for the lateness percentile (10 s at 100 Hz)


def set_realtime_priority(priority: int) -> str:
    """SCHED_FIFO for the calling thread when the OS allows; returns what happened (no privilege is not an
    error: the node runs at normal priority and says so). SCHED_RESET_ON_FORK: no child inherits it."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | getattr(os, "SCHED_RESET_ON_FORK", 0), os.sched_param(priority))
    except (AttributeError, OSError) as exc:
        return f"SCHED_FIFO {priority} unavailable ({exc}); normal priority"
    return f"SCHED_FIFO {priority}"


class DeadlineTicker:
    """Absolute deadlines (next = previous + period: no drift); a late wake-up skips to the newest due
    deadline and counts the skipped ones, so a stall gives one tick per period afterwards, never a burst.

    `clock`/`sleep` are injectable so the deadlines can be checked without real time."""

    def __init__(self, period: float, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], object] = time.sleep, spin_s: float = SPIN_S,
                 window: int = LATENESS_WINDOW) -> None:
        if period <= 0:
            raise ValueError(f"period must be > 0, got {period}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.period = period
        self.clock = clock
        self.sleep = sleep
        self.spin_s = spin_s
        self.deadline = clock()
        self.ticks = 0
        self.missed = 0
        self.max_lateness = 0.0
        self._late = array("d", bytes(8 * window))

    def wait(self) -> float:
        """Block until the next deadline (sleep, then spin the last `spin_s`); returns the lateness (s)."""
        period = self.period
        self.deadline += period
        rest = self.deadline - self.clock() - self.spin_s
        if rest > 0:
            self.sleep(rest)
        while self.clock() < self.deadline:
            pass
        late = self.clock() - self.deadline
        if late >= period:
            skipped = int(late // period)
            self.missed += skipped
            self.deadline += skipped * period
            late -= skipped * period
        self._late[self.ticks % len(self._late)] = late
        self.ticks += 1
        self.max_lateness = max(self.max_lateness, late)
        return late

    def recent_lateness(self) -> tuple[float, float]:
        """p99 and max of the last `window` wake-ups (s): the steady state, not start-up."""
        n = min(self.ticks, len(self._late))
        recent = sorted(self._late[:n])
        return (recent[int(0.99 * (n - 1))], recent[-1]) if n else (0.0, 0.0)
