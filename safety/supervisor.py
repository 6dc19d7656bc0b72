"""The supervisor's state machine: hold, follow, watchdog stop, e-stop. No ROS, explicit clocks.

Every input carries the time it was received (`now`, seconds on the node clock), so tests
drive it with a fake clock and the ROS node only translates messages.
States, in order of precedence at each tick:
  waiting_for_joint_state  nothing measured yet: publish nothing (nothing to hold to)
  estop                    latched by the e-stop topic: controlled stop, then hold
  watchdog_stop            joint states or proposals went stale: controlled stop, then hold
  hold                     no usable proposal (none yet, or the last one was rejected)
  resync                   moving the command to the pose measured when the operator asked
                           (`resync_command`), through the limiter; then hold
  active                   following the latest proposal through the limiter
A controlled stop ramps the commanded velocity to zero at max deceleration (jerk-limited: the
acceleration ramps to it and back, the S-curve of safety/limiter.py), one command per period,
never reversing a joint, then repeats the final position (forward_command_controller has no timeout).
The command never follows a measurement on its own (a wild one must not make it jump): after a
stop it stays where the stop ended until a proposal or an operator's re-sync moves it.

Proposals are trajectories: rows with times (time_from_start after the stamp, or after arrival
for a zero stamp; plus trajectory_delay_s, a jitter buffer). Each period the rows are interpolated linearly,
averaged over the last trajectory_smoothing_s (a box filter: a corner's velocity change is spread
over that window instead of one period), and the limiter tracks the result
(`CommandLimiter.track`, braking relative to the reference's own velocity), then holds the last row. A new proposal replaces the buffered rows from
its first row's time on and keeps the earlier ones, as a proposal computed when the previous
row falls due continues it. A row due at once (`on_command`, or rows all in the past) is
approached over target_horizon_s instead.

What the limiter still changes is counted in two groups (`shaping`, `clamps`), per joint and period:
  shaping  a velocity, acceleration, deceleration or jerk limit, or the braking curve before the
           position range, that left the command within shaping_tolerance of the position asked
           for this period (when tracking: the lag behind the reference): a corner smoothed, a
           short catch-up, a stop onto the range edge braked a little earlier;
  clamps   the same limits beyond that tolerance, every other limiter intervention (max step,
           soft limit, uniform scaling, a limit that yielded), and proposals refused as out of
           range.
Targets beyond the range but within out_of_range_tolerance are clamped into it uncounted (a
gripper asked to close a little beyond closed); other refusals (malformed or stale input) and
watchdog/e-stop events are counted only by kind (`counts`).
"""
from __future__ import annotations

from collections import Counter, deque
from math import isfinite
from typing import Any, Sequence

from omni_vla_safety.config import SupervisorConfig
from omni_vla_safety.limiter import (ACCELERATION, DECELERATION, JERK, POSITION, VELOCITY, CommandLimiter, Record,
                                     describe)
from omni_vla_safety.limits import JointLimitSet
from omni_vla_safety.trajectory import Reference
from omni_vla_safety.validation import (NO_JOINT_STATE, OUT_OF_RANGE, SIZE, JointOrder, Rejection, check_age,
                                        check_range, check_times)

WAITING = "waiting_for_joint_state"
ESTOP = "estop"
WATCHDOG = "watchdog_stop"
HOLD = "hold"
RESYNC = "resync"
ACTIVE = "active"

# Limits that may only shape ordinary motion: a record of these within shaping_tolerance is shaping.
SHAPING_KINDS = frozenset((POSITION, VELOCITY, ACCELERATION, DECELERATION, JERK))
MAX_POINTS = 1000  # rows per proposal: validated and buffered in one callback
# A re-sync ends (and one asked for is not needed) once every joint's command is this close to the
# measured pose (rad, m): far below any tracking error, so what is left over is nothing a robot shows.
RESYNC_TOLERANCE = 1e-6


class Supervisor:
    """Validates proposals, limits them, and stops the robot itself when inputs fail."""

    def __init__(self, config: SupervisorConfig, limits: Sequence[JointLimitSet]) -> None:
        self.config = config
        self.order = JointOrder(config.joint_names)
        self.limiter = CommandLimiter(config.joint_names, limits, config.dt,
                                      max_relative_target=config.max_relative_target,
                                      target_horizon_s=config.target_horizon_s,
                                      uniform_scaling=config.uniform_scaling, margin=config.limit_margin)
        n = len(config.joint_names)
        tol = list(config.out_of_range_tolerance) * (n if len(config.out_of_range_tolerance) == 1 else 1)
        # Targets beyond these bounds come from a broken policy: refused (or clamped when saturating). A measurement
        # beyond them is refused too: the first one seeds the command, and a garbage reading (wrong units, a glitch)
        # would be held there by a position controller that does not limit.
        self.accept_lo = [lo - t for lo, t in zip(self.limiter.lo, tol)]
        self.accept_hi = [hi + t for hi, t in zip(self.limiter.hi, tol)]
        shape = list(config.shaping_tolerance)
        self.shaping_tolerance = shape * (n if len(shape) == 1 else 1)
        self.shaping: Counter[str] = Counter()
        self.clamps: Counter[str] = Counter()
        window = max(1, round(config.trajectory_smoothing_s * config.rate_hz))
        self.reference = Reference(n, window, config.dt)  # the rows being followed, when active
        self.state = WAITING
        self.reason = "no joint state received yet"
        self.last_intervention = ""
        self.counts: Counter[str] = Counter()
        self.events: deque[tuple[str, str]] = deque(maxlen=512)
        self.measured: list[float] | None = None
        self.state_time = float("-inf")
        self.state_refused = ""  # why the latest joint state was refused (a re-sync must not use an older one)
        self.resync: list[float] | None = None  # the pose a re-sync moves the command to
        self.target: list[float] | None = None
        self.command_time = float("-inf")
        self.estop_latched = False
        self.estop_input = False
        self.ticks = 0

    def _event(self, kind: str, message: str, state_reason: bool = True) -> None:
        """Count and queue for logging; `reason` explains the current state, not routine clamping."""
        self.counts[kind] += 1
        if state_reason:
            self.reason = message
        else:
            self.last_intervention = message
        self.events.append((kind, message))

    def on_joint_state(self, names: Sequence[str], positions: Sequence[float], now: float) -> bool:
        """Store a measurement; a bad one (malformed, or beyond the accepted bounds) is counted and ignored
        (staleness then stops the robot; before the first good one nothing is published)."""
        try:
            if not isfinite(now):
                raise Rejection("bad_clock", f"receive time {now} is not finite")
            measured = self.order.state(names, positions)
            for i, x in enumerate(measured):
                if not self.accept_lo[i] <= x <= self.accept_hi[i]:
                    raise Rejection("state_out_of_range", (
                        f"joint '{self.order.names[i]}' measured at {x:.6g}, outside [{self.accept_lo[i]:.6g}, "
                        f"{self.accept_hi[i]:.6g}] (position range plus out_of_range_tolerance): bring it back "
                        "into range, or check the joint state's units"))
        except Rejection as rej:
            self.state_refused = str(rej)
            self._event("bad_joint_state", f"joint state ignored: {rej}")
            return False
        self.state_refused = ""
        if self.measured is None:
            self.limiter.reset(measured)
            self.state, self.reason = HOLD, "joint state received; holding until a valid proposal"
        self.measured = measured
        self.state_time = now
        return True

    def joint_state_fresh(self, now: float) -> bool:
        """A joint state arrived within joint_state_timeout_s (False for a non-finite `now`). One received more
        than a period after `now` means the clock jumped back (ROS time: a simulation reset, a bag replayed from its
        start): its age is unknown, so it is not fresh until a joint state arrives on the new time. (Within a period
        it is the tick having read the clock just before a callback stored a newer state.)"""
        return (self.measured is not None
                and -self.config.dt <= now - self.state_time <= self.config.joint_state_timeout_s)

    def command_fresh(self, now: float) -> bool:
        """The proposal being followed is at most command_timeout_s old, and not stamped further ahead of
        `now` than max_future_stamp_s and a period (which, once accepted, only a clock that jumped back makes it)."""
        age = now - self.command_time
        return -(self.config.max_future_stamp_s + self.config.dt) <= age <= self.config.command_timeout_s

    def on_command(self, names: Sequence[str], positions: Sequence[float], stamp: float | None,
                   now: float) -> bool:
        """Accept a proposal as the new target, or reject it and hold. Returns acceptance."""
        try:
            target = self.validate(names, positions, stamp, now)
        except Rejection as rej:
            self.reject(rej.kind, str(rej))
            return False
        if self.estop_latched:
            self._event("ignored_estop", "command ignored: e-stop latched")
            return False
        self.target = target
        self.resync = None
        self.reference.clear()
        return True

    def on_trajectory(self, names: Sequence[str], rows: Sequence[tuple[float, Sequence[float]]],
                      stamp: float | None, now: float) -> bool:
        """Accept a proposal's rows (time_from_start s, positions) to follow, or reject it all and hold."""
        try:
            if not rows:
                raise Rejection("rejected_no_points", "trajectory has no points")
            check_times([t for t, _ in rows], MAX_POINTS)
            targets = [self.validate(names, positions, stamp, now) for _, positions in rows]
        except Rejection as rej:
            self.reject(rej.kind, str(rej))
            return False
        if self.estop_latched:
            self._event("ignored_estop", "command ignored: e-stop latched")
            return False
        self.resync = None
        lo, hi = self.limiter.lo, self.limiter.hi
        base = (now if stamp is None else stamp) + self.config.trajectory_delay_s
        new = [(base + t, [min(max(x, lo[i]), hi[i]) for i, x in enumerate(p)]) for (t, _), p in zip(rows, targets)]
        future = [row for row in new if row[0] > now]
        if not future:  # every row already due: approach the last one
            self.target = new[-1][1]
            self.reference.clear()
            return True
        if self.target is None:
            self.reference.clear()  # from rest or a stop: start at the command
        buffered = self.reference.kept(now, future[0][0]) + len(future)
        if buffered > MAX_POINTS:  # proposals that only append would grow the buffer (and each copy of it) forever
            self.reject(SIZE, f"trajectory would leave {buffered} rows buffered (the earlier proposals' rows before "
                              f"its first), more than {MAX_POINTS}")
            return False
        self.reference.follow(now, future, self.limiter.q)
        self.target = self.reference.last
        return True

    def reject(self, kind: str, message: str) -> None:
        """Drop the target and any re-sync (the robot stops and holds) and count why."""
        self.target = None
        self.resync = None
        self.reference.clear()
        if kind == OUT_OF_RANGE:
            self.clamps[kind] += 1
        self._event(kind, f"command rejected, holding: {message}")

    def classify(self, rec: Record) -> bool:
        """True when an intervention is routine shaping (see the module docstring), False for a clamp."""
        kind, i, _, requested, applied = rec
        return kind in SHAPING_KINDS and abs(requested - applied) * self.limiter.dt <= self.shaping_tolerance[i]

    def validate(self, names: Sequence[str], positions: Sequence[float], stamp: float | None,
                 now: float) -> list[float]:
        """Ordered, finite, fresh target positions, or a Rejection naming what is wrong."""
        if not self.joint_state_fresh(now):
            raise Rejection(NO_JOINT_STATE, "no fresh joint state (nothing safe to limit against)")
        target = self.order.command(names, positions)
        if self.config.out_of_range == "refuse":
            check_range(target, self.accept_lo, self.accept_hi, self.order.names)
        self.command_time = check_age(stamp, now, self.config.command_timeout_s, self.config.max_future_stamp_s)
        return target

    def on_estop(self, stop: bool, now: float) -> None:
        """True latches a stop; False only records that the stop condition is gone."""
        self.estop_input = bool(stop)
        if stop and not self.estop_latched:
            self.estop_latched = True
            self.target = None
            self.resync = None
            self._event("estop", "e-stop latched by the estop topic")

    def reset_estop(self, now: float) -> tuple[bool, str]:
        """Clear a latched e-stop only when the input is False and the robot has stopped."""
        if not self.estop_latched:
            return True, "e-stop was not latched"
        if self.estop_input:
            return False, "e-stop input is still True: publish False on the estop topic first"
        if not self.limiter.stopped:
            return False, "robot is still braking: retry once stopped"
        # The limiter keeps its own (stopped) command state: re-syncing it to the measurement here
        # would make the command jump by the tracking error and reset its acceleration.
        self.estop_latched = False
        self.state = HOLD
        self._event("estop_reset", "e-stop reset; holding until a valid proposal")
        return True, "e-stop cleared; holding until a new proposal arrives"

    def resync_command(self, now: float) -> tuple[bool, str]:
        """Operator's re-sync after a stop: move the command to the pose measured now, within every limit.

        The command keeps its own state through stops (a measurement never steers it), so after a stop in
        which the robot was moved (a scene reset, hand guiding) it still stands where the stop ended; this
        brings it to the robot. Refused unless no proposal is being followed and the command is at rest, with
        a fresh, finite joint state inside the accepted bounds (the range plus out_of_range_tolerance; the
        pose is clamped into the range). Under a latched e-stop the command stays put until the e-stop is
        reset, then moves. A new proposal, a rejected one, an e-stop or stale joint states end it."""
        if self.target is not None:
            return False, f"following proposals (state {self.state}): stop first (e-stop, or stop proposing)"
        if self.measured is None:
            return False, "no joint state received yet"
        if not self.limiter.stopped:
            return False, "the command is still moving: retry once stopped"
        if self.state_refused:  # a measured pose outside the accepted bounds is refused as a joint state
            return False, f"the latest joint state was refused ({self.state_refused}): nothing to re-sync to"
        if not self.joint_state_fresh(now):
            return False, (f"no fresh joint state (none within joint_state_timeout_s "
                           f"{self.config.joint_state_timeout_s} s): nothing to re-sync to")
        lo, hi = self.limiter.lo, self.limiter.hi
        pose = [min(max(x, lo[i]), hi[i]) for i, x in enumerate(self.measured)]
        if all(abs(p - q) <= RESYNC_TOLERANCE for p, q in zip(pose, self.limiter.q)):
            self.resync = None
            return True, f"the command is already at the measured pose (within {RESYNC_TOLERANCE:g}): kept"
        self.resync = pose
        if self.estop_latched:
            return True, "re-sync accepted: the command moves to the pose measured now once the e-stop is reset"
        return True, "re-sync accepted: the command moves to the measured pose within the limits, then holds"

    def _enter(self, state: str, kind: str, message: str) -> None:
        if self.state != state:
            self.state = state
            self._event(kind, message)

    def tick(self, now: float) -> list[float] | None:
        """The command to publish this period (joint order), or None before any joint state."""
        if self.measured is None:
            return None
        self.ticks += 1
        limiter = self.limiter
        if self.estop_latched:
            self.state = ESTOP
            out = limiter.stop()
        elif not self.joint_state_fresh(now):  # also a non-finite clock: NaN compares false
            self.target = None
            self.resync = None
            self._enter(WATCHDOG, "watchdog_joint_state",
                        f"joint states stale ({now - self.state_time:.3f} s old, outside [0, "
                        f"joint_state_timeout_s {self.config.joint_state_timeout_s}]): controlled stop")
            out = limiter.stop()
        elif self.target is not None and not self.command_fresh(now):
            self.target = None
            self._enter(WATCHDOG, "watchdog_command",
                        f"proposals stopped ({now - self.command_time:.3f} s old, outside [-max_future_stamp_s "
                        f"{self.config.max_future_stamp_s}, command_timeout_s {self.config.command_timeout_s}]): "
                        "controlled stop")
            out = limiter.stop()
        elif self.target is None and self.resync is not None:
            self._enter(RESYNC, "resync", "operator's re-sync: command moving to the measured pose")
            out = limiter.limit(self.resync, self.measured)
            if all(abs(p - q) <= RESYNC_TOLERANCE for p, q in zip(self.resync, out)):
                self.resync = None
                self.state = HOLD
                self._event("resync_done", "command re-synced to the measured pose; holding until a valid proposal")
        elif self.target is None:
            if self.state in (ACTIVE, RESYNC):
                self.state = HOLD
            out = limiter.stop()
        else:
            self.state = ACTIVE
            if self.reference.active:
                self.reference.step(now)
                out = limiter.track(self.reference.position, self.reference.velocity, self.measured)
            else:
                out = limiter.limit(self.target, self.measured)
        for rec in limiter.interventions:
            (self.shaping if self.classify(rec) else self.clamps)[rec[0]] += 1
            self._event(rec[0], describe(rec, self.order.names), state_reason=False)
        return out

    def status(self) -> dict[str, Any]:
        """Compact status for the status topic and diagnostics."""
        return {"state": self.state, "reason": self.reason, "last_intervention": self.last_intervention,
                "stopped": self.limiter.stopped,
                "estop_latched": self.estop_latched, "ticks": self.ticks, "counts": dict(self.counts),
                "shaping": dict(self.shaping), "clamps": dict(self.clamps)}
