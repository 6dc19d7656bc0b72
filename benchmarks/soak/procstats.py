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


def machine_cpu() -> tuple[float, float]:
    """(busy, stolen) CPU seconds of the whole machine since boot, from /proc/stat: busy is every state but idle
    and iowait (this graph included); stolen is time the hypervisor ran someone else on our virtual CPUs."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / tick, steal / tick


def cpu_use(before: tuple[float, float], after: tuple[float, float], wall_s: float) -> dict[str, float]:
    """Cores busy and cores stolen on average between two machine_cpu() readings `wall_s` apart."""
    return {"busy_cores": round((after[0] - before[0]) / wall_s, 3),
            "stolen_cores": round((after[1] - before[1]) / wall_s, 4)}


def slope_per_hour(samples: list[tuple[float, float, int]], index: int, after: float) -> float | None:
    """Least-squares growth per hour of sample field `index` over the samples after `after` seconds."""
    pts = [(s[0], float(s[index])) for s in samples if s[0] >= after]
    if len(pts) < 3:
        return None
    n = len(pts)
    mt, mv = sum(t for t, _ in pts) / n, sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    return None if den == 0 else round(3600.0 * sum((t - mt) * (v - mv) for t, v in pts) / den, 3)
