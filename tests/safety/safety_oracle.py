"""An independent oracle for the safety supervisor's invariants, written apart from safety/.

It reads limits itself (plain YAML, or numbers a test takes from MuJoCo's compiled model),
keeps its own model of when the robot may move (valid, fresh command; fresh joint state; no
e-stop), recomputes the command kinematics from the published positions only (v = dq/dt,
a = dv/dt, j = da/dt), and reports every output that breaks an invariant:
finite; inside the position range (or, having started outside, never further out); |v|, |a|,
|j| within the limits less the margin; able to stop before the range ends; and whenever the
robot may not move, a stop that never reverses a joint, ends at rest within the braking time and
distance, then a hold with no motion. Nothing here imports omni_vla_safety.

Braking bounds, derived here. A joint with a jerk limit J and deceleration limit D, moving at v > 0
with acceleration a, stops fastest by ramping the acceleration down at -J to a peak deceleration
p = min(D, sqrt(J v + a^2 / 2)), holding p, and ramping back to zero at +J, reaching v = 0 and a = 0
together: time (a + 2 p) / J + max(0, v + a^2 / 2J - p^2 / J) / p. It can stop without reversing
only if v >= a^2 / 2J when a < 0. The published stream holds per-period averages: a command's
acceleration is the mean over its period of an acceleration that may change at J, so the acceleration
at the period's end lies within J dt / 2 of it; the bounds start from the least favourable such value
and allow one period for the stop to land on a tick (`STOP_TICKS`). Without a jerk limit: v / D, at
the deceleration limit every period.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml

# Floating-point slack, per unit of the checked quantity.
EPS_Q, EPS_V, EPS_A, EPS_J = 1e-9, 1e-7, 1e-4, 1e-1
# How far (rad/s^2) a braking acceleration may lie beyond the no-reversal curve |a| = sqrt(2 J v): the rounding of
# accelerations from position differences at 1 kHz (~1e-9 and up); the reversal it implies is ~|a| EPS_CURVE / J.
EPS_CURVE = 1e-6
STOP_TICKS = 0  # periods a stop may take beyond its braking time (fuzzing found none needed)


@dataclass(frozen=True)
class Joint:
    """One joint's limits as the oracle reads them (jerk inf when not limited)."""

    lo: float
    hi: float
    vmax: float
    amax: float
    dmax: float
    jmax: float = math.inf


def joints_from_yaml(path: str | Path, names: Sequence[str]) -> list[Joint]:
    """ros2_control joint_limits YAML -> Joint, soft limits narrowing the range; read without safety/."""
    table = yaml.safe_load(Path(path).read_text())["joint_limits"]
    return [joint_from_fields(table[n]) for n in names]


def joint_from_fields(f: dict) -> Joint:
    lo, hi = float(f["min_position"]), float(f["max_position"])
    if "soft_lower_limit" in f:
        lo, hi = max(lo, float(f["soft_lower_limit"])), min(hi, float(f["soft_upper_limit"]))
    acc = float(f["max_acceleration"])
    dec = float(f["max_deceleration"]) if f.get("has_deceleration_limits") else acc
    jerk = float(f["max_jerk"]) if f.get("has_jerk_limits") else math.inf
    return Joint(lo, hi, float(f["max_velocity"]), acc, dec, jerk)


@dataclass
class Rules:
    """The supervisor's contract, restated: timeouts, stamp window, acceptance bounds, margin."""

    dt: float
    command_timeout: float
    state_timeout: float
    max_future: float
    tolerance: list[float]
    refuse_out_of_range: bool
    margin: float


@dataclass
class Violation:
    step: int
    kind: str
    joint: int
    detail: str


@dataclass
class Oracle:
    names: list[str]
    joints: list[Joint]
    rules: Rules
    step: int = 0
    violations: list[Violation] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state_time = -math.inf
        self.started = False
        self.target_time: float | None = None
        self.estop_in = False
        self.latched = False
        self.q: list[float] = []
        self.v: list[float] = []
        self.a: list[float] = []
        self.stop_from: list[tuple[float, float, float]] | None = None  # per joint: position, time and distance bound
        self.stop_step = 0
        self.outside: list[float] = []
        keep = 1.0 - self.rules.margin
        self.vmax = [j.vmax * keep for j in self.joints]
        self.amax = [j.amax * keep for j in self.joints]
        self.dmax = [j.dmax * keep for j in self.joints]
        self.jmax = [j.jmax * keep for j in self.joints]

    # ---- inputs (what the supervisor is told) ----
    def joint_state(self, names: Sequence[str], positions: Sequence[float], now: float) -> None:
        if len(names) != len(positions) or len(set(names)) != len(names) or not math.isfinite(now):
            return
        lookup = dict(zip(names, positions))
        if any(n not in lookup or not math.isfinite(lookup[n]) for n in self.names):
            return
        tol = self.rules.tolerance  # a measurement beyond the range by more than the tolerance is no measurement
        if any(not (j.lo - tol[i] <= lookup[n] <= j.hi + tol[i]) for i, (n, j) in enumerate(zip(self.names, self.joints))):
            return
        if not self.started:
            self.started = True
            self.q = [float(lookup[n]) for n in self.names]
            self.v = [0.0] * len(self.names)
            self.a = [0.0] * len(self.names)
            self.outside = [self._outside(i, self.q[i]) for i in range(len(self.names))]
        self.state_time = now

    def command(self, names: Sequence[str], positions: Sequence[float], stamp: float | None, now: float) -> None:
        if self.latched:
            return
        self.target_time = self._valid_time(names, positions, stamp, now)

    def trajectory(self, names: Sequence[str], rows: Sequence[tuple[float, Sequence[float]]], stamp: float | None,
                   now: float) -> None:
        """A proposal of rows is valid only as a whole: times finite, from 0 on, strictly increasing, at most
        1000 rows, and every row a valid command; whatever its rows, it allows motion as one command does."""
        if self.latched:
            return
        times = [t for t, _ in rows]
        ordered = all(math.isfinite(t) for t in times) and all(b > a for a, b in zip(times, times[1:]))
        if not rows or len(rows) > 1000 or not ordered or times[0] < 0:
            self.target_time = None
            return
        valid = [self._valid_time(names, positions, stamp, now) for _, positions in rows]
        self.target_time = None if any(v is None for v in valid) else valid[0]

    def _valid_time(self, names: Sequence[str], positions: Sequence[float], stamp: float | None,
                    now: float) -> float | None:
        r = self.rules
        if not (self.started and now - self.state_time <= r.state_timeout):
            return None
        if len(names) != len(positions) or sorted(names) != sorted(self.names) or len(set(names)) != len(names):
            return None
        by_name = dict(zip(names, positions))
        for i, n in enumerate(self.names):
            x = by_name[n]
            if not math.isfinite(x):
                return None
            if r.refuse_out_of_range and not (self.joints[i].lo - r.tolerance[i] <= x <= self.joints[i].hi + r.tolerance[i]):
                return None
        if stamp is None:
            return now
        if not math.isfinite(stamp) or now - stamp > r.command_timeout or stamp - now > r.max_future:
            return None
        return stamp

    def estop(self, value: bool) -> None:
        self.estop_in = value
        if value:
            self.latched = True
            self.target_time = None

    def reset_estop(self, accepted: bool) -> None:
        if accepted and self.latched and self.estop_in:
            self._flag("estop_reset_while_pressed", -1, "reset accepted while the e-stop input is true")
        if accepted:
            self.latched = False

    # ---- outputs (what the robot hears) ----
    def may_move(self, now: float) -> bool:
        r = self.rules
        return (not self.latched and now - self.state_time <= r.state_timeout and self.target_time is not None
                and now - self.target_time <= r.command_timeout)

    def output(self, out: Sequence[float] | None, now: float) -> None:
        self.step += 1
        if out is None:
            if self.started:
                self._flag("no_output", -1, "nothing published after a joint state was received")
            return
        if not self.started:
            self._flag("output_before_state", -1, "published before any valid joint state")
            return
        if not self.may_move(now):
            self.target_time = None  # a lost target stays lost until a new valid command
        moving_allowed = self.target_time is not None and self.may_move(now)
        if moving_allowed:
            self.stop_from = None
        elif self.stop_from is None:
            self.stop_from = [self._stop_bounds(i) for i in range(len(self.names))]
            self.stop_step = self.step - 1
        dt, n = self.rules.dt, len(self.names)
        for i in range(n):
            q = out[i]
            if not math.isfinite(q):
                self._flag("non_finite", i, f"output {q}")
                continue
            v = (q - self.q[i]) / dt
            a = (v - self.v[i]) / dt
            j = (a - self.a[i]) / dt
            self._check_joint(i, q, v, a, j, moving_allowed)
            self.q[i], self.v[i], self.a[i] = q, v, a

    def _check_joint(self, i: int, q: float, v: float, a: float, j: float, moving_allowed: bool) -> None:
        jt, dt = self.joints[i], self.rules.dt
        out = self._outside(i, q)
        if out > self.outside[i] + EPS_Q:
            self._flag("position", i, f"{q:.9g} outside [{jt.lo}, {jt.hi}] by {out:.3g}")
        self.outside[i] = min(self.outside[i], out) if out > 0 else 0.0
        if abs(v) > self.vmax[i] + EPS_V:
            self._flag("velocity", i, f"|v| {abs(v):.6g} > {self.vmax[i]:.6g}")
        v_prev = self.v[i]
        slowing = v_prev != 0.0 and a * v_prev < 0.0
        bound = self.dmax[i] if slowing else self.amax[i]
        if abs(a) > bound + EPS_A:
            self._flag("deceleration" if slowing else "acceleration", i, f"|a| {abs(a):.6g} > {bound:.6g}")
        if abs(j) > self.jmax[i] + EPS_J:
            self._flag("jerk", i, f"|j| {abs(j):.6g} > {self.jmax[i]:.6g}")
        if q <= jt.hi and v > math.sqrt(2.0 * self.dmax[i] * (jt.hi - q)) + 1e-6:
            self._flag("stopping_distance", i, f"v {v:.6g} cannot stop before {jt.hi}")
        if q >= jt.lo and -v > math.sqrt(2.0 * self.dmax[i] * (q - jt.lo)) + 1e-6:
            self._flag("stopping_distance", i, f"v {v:.6g} cannot stop before {jt.lo}")
        if not moving_allowed and self.stop_from is not None:
            self._check_stop(i, q, v, v_prev)

    def _check_stop(self, i: int, q: float, v: float, v_prev: float) -> None:
        dt = self.rules.dt
        if v * v_prev < -EPS_V * EPS_V:
            self._flag("stop_reversed", i, f"v {v_prev:.6g} -> {v:.6g} while stopping")
        elif abs(v_prev) <= EPS_V and abs(self.a[i]) <= EPS_A and abs(v) > EPS_V:
            self._flag("moved_after_stop", i, f"v {v_prev:.6g} -> {v:.6g} while holding")
        elif self.jmax[i] == math.inf and abs(v) > abs(v_prev) + EPS_V:
            self._flag("stop_not_monotone", i, f"v {v_prev:.6g} -> {v:.6g} while stopping")
        elif self.jmax[i] == math.inf and abs(v_prev) > EPS_V and abs(v) > max(0.0, abs(v_prev) - self.dmax[i] * dt) + EPS_V:
            self._flag("stop_too_slow", i, f"v {v_prev:.6g} -> {v:.6g}: not braking at the deceleration limit")
        q0, time_bound, distance_bound = self.stop_from[i]
        elapsed = (self.step - self.stop_step) * dt
        if elapsed > time_bound + STOP_TICKS * dt + 1e-9 and abs(v) > EPS_V:
            self._flag("stop_time", i, f"v {v:.6g} after {elapsed:.6g} s (braking time {time_bound:.6g} s)")
        if abs(q - q0) > distance_bound + EPS_Q:
            self._flag("braking_distance", i, f"moved {abs(q - q0):.6g} since the stop began (allowed {distance_bound:.6g})")

    def _stop_bounds(self, i: int) -> tuple[float, float, float]:
        """Where joint i is, and how long and how far its stop from the last command's v, a may take."""
        dt, v, a, jm, dm = self.rules.dt, self.v[i], self.a[i], self.jmax[i], self.dmax[i]
        if v < 0.0 or (v == 0.0 and a < 0.0):  # at rest, the acceleration is the way the joint goes next
            v, a = -v, -a
        if jm == math.inf:
            return self.q[i], v / dm, v * v / (2.0 * dm) + v * dt + EPS_Q
        a = min(a + 0.5 * jm * dt, self.amax[i])  # the least favourable acceleration at the period's end
        if a < 0.0 and v * 2.0 * jm < a * a:
            # Beyond the no-reversal curve by more than rounding (EPS_CURVE; the fuzz's closest states were 6.5e-9
            # and 1.8e-8 rad/s^2 beyond it, from position differences): a stop from there must reverse.
            if -a > math.sqrt(2.0 * jm * v) + EPS_CURVE:
                self._flag("stop_unreachable", i, f"v {v:.6g}, a {a:.6g}: no jerk-limited stop avoids reversing")
            a = -math.sqrt(2.0 * jm * v)
        phases = scurve_stop(v, a, jm, dm)
        time_bound = sum(t for _, t in phases)
        # The published steps run ahead of the profile while it still speeds up (by dt times that gain).
        gain = a * a / (2.0 * jm) if a > 0.0 else 0.0
        distance = travel(v, a, phases) + (v + gain) * dt * STOP_TICKS + dt * gain
        return self.q[i], time_bound, distance + 1e-9

    def _outside(self, i: int, q: float) -> float:
        jt = self.joints[i]
        return max(q - jt.hi, jt.lo - q, 0.0)

    def _flag(self, kind: str, joint: int, detail: str) -> None:
        name = self.names[joint] if joint >= 0 else "all"
        self.violations.append(Violation(self.step, kind, joint, f"{name}: {detail}"))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.violations:
            out[v.kind] = out.get(v.kind, 0) + 1
        return out


def scurve_stop(v: float, a: float, jerk: float, dec: float) -> list[tuple[float, float]]:
    """(jerk, duration) phases of the fastest stop from v >= 0, a (v >= a^2 / 2J when a < 0), see the module
    docstring."""
    p = min(dec, math.sqrt(max(0.0, jerk * v + 0.5 * a * a)))
    hold = max(0.0, v + a * a / (2.0 * jerk) - p * p / jerk) / p if p > 0.0 else 0.0
    return [(-jerk, max(0.0, (a + p) / jerk)), (0.0, hold), (jerk, p / jerk)]


def travel(v: float, a: float, phases: Sequence[tuple[float, float]]) -> float:
    """Distance covered through constant-jerk phases from velocity v, acceleration a."""
    x = 0.0
    for j, t in phases:
        x += v * t + a * t * t / 2.0 + j * t ** 3 / 6.0
        v += a * t + j * t * t / 2.0
        a += j * t
    return x
