"""The machine's own wake-up lateness beside a soak, as cyclictest measures it: a process that only sleeps to absolute
deadlines (the supervisor's DeadlineTicker, without its spin) under SCHED_FIFO above every thread of the graph, and
prints every second the p99 and max of its last 10 s, as the nodes' diagnostics do.

Nothing of the graph can delay it, so what it sees is the host (stolen time, other tenants, interrupts): a node whose
p99 rises while the probe's does not has drifted; one whose p99 rises with it has met a noisier machine. It wakes
for microseconds 100 times a second, so it costs the graph nothing measurable.

    python benchmarks/soak/probe.py [--rate-hz 100] [--priority 90]     one line per second: t p99_ms max_ms
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

from omni_vla_safety.rt import LATENESS_WINDOW, DeadlineTicker, set_realtime_priority

RATE_HZ = 100.0  # the supervisor's rate
PRIORITY = 90  # above the supervisor (60) and vla_node (50)


def run(rate_hz: float, priority: int, seconds: float | None, out=sys.stdout) -> None:
    """Tick until killed (or `seconds`); one line per second, flushed: monotonic time, p99 and max (ms)."""
    status = set_realtime_priority(priority) if priority > 0 else "normal priority"
    print(f"# {status}; {rate_hz:g} Hz; p99/max over the last {LATENESS_WINDOW} wake-ups", file=out, flush=True)
    ticker = DeadlineTicker(1.0 / rate_hz, spin_s=0.0)
    per_line = max(1, round(rate_hz))
    end = None if seconds is None else time.monotonic() + seconds
    while end is None or time.monotonic() < end:
        for _ in range(per_line):
            ticker.wait()
        p99, worst = ticker.recent_lateness()
        print(f"{time.monotonic():.3f} {1e3 * p99:.4f} {1e3 * worst:.4f}", file=out, flush=True)


class Probe:
    """This script as a child of a soak: `take_window()` gives the worst p99 and max it printed since the last call."""

    def __init__(self, env: dict[str, str] | None = None, rate_hz: float = RATE_HZ, priority: int = PRIORITY) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--rate-hz", str(rate_hz),
                                      "--priority", str(priority)], stdout=subprocess.PIPE, text=True, env=env)
        self.status = ""
        self._lock = threading.Lock()
        self._worst: dict[str, float] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if line.startswith("#"):
                self.status = line[1:].strip()
                continue
            try:
                _, p99, worst = (float(x) for x in line.split())
            except ValueError:  # not a figure line (a warning): kept as the status's tail, the window unchanged
                self.status = f"{self.status}; unexpected line: {line.strip()[:200]}"
                continue
            with self._lock:
                self._worst["p99"] = max(self._worst.get("p99", 0.0), p99)
                self._worst["max"] = max(self._worst.get("max", 0.0), worst)

    def take_window(self) -> dict[str, float]:
        with self._lock:
            worst, self._worst = self._worst, {}
        return worst

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate-hz", type=float, default=RATE_HZ)
    ap.add_argument("--priority", type=int, default=PRIORITY, help="SCHED_FIFO priority (0: normal scheduling)")
    ap.add_argument("--seconds", type=float, help="stop after this long (default: until killed)")
    args = ap.parse_args(argv)
    if not 0 < args.rate_hz <= 1000 or not 0 <= args.priority <= 99:
        print(f"--rate-hz {args.rate_hz} / --priority {args.priority}: expected 0 < rate <= 1000 and 0 <= priority <= 99",
              file=sys.stderr)
        return 2
    try:
        run(args.rate_hz, args.priority, args.seconds)
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
