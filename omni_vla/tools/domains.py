"""DDS domain ids claimed per process, so graphs started by concurrent test runs and benchmarks on one machine
never hear each other (two simulators on one /joint_states read as impossible velocities)."""
from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path

FIRST, LAST = 101, 232  # 232 is the last domain Fast DDS's default port mapping allows; below 101 left to users
KEEP = 16  # unpinned claims one process holds at once; its oldest is released past this (its graph has long stopped)
LOCK_DIR = Path("/tmp/omni_vla-dds-domains")  # not $TMPDIR: every run on the machine must see the same locks

_held: list[tuple[int, int]] = []  # (domain, open lock file descriptor) of unpinned claims, oldest first
_pinned: list[tuple[int, int]] = []  # claims held until the process ends (a session's or a module's domain)


class NoFreeDomain(RuntimeError):
    """Every domain in FIRST..LAST is held by some process on this machine."""


def _lock(domain: int) -> int | None:
    """An flock on the domain's file, or None when another process holds it (or the file cannot be opened)."""
    path = LOCK_DIR / f"{domain}.lock"
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    except PermissionError:  # another user's lock file: a read-only descriptor locks as well
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def claim_domain(rng: random.Random | None = None, pin: bool = False) -> int:
    """A domain id no other live process on this machine has claimed, held (an flock) until this process ends or,
    unpinned, makes KEEP newer unpinned claims. A crashed holder's lock goes with it: nothing stale to clean.
    OSError when the lock directory cannot be made."""
    rng = rng or random.Random()
    if not LOCK_DIR.is_dir():
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(LOCK_DIR, 0o1777)  # every user's runs share it, as they share /tmp
        except PermissionError:
            pass
    mine = {d for d, _ in _held + _pinned}
    candidates = [d for d in range(FIRST, LAST + 1) if d not in mine]
    rng.shuffle(candidates)
    for domain in candidates:
        fd = _lock(domain)
        if fd is None:
            continue
        if pin:
            _pinned.append((domain, fd))
            return domain
        _held.append((domain, fd))
        while len(_held) > KEEP:
            os.close(_held.pop(0)[1])
        return domain
    raise NoFreeDomain(f"no free DDS domain in {FIRST}..{LAST}: every one is claimed under {LOCK_DIR}")


def lock_fds(domain: int | None) -> tuple[int, ...]:
    """This process's lock descriptors for `domain`, to pass to the processes it starts on it (Popen pass_fds): they
    then hold the claim as long as they run, past this process's end or its release of the claim."""
    return tuple(fd for d, fd in _held + _pinned if d == domain)
