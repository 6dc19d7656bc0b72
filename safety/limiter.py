"""Per-command joint limiting: position, stopping distance, velocity, acceleration, jerk, max step.

Works on the stream of commands this supervisor itself sends (position q, velocity v,
acceleration a of the last command, command period dt), as libfranka's limitRate does,
so the output is smooth whatever the proposals or the measurements look like. The limiter
trusts only its own command state: a measured position informs the max-step window, never
the kinematics, so a stale or wild measurement cannot make the command jump. Each tick the
new command velocity v' (q' = q + v' dt) is chosen from nested intervals, highest priority first:

1. the kinematic limits: velocity, acceleration/deceleration, jerk against the last command's
   acceleration, and room to stop before the position range ends (soft limits where set);
   in a stop, no reversal of the direction of motion (a stop ends at rest, never beyond it),
2. max step from the measured position (LeRobot's max_relative_target), braked for like the range,
3. soft-limit spring (ros2_control SoftJointLimits k_position),
4. no-overshoot approach of the target, clamped into the range (not a limit; never reported);
   when tracking a moving reference (`track`), the same approach in the reference's frame.

A lower-priority interval that does not intersect the higher ones cannot be met: the command goes
to the nearest edge of the higher-priority interval and that is reported as `<kind>_yielded`.
Interval 1 is never empty from a state this limiter produced, so every kinematic limit holds
whatever arrives. Why, for the two kinds of joint:

Without a jerk limit: v' <= B(x), B the largest speed from which braking at D in steps of dt
stops within the distance x to the range end: v'^2 + 2 D dt v' <= 2 D x, i.e. after the step
v' <= sqrt(2 D x'). The next tick can always decelerate within D (B(x') >= v' - D dt), and the
acceleration window switches with the sign of v (A speeding up, D slowing down).

With a jerk limit J (the acceleration window is then [-M, M], M = min(A, D): the acceleration
passes through zero continuously, also where v changes sign). Each command's acceleration a is
the mean over its period of some acceleration a(t) with |da/dt| <= J; the acceleration at the
period's end, alpha, then lies within J dt / 2 of a, and a continuous profile started from
(v, alpha) maps back to commands (period means of a(t)) that keep |a' - a| <= J dt and hit the
profile's velocity at every tick. A state is kept only if the fastest such profile, the S-curve
stop (acceleration ramped at -J to a peak deceleration <= M, held, ramped back to 0 as v reaches
0; `stop_excursion`, `stop_time`), started from the most favourable alpha, keeps every limit:
- no reversal: braking at a < 0 from v > 0 must leave v >= (alpha^-)^2 / 2J, i.e. sqrt(v') >=
  sqrt(v) - dt sqrt(J / 2): below that (and above rest) lies no stoppable velocity;
- velocity: the profile's peak v' + (alpha^+)^2 / 2J <= vmax (closed form in v');
- position: q' + stop_excursion(v', alpha) + dt (alpha^+)^2 / 2J within the range end (the last
  term: backward-Euler steps run ahead of the profile while it still speeds up); monotone in v',
  so its largest v' is found by regula falsi (Illinois), keeping the end that fits. Beyond the
  range end the excursion must be 0 (never further out).
The profile's first period is one such v' and its tail certifies the next state (alpha of the
next state lies at or below the profile's own), so from a kept state the next interval is never
empty: jerk never has to give way to position, velocity or the stop. A stop rides the bound
sqrt(v') = sqrt(v) - dt sqrt(J / 2) and lands at rest from v <= J dt^2 (holding then needs a jerk
of at most v / dt^2). In exact arithmetic all of this is exact; in floating point, moving joints
keep ROUNDING (1e-12, relative) inside the no-reversal bound (or ride it where the jerk window ends on it
within rounding, as a stop does; a window wholly short of it with rest out of reach rides its top, the velocity
nearest it, rather than break the jerk or deceleration limit: docs/decisions/0018), and bounds that meet within 1e-9
(relative) count as met; a jerk of 1e-9 / dt^2 (1e-3 rad/s^3 at 1 kHz) is the remaining tolerance.
The stop of a state never produced here (set by hand, or rounding beyond that) still never
reverses and never leaves the range: the jerk then gives way, reported as `jerk_yielded`.

`margin` keeps every rate limit (velocity, acceleration, deceleration, jerk) that fraction
below the configured one, so a servo that overshoots its command stays inside the real limit.
Plain-Python loops: at 7 joints they measured faster than numpy ufunc chains (see bench).
"""
from __future__ import annotations

from math import inf, isfinite, sqrt
from typing import Sequence

from omni_vla_safety.limits import JointLimitSet

POSITION = "position"
VELOCITY = "velocity"
MAX_STEP = "max_step"
ACCELERATION = "acceleration"
DECELERATION = "deceleration"
JERK = "jerk"
SOFT_LIMIT = "soft_limit"
UNIFORM_SCALE = "uniform_scale"
UNIFORM_SCALE_INFEASIBLE = "uniform_scale_infeasible"
_TARGET = ""  # approach curve: shapes the motion, is not an intervention
# Relative slack for bounds that meet in exact arithmetic (a stop riding its jerk-limited curve sits on both the
# jerk bound and its own): moving joints keep this much inside the curve, and a stop counts a velocity 1000 times
# as close (1e-9 relative; rounding that compounds while the acceleration ramps back to zero) as on it.
ROUNDING = 1e-12

# An intervention: (kind, joint index or -1 for all, limit value, requested, applied).
Record = tuple[str, int, float, float, float]


def stop_excursion(v: float, a: float, jerk: float, dec: float) -> float:
    """Farthest a joint at velocity v, acceleration a (a >= -dec) gets in the + direction on its way to rest
    (v = 0, a = 0) when |jerk| <= `jerk` and the acceleration stays >= -dec: the S-curve that ramps the
    acceleration down at -jerk to a peak deceleration, holds it, and ramps it back to zero as v reaches zero.
    0 when the joint can come to rest without moving forward (moving back, not pushed forward too hard); when
    it is braking too hard to end at rest without reversing (v < a^2 / 2J), what it travels before v = 0."""
    if v <= 0.0 and (a <= 0.0 or -v * 2.0 * jerk >= a * a):
        return 0.0
    if a < 0.0 and v * 2.0 * jerk < a * a:
        # Braking at a = -sqrt(2 J v) ends exactly at rest; braking harder travels less.
        return v * sqrt(2.0 * v / jerk) / 3.0
    ap2 = jerk * v + 0.5 * a * a  # peak deceleration squared of the ramp-down, ramp-up profile
    if ap2 <= dec * dec:
        ap, t2 = sqrt(ap2), 0.0
    else:
        ap, t2 = dec, (v + (a * a - 2.0 * dec * dec) / (2.0 * jerk)) / dec
    t1 = (a + ap) / jerk
    x = v * t1 + 0.5 * a * t1 * t1 - jerk * t1 * t1 * t1 / 6.0
    v1 = v + 0.5 * (a * a - ap * ap) / jerk
    x += v1 * t2 - 0.5 * ap * t2 * t2 + ap * ap * ap / (6.0 * jerk * jerk)
    return x if x > 0.0 else 0.0


def stop_time(v: float, a: float, jerk: float, dec: float) -> float:
    """Time the S-curve of `stop_excursion` takes to rest from v >= 0, a >= -dec with v >= a^2 / 2J
    (a state that can stop without reversing; 0 at rest)."""
    if v <= 0.0 and a <= 0.0:
        return 0.0
    ap2 = jerk * v + 0.5 * a * a
    if ap2 <= dec * dec:
        ap, t2 = sqrt(ap2), 0.0
    else:
        ap, t2 = dec, (v + (a * a - 2.0 * dec * dec) / (2.0 * jerk)) / dec
    return (a + 2.0 * ap) / jerk + t2


class CommandLimiter:
    """Turns position targets into commands that respect every configured limit at period dt."""

    def __init__(self, joint_names: Sequence[str], limits: Sequence[JointLimitSet], dt: float,
                 max_relative_target: Sequence[float] | None = None, target_horizon_s: float = 0.0,
                 uniform_scaling: bool = False, margin: float = 0.0) -> None:
        if len(joint_names) != len(limits):
            raise ValueError(f"{len(joint_names)} joint names but {len(limits)} limit sets")
        if not dt > 0:
            raise ValueError(f"dt must be positive, got {dt}")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be in [0, 1), got {margin}")
        for name, spec in zip(joint_names, limits):
            missing = [kind for kind in ("position", "velocity", "acceleration")
                       if not getattr(spec.hard, f"has_{kind}_limits")]
            if missing:
                raise ValueError(f"joint '{name}' has no {' or '.join(missing)} limit: refusing to run it unlimited")
        keep = 1.0 - margin
        self.joint_names = list(joint_names)
        self.n = n = len(self.joint_names)
        self.dt = dt
        self.horizon = max(target_horizon_s, dt)
        self.uniform_scaling = uniform_scaling
        steps = list(max_relative_target or [])
        if len(steps) == 1:
            steps = steps * n
        if steps and len(steps) != n:
            raise ValueError(f"max_relative_target needs 1 or {n} values, got {len(steps)}")
        self.max_step = [s if s > 0 else inf for s in steps] if steps else [inf] * n
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.vmax: list[float] = []
        self.acc: list[float] = []
        self.dec: list[float] = []
        self.jerk: list[float] = []
        self.k_soft: list[float] = []
        self.soft_lo: list[float] = []
        self.soft_hi: list[float] = []
        for spec in limits:
            hard = spec.hard
            lo, hi = spec.position_range
            self.lo.append(lo)
            self.hi.append(hi)
            self.vmax.append(keep * hard.max_velocity)
            acc = keep * hard.max_acceleration
            # ros2_control: without a deceleration limit, slowing down is bounded by max_acceleration.
            dec = keep * hard.max_deceleration if hard.has_deceleration_limits else acc
            self.acc.append(acc)
            self.dec.append(dec)
            self.jerk.append(keep * hard.max_jerk if hard.has_jerk_limits else inf)
            soft = spec.soft
            self.k_soft.append(soft.k_position if soft is not None else 0.0)
            self.soft_lo.append(soft.min_position if soft is not None else -inf)
            self.soft_hi.append(soft.max_position if soft is not None else inf)
        # Stopping-distance constants: B(x) = 2 D x / (D dt + sqrt((D dt)^2 + 2 D x)), no cancellation.
        self._c2 = [2.0 * d for d in self.dec]
        self._adt = [a * dt for a in self.acc]
        self._ddt = [d * dt for d in self.dec]
        self._jdt2 = [j * dt * dt for j in self.jerk]
        # With a jerk limit the acceleration passes through zero continuously, also when the velocity changes
        # sign: one bound for both directions (the smaller) keeps that passage inside both windows.
        self._m = [min(a, d) for a, d in zip(self.acc, self.dec)]
        self._c2j = [0.5 * j * dt * dt for j in self.jerk]
        self.q = [0.0] * n
        self.v = [0.0] * n
        self.a = [0.0] * n
        self.out = [0.0] * n
        self.interventions: list[Record] = []
        self._blo = [0.0] * n
        self._bhi = [0.0] * n
        self._klo = [""] * n
        self._khi = [""] * n
        self._vd = [0.0] * n

    def reset(self, positions: Sequence[float]) -> None:
        """Start from rest at the given (measured, finite) positions, even outside the range: a
        command that jumped into it would be the largest step this limiter could ever send."""
        values = [float(p) for p in positions]
        if len(values) != self.n or not all(isfinite(p) for p in values):
            raise ValueError(f"reset needs {self.n} finite positions, got {positions!r}")
        for i in range(self.n):
            self.q[i] = values[i]
            self.v[i] = 0.0
            self.a[i] = 0.0
            self.out[i] = self.q[i]

    @property
    def stopped(self) -> bool:
        """True once the last command had zero velocity on every joint."""
        return all(abs(v) < 1e-9 for v in self.v)

    def brake_speed(self, i: int, x: float) -> float:
        """Largest speed from which joint i stops within distance x at its max deceleration. x and the
        deceleration are finite: position and acceleration limits are required and finite."""
        if x <= 0.0:
            return 0.0
        c1 = self._ddt[i]
        c2 = self._c2[i]
        return c2 * x / (c1 + sqrt(c1 * c1 + c2 * x))

    def limit(self, target: Sequence[float], measured: Sequence[float] | None) -> list[float]:
        """Next command towards `target` (joint order); returns the internal buffer, copy to keep."""
        return self._step(target, measured)

    def stop(self) -> list[float]:
        """Next command of a controlled stop: velocity to zero at max deceleration, then hold."""
        return self._step(None, None)

    def track(self, reference: Sequence[float], velocity: Sequence[float],
              measured: Sequence[float] | None) -> list[float]:
        """Next command on a moving reference: reach `reference` this period (wanted velocity
        (reference - q) / dt). `velocity` is the reference's own; the approach is braked relative to
        it (a lag is caught up, a lead given back, at the braking curve of what lies beyond the
        reference's motion), so following a moving reference needs no margin and a stopped one is
        approached without overshoot. Same limits and priorities as `limit`; returns the internal
        buffer, copy to keep."""
        return self._step(reference, measured, velocity)

    def _step(self, target: Sequence[float] | None, measured: Sequence[float] | None,
              vref: Sequence[float] | None = None) -> list[float]:
        recs = self.interventions
        recs.clear()
        dt = self.dt
        inv_h = 1.0 / self.horizon if vref is None else 1.0 / dt
        qc, vc, ac = self.q, self.v, self.a
        blo, bhi, klo, khi, vds = self._blo, self._bhi, self._klo, self._khi, self._vd
        brake = self.brake_speed
        for i in range(self.n):
            q = qc[i]
            v = vc[i]
            if self.jerk[i] < inf:
                lo, hi, lk, hk = self._jerk_window(i, q, v, ac[i], target, vref, inv_h)
            else:
                lo, hi, lk, hk = self._rate_window(i, q, v, target is None)
            if measured is not None:
                s = self.max_step[i]
                m = measured[i] - q
                if s < inf and m - m == 0.0:  # a non-finite measurement never steers the command
                    # The window around the measurement is a wall braked for like the range: a command
                    # inside it never overshoots it; outside it (the robot lags), it heads back.
                    x = m + s
                    whi = self._wall(i, x, v, lo, hi) if x >= 0.0 else x / dt
                    x = s - m
                    wlo = -self._wall(i, x, -v, -hi, -lo) if x >= 0.0 else -x / dt
                    if wlo <= hi and whi >= lo:
                        if wlo > lo:
                            lo, lk = wlo, MAX_STEP
                        if whi < hi:
                            hi, hk = whi, MAX_STEP
                    else:
                        recs.append((MAX_STEP + "_yielded", i, s, m, 0.0))
                        if whi < lo:
                            hi, hk = lo, MAX_STEP
                        else:
                            lo, lk = hi, MAX_STEP
            k = self.k_soft[i]
            if k > 0.0:
                wlo, whi = k * (self.soft_lo[i] - q), k * (self.soft_hi[i] - q)
                if wlo <= hi and whi >= lo:
                    if wlo > lo:
                        lo, lk = wlo, SOFT_LIMIT
                    if whi < hi:
                        hi, hk = whi, SOFT_LIMIT
                elif whi < lo:
                    hi, hk = lo, SOFT_LIMIT
                else:
                    lo, lk = hi, SOFT_LIMIT
            if target is None:
                vd = 0.0
            else:
                t = target[i]
                # Clamped into the range (and a non-finite target held): e stays finite and small,
                # so neither the approach nor uniform scaling can overflow.
                if t > self.hi[i]:
                    t = self.hi[i]
                elif t < self.lo[i]:
                    t = self.lo[i]
                elif t != t:
                    t = q
                e = t - q
                vd = e * inv_h
                if vref is not None:
                    # In the reference's frame: what lies beyond its own motion this period is approached
                    # at the braking curve. Ties go to the approach (a reference resting on the range
                    # edge is not the range's doing).
                    w = vref[i]
                    x = e - w * dt
                    if x > 0.0:
                        cap = w + brake(i, x)
                        if cap <= hi:
                            hi, hk = (cap, _TARGET) if cap >= lo else (lo, lk)
                    elif x < 0.0:
                        cap = w - brake(i, -x)
                        if cap >= lo:
                            lo, lk = (cap, _TARGET) if cap <= hi else (hi, hk)
                elif e > 0.0:
                    cap = self._wall(i, e, v, lo, hi)
                    if cap < hi:
                        hi, hk = (cap, _TARGET) if cap >= lo else (lo, lk)
                elif e < 0.0:
                    cap = -self._wall(i, -e, -v, -hi, -lo)
                    if cap > lo:
                        lo, lk = (cap, _TARGET) if cap <= hi else (hi, hk)
            if target is not None and self.jerk[i] < inf:
                # Approach the wanted velocity as a stop approaches rest: |v' - vd| no smaller than the jerk-limited
                # curve (sqrt|v - vd| - dt sqrt(J / 2))^2 allows, so the velocity settles on vd instead of passing it.
                dv = v - vd
                c2 = self._c2j[i]
                if dv > 2.0 * c2:
                    cap = vd + (sqrt(dv) - sqrt(c2)) ** 2
                    if cap > lo:
                        lo, lk = (cap, _TARGET) if cap <= hi else (hi, hk)
                elif dv < -2.0 * c2:
                    cap = vd - (sqrt(-dv) - sqrt(c2)) ** 2
                    if cap < hi:
                        hi, hk = (cap, _TARGET) if cap >= lo else (lo, lk)
            blo[i], bhi[i], klo[i], khi[i], vds[i] = lo, hi, lk, hk, vd
        scale = self._uniform_scale() if (self.uniform_scaling and target is not None) else None
        return self._commit(scale, target is None)

    def _rate_window(self, i: int, q: float, v: float, stopping: bool) -> tuple[float, float, str, str]:
        """Velocity interval of a joint without a jerk limit: velocity, braking to the range at max
        deceleration, acceleration/deceleration (their window switches with the sign of v), no reversal in a stop."""
        vm = self.vmax[i]
        lo, hi, lk, hk = -vm, vm, VELOCITY, VELOCITY
        b = self.brake_speed(i, self.hi[i] - q)
        if b < hi:
            hi, hk = b, POSITION
        b = -self.brake_speed(i, q - self.lo[i])
        if b > lo:
            lo, lk = b, POSITION
        if v > 0.0:
            wlo, whi, wlk, whk = v - self._ddt[i], v + self._adt[i], DECELERATION, ACCELERATION
        elif v < 0.0:
            wlo, whi, wlk, whk = v - self._adt[i], v + self._ddt[i], ACCELERATION, DECELERATION
        else:
            wlo, whi, wlk, whk = -self._adt[i], self._adt[i], ACCELERATION, ACCELERATION
        if wlo <= hi and whi >= lo:
            if wlo > lo:
                lo, lk = wlo, wlk
            if whi < hi:
                hi, hk = whi, whk
        else:  # only from a state this limiter did not produce (rounding): position still wins.
            # [lo, hi] holds 0 here, so the window lies beyond it on the side v points to: the
            # edge missed is always the deceleration one (acceleration can never yield).
            if whi < lo:
                hi, hk = lo, DECELERATION
            else:
                lo, lk = hi, DECELERATION
            self.interventions.append((DECELERATION + "_yielded", i, self.dec[i], v, 0.0))
        if stopping:  # a stop never reverses a joint
            if v >= 0.0 and lo < 0.0 <= hi:
                lo = 0.0
            elif v <= 0.0 and hi > 0.0 >= lo:
                hi = 0.0
        return lo, hi, lk, hk

    def _jerk_window(self, i: int, q: float, v: float, a: float, target: Sequence[float] | None,
                     vref: Sequence[float] | None, inv_h: float) -> tuple[float, float, str, str]:
        """Velocity interval of a jerk-limited joint: every v' in it leaves a state from which the S-curve stop
        (module docstring) keeps the velocity, acceleration, jerk and position limits without reversing."""
        dt = self.dt
        m = self._m[i]
        jd2 = self._jdt2[i]
        kind = ACCELERATION if m == self.acc[i] else DECELERATION
        lo, lk = v - m * dt, kind
        hi, hk = v + m * dt, kind
        base = v + a * dt
        x = base - jd2
        if x > lo:
            lo, lk = x, JERK
        x = base + jd2
        if x < hi:
            hi, hk = x, JERK
        # The peak velocity of the stop (v' + a'^2 / 2J while accelerating) within the velocity limit.
        j = self.jerk[i]
        half = 0.5 * j * dt
        vm = self.vmax[i]
        x = v + dt * (max(0.0, sqrt(2.0 * j * max(0.0, vm - v)) - j * dt) + half)
        if x > vm:
            x = vm
        if x < hi:
            hi, hk = x, VELOCITY
        x = v - dt * (max(0.0, sqrt(2.0 * j * max(0.0, vm + v)) - j * dt) + half)
        if x < -vm:
            x = -vm
        if x > lo:
            lo, lk = x, VELOCITY
        if lo > hi:  # rounding only: the proof above leaves this interval non-empty
            if lo - hi > 1e3 * ROUNDING * (1.0 + abs(v)):
                self.interventions.append((JERK + "_yielded", i, j, a, 0.0))
            lo = hi = 0.5 * (lo + hi)
        # Position: the stop's excursion stays within the range (from outside it: never further out).
        # From a state this limiter did not produce (rounding), no velocity may fit: brake hardest; the range
        # still holds (`_commit`), and the jerk and deceleration limits are what give way (reported).
        c = self._cap(i, self.hi[i] - q, v, lo, hi)
        if c is None:
            self.interventions.append((JERK + "_yielded", i, j, a, 0.0))
            hi, hk = lo, POSITION
        elif c < hi:
            hi, hk = c, POSITION
        c = self._cap(i, q - self.lo[i], -v, -hi, -lo)
        if c is None:
            self.interventions.append((JERK + "_yielded", i, j, a, 0.0))
            lo, lk = hi, POSITION
        elif -c > lo:
            lo, lk = -c, POSITION
        # Stoppable without reversing: moving forward at v' > 0 needs v' >= (a' + J dt / 2)^2 / 2J when braking,
        # i.e. sqrt(v') >= sqrt(v) - dt sqrt(J / 2); between 0 and that bound lies no stoppable velocity.
        c2 = self._c2j[i]
        if target is None:
            # Landing at rest from v <= J dt^2 leaves a' = -v / dt, from which holding (a'' = 0) keeps the jerk.
            # At rest the acceleration says which way the joint is going: one that passes through zero velocity
            # (a reversal asked for before the stop) moves on the side its acceleration points to until the
            # jerk limit has ramped that acceleration back, so its stop continues there and is no reversal.
            # A state this limiter did not produce may leave the jerk window beyond rest: the stop still never
            # reverses the joint (the jerk gives way, reported); only the range comes first.
            heading = v if v != 0.0 else a
            if heading == 0.0:  # at rest, unaccelerated: holding keeps every limit
                return 0.0, 0.0, lk, hk
            if heading < 0.0:
                lo, hi = -hi, -lo
                lk, hk = hk, lk
            x = (sqrt(abs(v)) - sqrt(c2)) ** 2 if abs(v) > 2.0 * c2 else 0.0
            if x > lo:
                if x <= hi:
                    lo, lk = x, JERK
                elif hk == POSITION:
                    lo = hi
                else:
                    if x - hi > 1e3 * ROUNDING * (1.0 + abs(v)):
                        self.interventions.append((JERK + "_yielded", i, j, a, 0.0))
                    lo = hi = x
            if heading < 0.0:
                lo, hi = -hi, -lo
                lk, hk = hk, lk
        elif v > c2 or v < -c2:
            gap = (sqrt(abs(v)) - sqrt(c2)) ** 2 + ROUNDING * (1.0 + abs(v))
            if v < 0.0:  # mirror: the gap lies between -gap and 0
                lo, hi = -hi, -lo
                lk, hk = hk, lk
            if lo < gap:
                if hi < gap:
                    if hi >= gap - 3.0 * ROUNDING * (1.0 + abs(v)) or lo > 0.0:
                        # The window ends on the bound (rounding apart), or short of it with rest out of reach
                        # (turning to rest would break the jerk or deceleration limit): ride its top, nearest the
                        # bound, as a stop does.
                        lo, lk = hi, JERK
                    elif hi > 0.0:
                        hi = 0.0  # only the reversing side is left
                elif lo > 0.0:
                    lo, lk = gap, JERK
                else:  # both sides reachable: the one nearer what is asked for
                    want = self._want(i, q, target, vref, inv_h) * (1.0 if v > 0.0 else -1.0)
                    if want >= 0.5 * gap:
                        lo, lk = gap, JERK
                    else:
                        hi = 0.0
            if v < 0.0:
                lo, hi = -hi, -lo
                lk, hk = hk, lk
        return lo, hi, lk, hk

    def _wall(self, i: int, x: float, v: float, lo: float, hi: float) -> float:
        """Largest velocity from which joint i stops within x >= 0 ahead: the braking curve of a joint without a
        jerk limit, the S-curve stop (searched in [lo, hi]; below lo when none fits) of one with it."""
        if self.jerk[i] == inf:
            return self.brake_speed(i, x)
        if hi < lo:
            return lo
        c = self._cap(i, x, v, lo, hi)
        return lo - 1.0 if c is None else c

    def _want(self, i: int, q: float, target: Sequence[float], vref: Sequence[float] | None, inv_h: float) -> float:
        """The velocity asked for, before any limit (the target clamped into the range)."""
        t = target[i]
        t = self.hi[i] if t > self.hi[i] else (self.lo[i] if t < self.lo[i] else (q if t != t else t))
        return (t - q) * inv_h

    def _excess(self, i: int, x: float, v: float, s: float) -> float:
        """How far the stop from velocity s (this tick's acceleration (s - v) / dt) ends beyond a wall x ahead
        (<= 0: it fits). The stop starts from the most braking acceleration the jerk limit allows after this
        tick, and the backward-Euler steps may run ahead of the continuous profile by dt times the velocity
        still gained; beyond the wall (x < 0) nothing may move further out."""
        dt = self.dt
        j = self.jerk[i]
        m = self._m[i]
        al = (s - v) / dt - 0.5 * j * dt
        if al < -m:
            al = -m
        elif al > m:
            al = m
        e = stop_excursion(s, al, j, m)
        if al > 0.0:
            gain = al * al / (2.0 * j)
            if s + gain > 0.0:  # a profile that stays at v <= 0 never moves forward, in steps or not
                e += dt * gain
        room = x - s * dt if x >= 0.0 else min(0.0, -s * dt)
        return e - room

    def _cap(self, i: int, x: float, v: float, lo: float, hi: float) -> float | None:
        """Largest velocity in [lo, hi] whose stop stays within a wall x ahead (for a wall behind, the caller
        mirrors v, lo, hi), or None when none does. Regula falsi (Illinois), keeping the end that fits. The top is
        always checked by its own stop (docs/decisions/0015): no cheaper test stands in for it."""
        f_hi = self._excess(i, x, v, hi)
        if f_hi <= 0.0:
            return hi
        f_lo = self._excess(i, x, v, lo)
        if f_lo > 0.0:
            return None
        side = 0
        for _ in range(100):
            # Done when the fitting end leaves less than 1e-12 of the room unused, or the bracket is an ulp.
            # (From beyond a wall the excess is 0 on a whole interval: there only halving finds its end.)
            if -1e-12 <= f_lo < 0.0 or hi - lo <= 1e-15 * (1.0 + abs(lo)):
                break
            s = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
            if f_lo == 0.0 or not lo < s < hi:
                s = 0.5 * (lo + hi)
            f = self._excess(i, x, v, s)
            if f <= 0.0:
                lo, f_lo = s, f
                if side == -1:
                    f_hi *= 0.5
                side = -1
            else:
                hi, f_hi = s, f
                if side == 1:
                    f_lo *= 0.5
                side = 1
        return lo

    def _uniform_scale(self) -> float | None:
        """Largest s in [0, 1] with s * desired inside every joint's interval, or None if none exists."""
        s_lo, s_hi, binding = 0.0, 1.0, -1
        for i in range(self.n):
            d, lo, hi = self._vd[i], self._blo[i], self._bhi[i]
            if d == 0.0:
                if lo > 0.0 or hi < 0.0:
                    s_lo = inf
                    break
                continue
            r1, r2 = (lo / d, hi / d) if d > 0 else (hi / d, lo / d)
            s_lo = max(s_lo, r1)
            if r2 < s_hi:
                s_hi, binding = r2, i
        if s_lo > s_hi:
            self.interventions.append((UNIFORM_SCALE_INFEASIBLE, -1, 0.0, 1.0, 0.0))
            return None
        if binding >= 0:
            self.interventions.append((UNIFORM_SCALE, binding, s_hi, 1.0, s_hi))
        return s_hi

    def _commit(self, scale: float | None, stopping: bool) -> list[float]:
        """Apply the chosen velocities; a stop's own braking is the plan, not an intervention."""
        recs = self.interventions
        dt = self.dt
        qc, vc, ac, out = self.q, self.v, self.a, self.out
        for i in range(self.n):
            vd = self._vd[i]
            lo, hi = self._blo[i], self._bhi[i]
            want = vd * scale if scale is not None else vd
            v_new = hi if want > hi else (lo if want < lo else want)
            if v_new != vd and not stopping:
                kind = self._khi[i] if vd > hi else (self._klo[i] if vd < lo else "")
                if kind:
                    recs.append((kind, i, self.limit_value(kind, i, vd > hi), vd, v_new))
            q = qc[i]
            q_new = q + v_new * dt
            # Float safety: never step past the range; from outside it, only back towards it.
            if q_new > self.hi[i]:
                q_new = self.hi[i] if q <= self.hi[i] else min(q_new, q)
            elif q_new < self.lo[i]:
                q_new = self.lo[i] if q >= self.lo[i] else max(q_new, q)
            v_new = (q_new - q) / dt
            ac[i] = (v_new - vc[i]) / dt
            vc[i] = v_new
            qc[i] = q_new
            out[i] = q_new
        return out

    def limit_value(self, kind: str, i: int, upper: bool) -> float:
        """The configured number behind an intervention kind (for logs)."""
        if kind == POSITION:
            return self.hi[i] if upper else self.lo[i]
        if kind == SOFT_LIMIT:
            return self.soft_hi[i] if upper else self.soft_lo[i]
        return {VELOCITY: self.vmax, MAX_STEP: self.max_step, ACCELERATION: self.acc,
                DECELERATION: self.dec, JERK: self.jerk}[kind][i]


def describe(rec: Record, joint_names: Sequence[str]) -> str:
    """One log line for an intervention: joint, limit and values."""
    kind, i, limit, requested, applied = rec
    joint = joint_names[i] if i >= 0 else "all joints"
    if kind == UNIFORM_SCALE:
        return f"{joint}: all joints scaled by {limit:.4f} to keep the direction of motion"
    if kind == UNIFORM_SCALE_INFEASIBLE:
        return "uniform scaling infeasible this period: joints limited independently"
    if kind.endswith("_yielded"):
        return (f"{joint}: {kind[:-8]} limit {limit:g} could not be honoured (value {requested:.6g}): "
                "position and velocity limits take priority")
    return (f"{joint}: {kind} limit {limit:g}: requested velocity {requested:.6g}, "
            f"applied {applied:.6g}")
