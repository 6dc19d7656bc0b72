"""Command shaping: the rows the loop sends are rows the robot can follow, so the supervisor only has to check them.

A policy's plan is positions at the control rate; where a new chunk starts, or the policy asks a gripper to close
at once, consecutive rows imply velocity steps no arm can make, and the 100 Hz supervisor used to clamp them
(about 37 acceleration/deceleration and 65 gripper max-step clamps per reference episode). The shaper turns the
wanted row into the next row of a motion that keeps, per joint, to `fraction` of the robot's velocity and
acceleration limits: it approaches the wanted row at the braking speed (the speed from which braking at the
limit stops on it; discrete: v^2 + a dt v <= 2 a |e|), changes velocity by at most a dt per tick, and, for joints
with a lead bound, stays within that bound of the measured position (a gripper closing on an object). Where the
braking speed falls faster than a dt per tick the row is passed by a little (at most a dt^2 / 2: 1 cm on the
Panda's joint 1 at 20 Hz, 2.8 mm for a 0.4 rad step) and approached from the other side. The supervisor's limiter
form (v^2 + 2 a dt v <= 2 a |e|, never passing) brakes earlier and lost 12 of 400 validation episodes
(docs/decisions/0002; results/loop_settings.json). It is a trajectory filter, not a safety function: the supervisor still enforces every limit on what arrives.

State: the last row sent and its velocity. `reset` (a hold, a new episode) restarts from the measured position
at rest. Preallocated: no allocation per tick.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


class JointRates:
    """Per joint, in the loop's joint order: the velocity and acceleration the shaped rows keep to."""

    def __init__(self, max_velocity: Sequence[float], max_acceleration: Sequence[float]) -> None:
        self.max_velocity = np.asarray(max_velocity, np.float64)
        self.max_acceleration = np.asarray(max_acceleration, np.float64)
        if self.max_velocity.shape != self.max_acceleration.shape or self.max_velocity.ndim != 1:
            raise ValueError(f"every joint needs a finite positive velocity and acceleration limit (got "
                             f"{self.max_velocity.shape} velocities, {self.max_acceleration.shape} accelerations)")
        bad = [i for i in range(len(self.max_velocity))
               if not (0 < self.max_velocity[i] < np.inf and 0 < self.max_acceleration[i] < np.inf)]
        if bad:
            raise ValueError(f"every joint needs a finite positive velocity and acceleration limit (joints {bad})")

    @classmethod
    def from_limits(cls, limits: Mapping[str, Any], joint_names: Sequence[str]) -> "JointRates":
        """From a limits file's entries (ros2_control joint_limits fields: has_*/max_*), deceleration folded in
        (the smaller of acceleration and deceleration). A joint without an entry, or without a velocity or an
        acceleration limit, is refused naming it: a missing limit is never an infinite one."""
        vel, acc = [], []
        for name in joint_names:
            lim = limits.get(name)
            if lim is None:
                raise ValueError(f"command shaping: joint {name!r} has no entry in the limits file")
            if not lim.has_velocity_limits or not lim.has_acceleration_limits:
                raise ValueError(f"command shaping: joint {name!r} needs has_velocity_limits and "
                                 f"has_acceleration_limits in the limits file (or its overlay); "
                                 f"command_accel_fraction: 0 sends the rows unshaped")
            a = lim.max_acceleration
            if lim.has_deceleration_limits:
                a = min(a, lim.max_deceleration)
            vel.append(lim.max_velocity)
            acc.append(a)
        try:
            return cls(vel, acc)
        except ValueError as exc:
            raise ValueError(f"command shaping: {exc}; names {list(joint_names)}") from None


def parse_max_lead(entries: Sequence[str], joint_names: Sequence[str]) -> np.ndarray:
    """'joint=bound' entries -> per-joint lead bounds in joint order (inf where none). Unknown joints, bad or
    non-positive numbers and repeats are refused with one line."""
    lead = np.full(len(joint_names), np.inf)
    seen: set[str] = set()
    for entry in entries:
        name, sep, value = entry.partition("=")
        name = name.strip()
        if not sep or name not in joint_names:
            raise ValueError(f"command_max_lead entry {entry!r}: expected 'joint=bound' with a joint of {list(joint_names)}")
        if name in seen:
            raise ValueError(f"command_max_lead names {name!r} twice")
        try:
            bound = float(value)
        except ValueError:
            raise ValueError(f"command_max_lead entry {entry!r}: {value.strip()!r} is not a number") from None
        if not 0 < bound < np.inf:
            raise ValueError(f"command_max_lead entry {entry!r}: expected a positive finite bound")
        seen.add(name)
        lead[list(joint_names).index(name)] = bound
    return lead


class CommandShaper:
    """Wanted row + measured position -> the next row of a motion within `fraction` of `rates`."""

    def __init__(self, rates: JointRates, fraction: float, period_s: float, max_lead: np.ndarray | None = None) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"command shaping fraction {fraction} must be in (0, 1]")
        n = rates.max_velocity.shape[0]
        self.dt = float(period_s)
        self.vmax = fraction * rates.max_velocity
        self.adt = fraction * rates.max_acceleration * self.dt
        self.max_lead = np.full(n, np.inf) if max_lead is None else np.asarray(max_lead, np.float64)
        if self.max_lead.shape != (n,):
            raise ValueError(f"max_lead has {self.max_lead.shape} entries for {n} joints")
        self._leads = np.isfinite(self.max_lead)
        self._any_lead = bool(self._leads.any())
        # braking speed for an error e: -h + sqrt(h^2 + 2 a |e|) with h = a dt / 2
        self._h = 0.5 * self.adt
        self._h2 = self._h * self._h
        self._2a = 2.0 * fraction * rates.max_acceleration
        self.q = np.zeros(n)
        self.v = np.zeros(n)
        self.out = np.zeros(n)
        self._e = np.zeros(n)
        self._s = np.zeros(n)
        self._lo = np.zeros(n)
        self._hi = np.zeros(n)
        self._started = False

    def reset(self) -> None:
        """Restart from the next measured position, at rest."""
        self._started = False

    def __call__(self, want: np.ndarray, measured: np.ndarray) -> np.ndarray:
        """The row to send this tick (the shaper's reused buffer)."""
        q, v, e, s = self.q, self.v, self._e, self._s
        if not self._started:
            np.copyto(q, measured)
            v.fill(0.0)
            self._started = True
        np.subtract(want, q, out=e)
        np.abs(e, out=s)
        np.multiply(s, self._2a, out=s)
        np.add(s, self._h2, out=s)
        np.sqrt(s, out=s)
        np.subtract(s, self._h, out=s)  # braking speed
        np.minimum(s, self.vmax, out=s)
        np.divide(np.abs(e, out=self.out), self.dt, out=self.out)  # the speed that lands on the row this tick
        np.minimum(s, self.out, out=s)
        np.copysign(s, e, out=s)  # wanted velocity
        np.subtract(v, self.adt, out=e)
        np.maximum(s, e, out=s)
        np.add(v, self.adt, out=e)
        np.minimum(s, e, out=s)  # velocity change within a dt
        np.multiply(s, self.dt, out=e)
        np.add(q, e, out=self.out)
        if self._any_lead:  # within the bound of the measured position (joints without one untouched)
            np.subtract(measured, self.max_lead, out=self._lo)
            np.add(measured, self.max_lead, out=self._hi)
            np.maximum(self.out, self._lo, out=self.out, where=self._leads)
            np.minimum(self.out, self._hi, out=self.out, where=self._leads)
            np.subtract(self.out, q, out=e)
            np.divide(e, self.dt, out=s)
        np.copyto(q, self.out)
        np.copyto(v, s)
        return self.out
