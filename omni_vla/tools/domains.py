"""DDS domain ids claimed per process, so graphs started by concurrent test runs and benchmarks on one machine
never hear each other (two simulators on one /joint_states read as impossible velocities)."""
from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path

FIRST, LAST = 101, 232  # 232 is the last domain Fast DDS's default port mapping allows; below 101 left to users
KEEP = 16  # claims one process holds at once; its oldest is released past this (its graph has long stopped)
LOCK_DIR = Path("/tmp/omni_vla-dds-domains")  # not $TMPDIR: every run on the machine must see the same locks

_held: list[tuple[int, int]] = []  # (domain, open lock file descriptor), oldest first


class NoFreeDomain(RuntimeError):
    """Every domain in FIRST..LAST is held by some process on this machine."""


def claim_domain(rng: random.Random | None = None) -> int:
    """A domain id no other live process on this machine has claimed; held (an flock) until this process ends
    or makes KEEP newer claims. A crashed holder's lock goes with it, so nothing stale is left to clean."""
    rng = rng or random.Random()
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    mine = {d for d, _ in _held}
    candidates = [d for d in range(FIRST, LAST + 1) if d not in mine]
    rng.shuffle(candidates)
    for domain in candidates:
        fd = os.open(LOCK_DIR / f"{domain}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held.append((domain, fd))
        while len(_held) > KEEP:
            os.close(_held.pop(0)[1])
        return domain
    raise NoFreeDomain(f"no free DDS domain in {FIRST}..{LAST}: every one is claimed under {LOCK_DIR}")
