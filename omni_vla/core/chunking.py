"""Action-chunk queue on absolute tick indices, and the three ways a new chunk is spliced in.

A chunk requested at tick t0 holds the actions for ticks t0 .. t0+H-1. It becomes available at some
later tick t1; its first t1-t0 rows are then in the past and are dropped (time alignment), whatever
the strategy. The strategies differ only in what they ask of the policy and how old and new overlap:

- "rtc": real-time chunking by prefix conditioning. The request pins the new chunk's first d rows to
  the actions already committed for ticks t0..t0+d-1 (prefix, prefix_len=d), so the splice at
  t1 = t0+d is continuous by construction; the new chunk then replaces the queue.
- "average": LeRobot's async merge; on the overlap, old_weight * old + (1 - old_weight) * new.
- "naive": the new chunk replaces the queue; with `blend` K > 0 its first K rows are crossfaded from the rows
  it replaces (old weight (K - i) / (K + 1) on row i), so a jump where a chunk starts is spread over K + 1
  ticks instead of one.

Two buffers are swapped so that splicing allocates nothing.
"""
from __future__ import annotations

from typing import Literal, get_args

import numpy as np

Strategy = Literal["rtc", "average", "naive"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)


class ChunkQueue:
    """Actions for ticks [start, end); row i is the action for tick start + i.

    `capacity` (>= horizon) lets a longer plan (a cloud plan) be queued whole.
    """

    def __init__(self, horizon: int, action_dim: int, capacity: int | None = None) -> None:
        self.horizon = horizon
        self.action_dim = action_dim
        self.capacity = max(horizon, capacity or horizon)
        self._buf = np.zeros((self.capacity, action_dim), dtype=np.float64)
        self._spare = np.zeros((self.capacity, action_dim), dtype=np.float64)
        self.start = 0
        self.end = 0

    def clear(self) -> None:
        self.start = self.end = 0

    def remaining(self, tick: int) -> int:
        """Actions queued for ticks >= tick."""
        return max(0, self.end - max(tick, self.start))

    def action_at(self, tick: int, out: np.ndarray) -> bool:
        """Copy the action for `tick` into out; False if the queue has none."""
        if not self.start <= tick < self.end:
            return False
        np.copyto(out, self._buf[tick - self.start])
        return True

    def copy_range(self, tick: int, n: int, out: np.ndarray) -> int:
        """Copy up to n queued actions for ticks tick.. into out[:n]; returns how many."""
        if not self.start <= tick < self.end:
            return 0
        i = tick - self.start
        n = min(n, self.end - tick)
        np.copyto(out[:n], self._buf[i : i + n], casting="same_kind")
        return n

    def truncate(self, end: int) -> None:
        """Forget actions for ticks >= end."""
        self.end = max(self.start, min(self.end, end))

    def splice(self, chunk: np.ndarray, t0: int, t1: int, strategy: str, old_weight: float = 0.3,
               blend: int = 0) -> int:
        """Merge `chunk` (actions for ticks t0..t0+len-1) at tick t1; returns rows kept (0: all stale)."""
        if strategy not in STRATEGIES:  # refused even when the chunk turns out stale
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
        h = chunk.shape[0]
        if h > self.capacity:
            raise ValueError(f"chunk of {h} rows exceeds the queue capacity {self.capacity}")
        skip = t1 - t0
        if skip < 0:
            raise ValueError(f"chunk requested at tick {t0} cannot arrive earlier, at tick {t1}")
        keep = h - skip
        if keep <= 0:
            return 0
        new = self._spare
        np.copyto(new[:keep], chunk[skip:], casting="same_kind")
        if strategy == "average":
            lo = max(t1, self.start)
            hi = min(self.end, t0 + h)
            if hi > lo:
                ov_new = new[lo - t1 : hi - t1]
                ov_new *= 1.0 - old_weight
                ov_old = self._buf[lo - self.start : hi - self.start]
                ov_old *= old_weight  # the old buffer becomes the spare: scaling it in place is free
                ov_new += ov_old
        elif strategy == "naive" and blend > 0:
            for tick in range(max(t1, self.start), min(self.end, t1 + min(blend, keep))):
                w = (blend - (tick - t1)) / (blend + 1)
                row, old = new[tick - t1], self._buf[tick - self.start]
                row *= 1.0 - w
                old *= w  # the old buffer becomes the spare: scaling it in place is free
                row += old
        self._spare, self._buf = self._buf, new
        self.start = t1
        self.end = t1 + keep
        return keep


def rtc_prefix(queue: ChunkQueue, tick: int, d: int, max_prefix: int, prefix: np.ndarray) -> int:
    """Write the committed actions for ticks tick..tick+d-1 into prefix[0]; returns prefix_len.

    Only actions the queue really holds are pinned (fewer at start-up or after a hold)."""
    n = min(d, max_prefix)
    if n <= 0:
        return 0
    return queue.copy_range(tick, n, prefix[0])
