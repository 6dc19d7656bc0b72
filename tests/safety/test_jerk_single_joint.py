"""Single-joint cases of the jerk-limited limiter at 1 kHz and 100 Hz: small and fast, so every mutant of its code runs them.

Each case checks every command from the published positions only (range, velocity, acceleration, jerk,
no reversal in a stop, every moving state stoppable) and what the case is about (results/mutation.md, the jerk window's section).
"""
from __future__ import annotations

import math
from typing import Sequence

import pytest
from limits_yaml import limits_yaml

from omni_vla_safety.limiter import CommandLimiter, stop_excursion, stop_time
from omni_vla_safety.limits import parse_joint_limits_yaml

KHZ = 0.001
# The Panda's joint 2 (the lowest jerk limit), and a joint whose deceleration limit is below its acceleration's.
J2 = dict(min_position=-1.7628, max_position=1.7628, max_velocity=2.175, max_acceleration=7.5, max_jerk=3750.0)
AD = dict(min_position=-1.0, max_position=1.0, max_velocity=1.0, max_acceleration=10.0, max_deceleration=6.0,
          max_jerk=2000.0)


def joint(fields: dict, start: float = 0.0, dt: float = KHZ, **kwargs: object) -> CommandLimiter:
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(limits_yaml(a=fields))["a"]], dt, **kwargs)  # type: ignore[arg-type]
    lim.reset([start])
    return lim


class Check:
    def __init__(self, lim: CommandLimiter) -> None:
        self.lim, self.q, self.v, self.a = lim, lim.q[0], 0.0, 0.0
        self.m = min(lim.acc[0], lim.dec[0])

    def __call__(self, out: Sequence[float], stopping: bool = False, in_range: bool = True) -> None:
        lim, dt = self.lim, self.lim.dt
        assert not any(r[0].endswith("_yielded") and r[0] != "max_step_yielded" for r in lim.interventions)
        q = out[0]
        v = (q - self.q) / dt
        a = (v - self.v) / dt
        j = (a - self.a) / dt
        assert not in_range or lim.lo[0] - 1e-12 <= q <= lim.hi[0] + 1e-12, q
        assert abs(v) <= lim.vmax[0] + 1e-9 and abs(a) <= self.m + 1e-6 and abs(j) <= lim.jerk[0] + 1e-3, (v, a, j)
        if stopping:
            assert v * self.v >= 0.0, (self.v, v)
        if v * a > 0.0:  # speeding up: the acceleration still has to ramp away, and the velocity still rises meanwhile
            rise = max(0.0, abs(a) - 0.5 * lim.jerk[0] * dt) ** 2 / (2.0 * lim.jerk[0])
            assert abs(v) + rise <= lim.vmax[0] + 1e-9, (v, a)
        if v == 0.0:
            # A stop lands at rest holdable; a reversal asked for passes through rest, heading where a points.
            assert not stopping or abs(a) <= lim.jerk[0] * dt + 1e-6, a
        else:
            brake = min(0.0, (1.0 if v > 0 else -1.0) * a + 0.5 * lim.jerk[0] * dt)
            assert abs(v) >= brake * brake / (2 * lim.jerk[0]) - 1e-9, (v, a)
        self.q, self.v, self.a = q, v, a

    def stop(self, ticks: int) -> int:
        for k in range(ticks):
            self(self.lim.stop(), stopping=True)
            if self.lim.v[0] == 0.0 and self.lim.a[0] == 0.0:
                return k + 1
        raise AssertionError(f"still moving: v {self.lim.v[0]}")


def s_curve(v: float, a: float, jerk: float, dec: float) -> tuple[float, float]:
    """Travel and final velocity of the S-curve stop, in 3 x 2000 small exact constant-jerk steps."""
    p = min(dec, math.sqrt(jerk * v + 0.5 * a * a))
    t1, t2 = (a + p) / jerk, max(0.0, v + a * a / (2 * jerk) - p * p / jerk) / p
    x = 0.0
    for j, length in ((-jerk, t1), (0.0, t2), (jerk, p / jerk)):
        h = length / 2000
        for _ in range(2000):
            x += v * h + a * h * h / 2 + j * h ** 3 / 6
            v += a * h + j * h * h / 2
            a += j * h
    return x, v


@pytest.mark.parametrize("v, a", [(1.0, 0.0), (0.2, 6.0), (0.05, -5.0), (0.004, 1.0), (-0.0005, 4.0), (2.0, -7.0)])
def test_the_s_curve_excursion_and_time_are_those_of_the_profile(v: float, a: float) -> None:
    x, v_end = s_curve(v, a, 3750.0, 7.5)
    assert stop_excursion(v, a, 3750.0, 7.5) == pytest.approx(x, rel=1e-9, abs=1e-15) and abs(v_end) < 1e-9
    p = min(7.5, math.sqrt(3750.0 * v + 0.5 * a * a))
    t = (a + 2 * p) / 3750.0 + max(0.0, v + a * a / 7500.0 - p * p / 3750.0) / p
    assert stop_time(v, a, 3750.0, 7.5) == pytest.approx(t, rel=1e-12)


def test_the_s_curve_from_braking_too_hard_is_bounded_by_the_stop_that_ends_exactly_at_rest() -> None:
    assert stop_excursion(0.001, -3.0, 3750.0, 7.5) == pytest.approx(0.001 * math.sqrt(0.002 / 3750.0) / 3)
    assert stop_excursion(-0.01, 2.0, 3750.0, 7.5) == 0.0 and stop_excursion(0.0, -1.0, 3750.0, 7.5) == 0.0
    assert stop_time(0.0, -1.0, 3750.0, 7.5) == 0.0 and stop_time(0.0, 0.0, 3750.0, 7.5) == 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_braking_onto_the_range_end_at_1khz_stops_on_it_within_every_limit(sign: float) -> None:
    lim = joint(J2, start=sign * 1.3)
    chk = Check(lim)
    for _ in range(700):
        chk(lim.limit([sign * 5.0], None))
    assert lim.q[0] == pytest.approx(sign * lim.hi[0], abs=1e-6) and lim.v[0] == 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_stop_at_1khz_is_at_rest_by_its_s_curve_time_and_never_reverses(sign: float) -> None:
    for ticks in (3, 40, 400):
        lim = joint(J2, target_horizon_s=0.0)
        chk = Check(lim)
        for _ in range(ticks):
            chk(lim.limit([sign * 1.7], None))
        v, a = abs(lim.v[0]), math.copysign(1.0, lim.v[0]) * lim.a[0]
        bound = stop_time(v, min(a + 0.5 * lim.jerk[0] * KHZ, lim.acc[0]), lim.jerk[0], lim.dec[0])
        moving = 0
        for k in range(1, 1000):
            chk(lim.stop(), stopping=True)
            moving = k if lim.v[0] != 0.0 else moving
            if lim.v[0] == 0.0 and lim.a[0] == 0.0:
                break
        assert moving * KHZ <= bound + 1e-12, (ticks, moving, bound)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_approaching_a_target_at_1khz_never_passes_it(sign: float) -> None:
    for step in (0.002, 0.05, 0.4):
        lim = joint(J2, target_horizon_s=0.05)
        chk = Check(lim)
        for _ in range(900):
            chk(lim.limit([sign * step], None))
            assert sign * lim.q[0] <= step + 1e-12
        assert lim.q[0] == pytest.approx(sign * step, abs=1e-6)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("vmax", [0.3, 0.2, 0.2822])
def test_reaching_the_velocity_limit_at_1khz_ramps_the_acceleration_away_before_it(sign: float, vmax: float) -> None:
    """Every tick on the way the velocity still to come while the acceleration ramps to zero fits under the limit
    (the checker's speeding-up rule); the limits differ in where the last ticks fall on that ramp."""
    fields = dict(J2, max_velocity=vmax)
    lim = joint(fields, target_horizon_s=0.0)
    chk = Check(lim)
    for _ in range(250):
        chk(lim.limit([sign * 1.7], None))
    assert lim.v[0] == pytest.approx(sign * vmax, rel=1e-9)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_from_beyond_the_range_at_1khz_the_command_only_comes_back(sign: float) -> None:
    lim = joint(J2, start=sign * 1.8)
    chk = Check(lim)
    worst = 1.8 - lim.hi[0]
    for _ in range(300):
        chk(lim.limit([0.0], None), in_range=False)
        out = max(sign * lim.q[0] - lim.hi[0], 0.0)
        assert out <= worst + 1e-15
        worst = out
    assert worst == 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_max_step_window_at_1khz_is_braked_for_and_rested_on(sign: float) -> None:
    lim = joint(J2, max_relative_target=[0.05])
    chk = Check(lim)
    for _ in range(400):
        chk(lim.limit([sign * 1.0], [0.0]))
        assert abs(lim.q[0]) <= 0.05 + 1e-12
        assert not any(r[0] == "max_step_yielded" for r in lim.interventions)
    assert lim.q[0] == pytest.approx(sign * 0.05, abs=1e-6) and lim.v[0] == 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_reversing_at_1khz_keeps_every_state_stoppable_and_a_stop_from_it_clean(sign: float) -> None:
    for cut in (180, 250, 330):
        lim = joint(AD, target_horizon_s=0.0)
        chk = Check(lim)
        for k in range(cut):
            chk(lim.limit([sign * 0.2 * math.sin(2 * math.pi * 3.0 * k * KHZ)], None))
        chk.stop(600)


def test_a_joint_with_less_deceleration_than_acceleration_keeps_the_smaller_both_ways() -> None:
    lim = joint(AD, dt=0.01)
    chk = Check(lim)
    for target in (0.9, -0.9, 0.3, -0.95, 0.0):
        for _ in range(60):
            chk(lim.limit([target], None))
    chk.stop(100)


SOFT = dict(J2, soft_lower_limit=-1.0, soft_upper_limit=1.0, k_position=20.0)


@pytest.mark.parametrize("start", [1.5, -1.5])
def test_a_stop_at_rest_beyond_a_soft_limit_holds_there(start: float) -> None:
    """The soft-limit spring shapes motion towards a target; a joint at rest that is told to stop does not move, not
    even back inside its soft limits."""
    lim = joint(SOFT, start=start)
    for _ in range(5):
        assert lim.stop()[0] == start and not lim.interventions


def test_a_stop_from_the_speed_one_tick_of_jerk_can_take_away_lands_at_rest_at_once() -> None:
    """From v = J dt^2, braking at -J dt: the next command is at rest (a' = -v / dt keeps the jerk), then it holds."""
    lim = joint(J2, start=0.5)
    dt, j = lim.dt, lim.jerk[0]
    lim.v[0], lim.a[0] = j * dt * dt, -j * dt
    lim.stop()
    assert lim.v[0] == 0.0 and abs(lim.a[0] + j * dt) < 1e-9
    lim.stop()
    assert lim.v[0] == 0.0 and lim.a[0] == 0.0


@pytest.mark.parametrize("v", [0.0, 0.5])
@pytest.mark.parametrize("excess, reported", [(0.5e-9, False), (0.9995e-9, False), (1.0005e-9, True), (1.5e-9, True)])
def test_a_jerk_window_beyond_the_acceleration_window_by_rounding_is_not_a_yield(v: float, excess: float,
                                                                                 reported: bool) -> None:
    """Bounds that meet within 1e-9 (relative to 1 + |v|) count as met; beyond that the jerk yields and says so: the
    jerk limit, the acceleration it came from, no applied value."""
    lim = joint(J2)
    dt, j, m = lim.dt, lim.jerk[0], lim.acc[0]
    a = m + j * dt + excess * (1.0 + v) / dt  # the jerk window [v + a dt - J dt^2, ...] starts above v + m dt
    lim.v[0], lim.a[0] = v, a
    lim.stop()
    assert lim.interventions == ([("jerk_yielded", 0, j, a, 0.0)] if reported else [])


@pytest.mark.parametrize("excess, reported", [(0.5e-9, False), (0.99e-9, False), (0.9995e-9, False),
                                               (1.0005e-9, True)])
def test_a_stop_whose_jerk_window_ends_within_rounding_of_the_no_reversal_bound_rides_it(excess: float,
                                                                                          reported: bool) -> None:
    """The stop's no-reversal bound (sqrt v' >= sqrt v - dt sqrt(J / 2)) above the jerk window's top by rounding: the
    command takes the bound, reporting the jerk as yielded only beyond 1e-9 (relative)."""
    lim = joint(J2, start=0.2)
    dt, j = lim.dt, lim.jerk[0]
    v = 0.01
    bound = (math.sqrt(v) - math.sqrt(0.5 * j * dt * dt)) ** 2
    gap = excess * (1.0 + v)
    lim.v[0], lim.a[0] = v, (bound - gap - v - j * dt * dt) / dt  # the window's top: bound - gap
    a = lim.a[0]
    lim.stop()
    assert lim.interventions == ([("jerk_yielded", 0, j, a, 0.0)] if reported else [])
    assert lim.v[0] == pytest.approx(bound, abs=1e-12)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_proposal_resuming_in_the_middle_of_a_stop_keeps_the_jerk_and_every_state_stoppable(sign: float) -> None:
    """Moving, stopped for a while (riding the stop's no-reversal bound), then asked to move on the same way: the
    approach picks up from the bound instead of dropping to rest with an acceleration the jerk cannot undo."""
    for moving, stopping in ((16, 18), (30, 5), (60, 12), (100, 30), (12, 40)):
        lim = joint(J2, target_horizon_s=0.05)
        chk = Check(lim)
        target = [sign * -1.5]
        for _ in range(moving):
            chk(lim.limit(target, None))
        for _ in range(stopping):
            chk(lim.stop(), stopping=True)
        for _ in range(40):
            chk(lim.limit(target, None))
        chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_tracking_a_reference_that_runs_past_the_range_end_brakes_onto_the_end(sign: float) -> None:
    """The reference keeps its velocity beyond the range (its position clamped to the end): only the range's own
    braking curve stops the joint there, within every limit."""
    lim = joint(J2, start=sign * 1.0)
    chk = Check(lim)
    ref = sign * 1.0
    for _ in range(1500):
        ref += sign * 1.5 * lim.dt
        chk(lim.track([ref], [sign * 1.5], None))
    assert lim.q[0] == pytest.approx(sign * lim.hi[0], abs=1e-6) and lim.v[0] == 0.0


def no_reversal_bound(lim: CommandLimiter, v: float) -> float:
    """The least forward velocity after this tick from which the jerk-limited stop needs no reversal."""
    return (math.sqrt(v) - math.sqrt(0.5 * lim.jerk[0] * lim.dt ** 2)) ** 2


def window_topped_at(lim: CommandLimiter, sign: float, v: float, top: float) -> Check:
    """A joint moving at sign * v, its acceleration set by hand so that its jerk window's top is sign * top."""
    dt = lim.dt
    return moving_with(lim, sign * v, sign * (top - v - lim.jerk[0] * dt * dt) / dt)


def moving_with(lim: CommandLimiter, v: float, a: float) -> Check:
    """A joint set moving at v with acceleration a, and a checker that knows it."""
    lim.v[0], lim.a[0] = v, a
    chk = Check(lim)
    chk.v, chk.a = v, a
    return chk


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_joint_braking_too_hard_to_stop_moving_forward_reverses_and_then_stops_cleanly(sign: float) -> None:
    """Set braking so hard that every forward velocity the jerk allows lies below the no-reversal bound: only the
    reversing side is left, and the approach of a target ahead takes it (to rest, then back), never a forward velocity
    from which no stop exists. A stop that follows keeps every limit."""
    lim = joint(J2, start=0.2)
    dt, j = lim.dt, lim.jerk[0]
    v = 0.005
    bound = (math.sqrt(v) - math.sqrt(0.5 * j * dt * dt)) ** 2
    a = (0.5 * bound - v - j * dt * dt) / dt  # the jerk window's top: half the bound
    chk = moving_with(lim, sign * v, sign * a)
    lim.limit([sign * 1.0 + 0.2], None)
    assert sign * lim.v[0] <= 0.0
    chk.q, chk.v, chk.a = lim.q[0], lim.v[0], lim.a[0]
    chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("asked, forward", [(0.0, False), (0.4, False), (0.6, True), (3.0, True)])
def test_between_rest_and_the_no_reversal_bound_the_side_nearer_what_is_asked_is_taken(sign: float, asked: float,
                                                                                        forward: bool) -> None:
    """Slowing down (v = 0.004, a = -2 at 1 kHz), both rest-and-back and staying above the bound are within the jerk;
    between them no velocity can stop without reversing. A target asking for less than half the bound turns back,
    more goes on; either way the stop after it keeps every limit."""
    lim = joint(J2, start=0.2)
    dt, j = lim.dt, lim.jerk[0]
    v = 0.004
    bound = (math.sqrt(v) - math.sqrt(0.5 * j * dt * dt)) ** 2
    chk = moving_with(lim, sign * v, sign * -2.0)
    out = lim.limit([0.2 + sign * asked * bound * dt], None)
    chk(out)
    assert (sign * lim.v[0] >= bound) if forward else (sign * lim.v[0] <= 0.0), (lim.v[0], bound)
    chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("beyond", [1e-3, 1.0])
def test_between_rest_and_the_no_reversal_bound_a_target_beyond_the_range_asks_only_for_its_end(sign: float,
                                                                                                beyond: float) -> None:
    """Just short of the range end (1.1e-5), slowing down (v = 0.006, a = -3 at 1 kHz, a 0.1 s approach): the end
    asks for less than half the bound, so the joint turns to rest; a target beyond the end asks for the same."""
    lim = joint(J2, start=sign * (J2["max_position"] - 1.1e-5), target_horizon_s=0.1)
    chk = moving_with(lim, sign * 0.006, sign * -3.0)
    chk(lim.limit([sign * (J2["max_position"] + beyond)], None))
    assert sign * lim.v[0] <= 0.0, lim.v[0]
    chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("below", [2.99, 4.0, 100.0])
def test_a_jerk_window_short_of_the_no_reversal_bound_with_rest_out_of_reach_rides_its_top(sign: float,
                                                                                          below: float) -> None:
    """Braking (set by hand beyond the deceleration limit) so that the whole jerk window, cut at the deceleration
    limit, lies between rest and the no-reversal bound (its top 3e-12 to 1e-10, relative, below it): the command rides
    the top, nearest the bound, within the jerk and deceleration limits, and the stop after it keeps every limit.
    Turning to rest instead needs a deceleration of 10 against 7.5 (what the fuzz found on the UR5e)."""
    lim = joint(J2, start=0.2)
    v = 0.01
    top = no_reversal_bound(lim, v) + (1.0 - below) * 1e-12 * (1.0 + v)
    chk = window_topped_at(lim, sign, v, top)
    assert v - lim.dec[0] * lim.dt > 0.0  # rest is out of reach this tick
    chk(lim.limit([sign * 1.5], None))
    assert sign * lim.v[0] == pytest.approx(top, abs=1e-13)
    chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("below, rides", [(2.99, True), (3.5, False), (100.0, False)])
def test_a_jerk_window_reaching_rest_rides_the_no_reversal_bound_only_where_it_ends_on_it(sign: float, below: float,
                                                                                          rides: bool) -> None:
    """A window from below rest (v = 0.005, a = -8 set by hand) to 3e-12 (relative) under the bound: within rounding
    of it, the command rides the bound (stoppable, as a stop does); further below, only the reversing side is left,
    and the target ahead (far beyond) does not change that."""
    lim = joint(J2, start=0.2)
    v = 0.005
    top = no_reversal_bound(lim, v) + (1.0 - below) * 1e-12 * (1.0 + v)
    chk = window_topped_at(lim, sign, v, top)
    assert v - lim.dec[0] * lim.dt < 0.0  # rest is within reach this tick
    chk(lim.limit([sign * 1.5], None))
    if rides:
        assert sign * lim.v[0] == pytest.approx(top, abs=1e-13)
    else:
        assert sign * lim.v[0] <= 0.0
    chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_jerk_window_whose_lower_end_is_exactly_rest_turns_to_rest(sign: float) -> None:
    """v = A dt: braking at the limit lands exactly at rest, the window's top half the no-reversal bound (a = -10.3
    set by hand). Rest is in reach, so the command goes there, not to a velocity no stop can take without reversing."""
    lim = joint(J2, start=0.2)
    v = lim.acc[0] * lim.dt
    chk = window_topped_at(lim, sign, v, 0.5 * no_reversal_bound(lim, v))
    assert lim.dec[0] == lim.acc[0]  # braking at the limit from v = A dt lands exactly on 0.0
    chk(lim.limit([sign * 1.5], None))
    assert lim.v[0] == 0.0, lim.v[0]
    chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_joint_already_reversing_within_its_jerk_window_keeps_going_back(sign: float) -> None:
    """Braking so hard (set by hand) that the whole jerk window lies below rest: the command stays in it, turning
    back at once, rather than being held at rest with a jerk beyond the limit."""
    lim = joint(J2, start=0.2)
    chk = moving_with(lim, sign * 0.004, sign * -9.0)
    chk(lim.limit([0.2 + sign * 1.0], None))
    assert sign * lim.v[0] < 0.0
    chk.stop(2000)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("vmax", [0.3, 0.2, 0.2822, 1.0])
def test_speeding_up_to_the_velocity_limit_always_presses_some_limit(sign: float, vmax: float) -> None:
    """Time-optimal at every tick: until at the velocity limit, each command is on the acceleration limit, the jerk
    limit, or the velocity the stop of the acceleration still peaks at (v + (a - J dt / 2)^2 / 2J = vmax). A bound
    tighter than these would reach the limit later."""
    lim = joint(dict(J2, max_velocity=vmax), target_horizon_s=0.0)
    dt, j, m = lim.dt, lim.jerk[0], lim.acc[0]
    v = a = 0.0
    for _ in range(400):
        lim.limit([sign * 1.7], None)
        v_new, a_new = sign * lim.v[0], sign * lim.a[0]
        rise = max(0.0, a_new - 0.5 * j * dt) ** 2 / (2.0 * j)
        pressed = (a_new >= m - 1e-6, a_new - a >= j * dt - 1e-6, v_new + rise >= vmax - 1e-9, a_new - a <= -j * dt + 1e-6)
        assert v_new >= vmax - 1e-12 or any(pressed), (v, a, v_new, a_new)
        v, a = v_new, a_new
    assert v == pytest.approx(vmax, rel=1e-9)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_within_half_a_jerk_step_of_the_velocity_limit_the_next_command_is_at_it(sign: float) -> None:
    """Less than J dt^2 / 2 below the limit, the acceleration can ramp to zero within the period: the command goes to
    the limit itself, not ever closer to it."""
    lim = joint(dict(J2, max_velocity=0.3), target_horizon_s=0.0)
    dt, j = lim.dt, lim.jerk[0]
    moving_with(lim, sign * (0.3 - 0.45 * j * dt * dt), sign * 0.45 * j * dt)
    lim.limit([sign * 1.7], None)
    assert lim.v[0] == pytest.approx(sign * 0.3, abs=1e-12)


def test_an_acceleration_held_at_the_smaller_of_a_and_d_is_reported_as_that_limit() -> None:
    """With a jerk limit the acceleration window is [-min(A, D), min(A, D)] both ways: when D < A, speeding up as
    hard as allowed is reported against the deceleration limit, the one that binds."""
    lim = joint(AD, target_horizon_s=0.0)
    for _ in range(30):
        lim.limit([1.0], None)
    assert lim.a[0] == pytest.approx(lim.dec[0]) and lim.dec[0] < lim.acc[0]
    assert [r[:3] for r in lim.interventions] == [("deceleration", 0, lim.dec[0])]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_stop_from_above_the_velocity_limit_brakes_along_the_no_reversal_bound(sign: float) -> None:
    """A state never produced here (twice the velocity limit, set by hand): in a stop only the range comes before the
    no-reversal bound, so the command brakes along that bound (the jerk gives way, reported), not down to the
    velocity limit at once."""
    lim = joint(dict(J2, max_velocity=0.3))
    dt, j = lim.dt, lim.jerk[0]
    lim.v[0] = sign * 0.6
    lim.stop()
    assert lim.v[0] == pytest.approx(sign * (math.sqrt(0.6) - math.sqrt(0.5 * j * dt * dt)) ** 2, rel=1e-9)
    assert "jerk_yielded" in [r[0] for r in lim.interventions]
