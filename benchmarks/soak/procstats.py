"""What both soaks sample and how they summarise it: a process's RSS and open fds from /proc, and growth per hour."""
from __future__ import annotations

import os
from pathlib import Path


def proc_sample(pid: int) -> tuple[float, int] | None:
    """(RSS in MiB, open fds) of a live process; None once gone."""
    try:
        rss = next(int(ln.split()[1]) for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if ln.startswith("VmRSS:"))
        return rss / 1024.0, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


def slope_per_hour(samples: list[tuple[float, float, int]], index: int, after: float) -> float | None:
    """Least-squares growth per hour of sample field `index` over the samples after `after` seconds."""
    pts = [(s[0], float(s[index])) for s in samples if s[0] >= after]
    if len(pts) < 3:
        return None
    n = len(pts)
    mt, mv = sum(t for t, _ in pts) / n, sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    return None if den == 0 else round(3600.0 * sum((t - mt) * (v - mv) for t, v in pts) / den, 3)
