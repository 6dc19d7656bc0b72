"""CPU lists as taskset and isolcpus write them ("1", "2-5,7"): where the inference worker may run.

Why: on a robot's few cores the loop, the supervisor and the drivers must not queue behind a
multi-second inference; giving the worker its own cores is how a user says so.
"""
from __future__ import annotations


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs `text` names; empty text names none (no placement). ValueError names the bad part."""
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",")) if text.strip() else ():
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise ValueError(f"'{part}' is not a CPU number or range; expected a list like '1' or '2-5,7'") from None
        if first < 0 or last < first:
            raise ValueError(f"'{part}' is not a CPU range; expected first <= last, both >= 0")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: frozenset[int] | set[int]) -> str:
    """The compact form of `cpus` ("0-3,6"), for messages."""
    runs: list[str] = []
    for cpu in sorted(cpus):
        if runs and cpu == int(runs[-1].rpartition("-")[2]) + 1:
            runs[-1] = f"{runs[-1].partition('-')[0]}-{cpu}"
        else:
            runs.append(str(cpu))
    return ",".join(runs)
