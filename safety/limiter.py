"""Per-command joint limiting: position, stopping distance, velocity, acceleration, jerk, max step.

Works on the stream of commands this supervisor itself sends (position q, velocity v,
acceleration a of the last command, command period dt), as libfranka's limitRate does,
so the output is smooth whatever the proposals or the measurements look like. The limiter
trusts only its own command state: a measured position informs the max-step window, never
the kinematics, so a stale or wild measurement cannot make the command jump. Each tick the
new command velocity v' (q' = q + v' dt) is chosen from nested intervals, highest priority first:

1. velocity limit and stopping distance to the position range (soft limits where set):
   v' <= B(x) with B the largest speed from which braking at max_deceleration in steps
   of dt still stops within the distance x. Discrete-time form, v'^2 + 2 D dt v' <= 2 D x,
   i.e. after the step v' <= sqrt(2 D x'): the continuous v = sqrt(2 D x) bound holds at
   every command, and the next tick can always decelerate within D (proof: B(x') >= v' - D dt).
   Outside the range (a robot that starts there) only motion back towards it is allowed.
2. acceleration (speeding up) / deceleration (slowing down, sign of the last velocity),
3. in a stop: no reversal of the direction of motion (a stop ends at rest, never beyond it),
   then jerk against the last command's acceleration,
4. max step from the measured position (LeRobot's max_relative_target), braked for like the range,
5. soft-limit spring (ros2_control SoftJointLimits k_position),
6. no-overshoot approach of the target, clamped into the range (not a limit; never reported);
   when tracking a moving reference (`track`), the same approach in the reference's frame.

A lower-priority interval that does not intersect the higher ones cannot be met: the
command goes to the nearest edge of the higher-priority interval and that is reported as
`<kind>_yielded`. From any state this limiter produced itself, 1 and 2 always intersect
(the proof above), so the kinematic limits hold whatever arrives; jerk yields only where
J dt is smaller than the braking needs (never when J dt >= A + D, e.g. the Panda at 100 Hz).
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

# An intervention: (kind, joint index or -1 for all, limit value, requested, applied).
Record = tuple[str, int, float, float, float]


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
        self._jerk_binds = [j * dt < a + d for j, a, d in zip(self.jerk, self.acc, self.dec)]
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

    def _brake_accel(self, i: int, x: float) -> float:
        """Largest |acceleration| from which joint i's jerk limit brings it to zero within a velocity change x."""
        j = self.jerk[i]
        c1 = j * self.dt
        return 2.0 * j * x / (c1 + sqrt(c1 * c1 + 2.0 * j * x))

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
            vm = self.vmax[i]
            lo, hi, lk, hk = -vm, vm, VELOCITY, VELOCITY
            b = brake(i, self.hi[i] - q)
            if b < hi:
                hi, hk = b, POSITION
            b = -brake(i, q - self.lo[i])
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
                recs.append((DECELERATION + "_yielded", i, self.dec[i], v, 0.0))
            if target is None:
                # A stop never reverses a joint: where jerk binds, a stop that starts while the
                # acceleration is large and the velocity near zero would overshoot zero under the jerk
                # limit; the jerk yields instead (reported), the direction of motion does not.
                if v >= 0.0 and lo < 0.0 <= hi:
                    lo = 0.0
                elif v <= 0.0 and hi > 0.0 >= lo:
                    hi = 0.0
            j2 = self._jdt2[i]
            if j2 < inf:
                base = v + ac[i] * dt
                wlo, whi = base - j2, base + j2
                if wlo <= hi and whi >= lo:
                    if wlo > lo:
                        lo, lk = wlo, JERK
                    if whi < hi:
                        hi, hk = whi, JERK
                else:
                    recs.append((JERK + "_yielded", i, self.jerk[i], ac[i], 0.0))
                    if whi < lo:
                        hi, hk = lo, JERK
                    else:
                        lo, lk = hi, JERK
            if measured is not None:
                s = self.max_step[i]
                m = measured[i] - q
                if s < inf and m - m == 0.0:  # a non-finite measurement never steers the command
                    # The window around the measurement is a wall braked for like the range: a command
                    # inside it never overshoots it; outside it (the robot lags), it heads back.
                    x = m + s
                    whi = brake(i, x) if x >= 0.0 else x / dt
                    x = s - m
                    wlo = -brake(i, x) if x >= 0.0 else -x / dt
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
                    cap = brake(i, e)
                    if cap < hi:
                        hi, hk = (cap, _TARGET) if cap >= lo else (lo, lk)
                elif e < 0.0:
                    cap = -brake(i, -e)
                    if cap > lo:
                        lo, lk = (cap, _TARGET) if cap <= hi else (hi, hk)
            if self._jerk_binds[i]:
                # Where jerk binds (J dt < A + D), approach the wanted velocity as the range is approached
                # one derivative up: |a'| <= B_J(|vd - v|), so a stop ends at rest instead of overshooting.
                dv = vd - v
                if dv > 0.0:
                    cap = v + self._brake_accel(i, dv) * dt
                    if cap < hi:
                        hi, hk = (cap, _TARGET) if cap >= lo else (lo, lk)
                elif dv < 0.0:
                    cap = v - self._brake_accel(i, -dv) * dt
                    if cap > lo:
                        lo, lk = (cap, _TARGET) if cap <= hi else (hi, hk)
            blo[i], bhi[i], klo[i], khi[i], vds[i] = lo, hi, lk, hk, vd
        scale = self._uniform_scale() if (self.uniform_scaling and target is not None) else None
        return self._commit(scale, target is None)

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
