"""The reference a supervisor tracks from proposals that are trajectories: rows with times.

Rows are interpolated linearly at the supervisor's period and averaged over the last `window`
samples (a box filter: a change of velocity between two rows is spread over the window instead
of one period). A new proposal replaces the buffered rows from its first row's time on and keeps
the earlier ones, as a proposal computed when the previous row falls due continues it. After the
last row the reference holds it. Plain Python, no ROS; times in seconds on the caller's clock.
"""
from __future__ import annotations

from typing import Sequence

Row = tuple[float, list[float]]


class Reference:
    """Position and velocity to track each period, from buffered rows."""

    def __init__(self, n: int, window: int, dt: float) -> None:
        if window < 1 or not dt > 0:
            raise ValueError(f"window must be >= 1 and dt > 0, got {window}, {dt}")
        self.dt = dt
        self.path: list[Row] | None = None  # (time, positions); the current segment starts at index k
        self.k = 0
        self.lin = [0.0] * n  # the linear interpolation at the last sample
        self.ring = [[0.0] * n for _ in range(window)]
        self.ring_k = 0
        self.position = [0.0] * n  # what to track: the mean of the ring
        self.velocity = [0.0] * n  # its change over the last period

    @property
    def active(self) -> bool:
        return self.path is not None

    @property
    def last(self) -> list[float]:
        """The final row (the rows end there at rest)."""
        assert self.path is not None
        return self.path[-1][1]

    def clear(self) -> None:
        self.path = None

    def kept(self, now: float, first: float) -> int:
        """How many buffered rows a proposal whose first row is at `first` would keep (those after `now`)."""
        return sum(1 for t, _ in self.path or () if now < t < first)

    def follow(self, now: float, rows: Sequence[Row], start: Sequence[float]) -> None:
        """Rows (absolute times, all after `now`, increasing) to follow: from where the reference is
        when it is active, else from `start` at rest (the window filled with it)."""
        if self.path is not None:
            self.sample(now)
            anchor = list(self.lin)
            kept = [row for row in self.path[self.k + 1:] if row[0] < rows[0][0]]
        else:
            anchor = list(start)
            kept = []
            for sample in self.ring:
                sample[:] = anchor
            self.position[:] = anchor
            self.velocity[:] = [0.0] * len(anchor)
        self.path = [(now, anchor)] + kept + list(rows)
        self.k = 0

    def sample(self, now: float) -> None:
        """The linear interpolation of the rows at `now` into `lin` (the last row once it is reached)."""
        path = self.path
        assert path is not None
        k = self.k
        while k + 1 < len(path) and path[k + 1][0] <= now:
            k += 1
        self.k = k
        if k + 1 >= len(path):
            self.lin[:] = path[k][1]
            return
        (t0, p0), (t1, p1) = path[k], path[k + 1]
        w = (now - t0) / (t1 - t0)
        w = 0.0 if w < 0.0 else w
        for i in range(len(p0)):
            self.lin[i] = p0[i] + w * (p1[i] - p0[i])

    def step(self, now: float) -> None:
        """One period: sample the rows, average the window into `position`, its change into `velocity`."""
        self.sample(now)
        ring = self.ring
        ring[self.ring_k][:] = self.lin
        self.ring_k = (self.ring_k + 1) % len(ring)
        m = 1.0 / len(ring)
        inv_dt = 1.0 / self.dt
        for i in range(len(self.lin)):
            total = 0.0
            for sample in ring:
                total += sample[i]
            r = total * m
            self.velocity[i] = (r - self.position[i]) * inv_dt
            self.position[i] = r
