"""Fail-closed checks of a proposed command and of joint states, before any limiting.

ros2_control's limiters return the command unchanged when data is missing; here missing,
extra, duplicated or non-finite data rejects the command so the supervisor holds.
"""
from __future__ import annotations

from math import isfinite
from typing import Sequence

SIZE = "rejected_size"
NAMES = "rejected_names"
NON_FINITE = "rejected_non_finite"
STALE = "rejected_stale"
FUTURE = "rejected_future_stamp"
NO_JOINT_STATE = "rejected_no_joint_state"
NO_POINTS = "rejected_no_points"
OUT_OF_RANGE = "rejected_out_of_range"
TIMES = "rejected_times"


class Rejection(Exception):
    """A command or state that must not be used; `kind` is counted, the message logged."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class JointOrder:
    """Maps name-indexed messages onto the configured joint order."""

    def __init__(self, joint_names: Sequence[str]) -> None:
        self.names = list(joint_names)
        self.index = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError(f"duplicate joint names in {self.names}")

    def command(self, names: Sequence[str], positions: Sequence[float]) -> list[float]:
        """Positions of a command in joint order; exactly the configured joints, all finite."""
        if len(names) != len(positions):
            raise Rejection(SIZE, f"command has {len(names)} joint names but {len(positions)} positions")
        if len(positions) != len(self.names):
            raise Rejection(SIZE, f"command has {len(positions)} positions, expected {len(self.names)} "
                                  f"({', '.join(self.names)})")
        if list(names) == self.names:
            ordered = list(positions)
        else:
            ordered = [0.0] * len(self.names)
            seen = set()
            for name, value in zip(names, positions):
                i = self.index.get(name)
                if i is None:
                    raise Rejection(NAMES, f"command names unknown joint '{name}'")
                if i in seen:
                    raise Rejection(NAMES, f"command names joint '{name}' twice")
                seen.add(i)
                ordered[i] = value
        self.check_finite(ordered, "command")
        return ordered

    def state(self, names: Sequence[str], positions: Sequence[float]) -> list[float]:
        """Measured positions in joint order; extra joints (e.g. a mimic finger) are ignored."""
        if len(positions) != len(names):
            raise Rejection(SIZE, f"joint state has {len(names)} names but {len(positions)} positions")
        if list(names) == self.names:
            ordered = list(positions)
        else:
            lookup = dict(zip(names, positions))
            if len(lookup) != len(names):
                twice = sorted({n for n in names if list(names).count(n) > 1})
                raise Rejection(NAMES, f"joint state names joint '{twice[0]}' twice")
            try:
                ordered = [lookup[name] for name in self.names]
            except KeyError as exc:
                raise Rejection(NAMES, f"joint state lacks joint '{exc.args[0]}'") from None
        self.check_finite(ordered, "joint state")
        return ordered

    def check_finite(self, values: list[float], what: str) -> None:
        """One sum catches NaN and +-Inf in the common case; the loop names the joint."""
        if isfinite(sum(values)):
            return
        for name, value in zip(self.names, values):
            if not isfinite(value):
                raise Rejection(NON_FINITE, f"{what} position of joint '{name}' is {value}")


def check_range(target: Sequence[float], lo: Sequence[float], hi: Sequence[float], names: Sequence[str]) -> None:
    """Refuse a target beyond the accepted bounds: a policy asking for that is broken, not to be obeyed."""
    for i, value in enumerate(target):
        if not lo[i] <= value <= hi[i]:
            raise Rejection(OUT_OF_RANGE, f"target {value:.6g} of joint '{names[i]}' is outside "
                                          f"[{lo[i]:.6g}, {hi[i]:.6g}] (position range plus out_of_range_tolerance)")


def check_age(stamp: float | None, now: float, timeout: float, max_future: float) -> float:
    """The command's time (its stamp, or `now` for a zero stamp); refuses old, future and non-finite stamps."""
    if stamp is None:
        return now
    if not (isfinite(stamp) and isfinite(now)):
        raise Rejection(STALE, f"command stamp {stamp} or receive time {now} is not finite")
    age = now - stamp
    if age > timeout:
        raise Rejection(STALE, f"command is {age:.3f} s old, older than command_timeout_s {timeout:.3f}")
    if age < -max_future:
        raise Rejection(FUTURE, f"command stamp is {-age:.3f} s in the future (max_future_stamp_s "
                                f"{max_future:.3f}): clocks disagree")
    return stamp


def check_times(offsets: Sequence[float], limit: int) -> None:
    """Trajectory rows must be finite, not negative, strictly increasing in time_from_start, and few
    enough to check every period (`limit`)."""
    if len(offsets) > limit:
        raise Rejection(SIZE, f"trajectory has {len(offsets)} points, more than {limit}")
    last = 0.0
    for k, t in enumerate(offsets):
        if not (isfinite(t) and t >= 0.0 and (k == 0 or t > last)):
            raise Rejection(TIMES, f"point {k} time_from_start {t} is not finite, not negative and after "
                                   f"the previous point's ({last if k else 'none'})")
        last = t
