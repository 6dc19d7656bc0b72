"""Jerk-limited joints at 1 kHz (J dt below A + D, where braking needs the S-curve) and at 100 Hz.

Every command is checked from the published positions only (v = dq/dt, a = dv/dt, j = da/dt):
range, velocity, acceleration (the smaller of A and D both ways, see safety/limiter.py), jerk,
no reversal in a stop, and that every moving state can still stop without reversing. Tolerances
(floating point): position 1e-9, velocity 1e-9, acceleration 1e-6, jerk 1e-3 (units/s^n).
"""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Sequence

import pytest
from limits_yaml import limits_yaml

from omni_vla_safety.limiter import CommandLimiter, stop_excursion, stop_time
from omni_vla_safety.limits import load_limit_sets, parse_joint_limits_yaml

REPO = Path(__file__).resolve().parents[2]
PANDA = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
SETS = [load_limit_sets(REPO / "config" / "joint_limits.yaml")[j] for j in PANDA]
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
KHZ = 0.001
TOL_Q, TOL_V, TOL_A, TOL_J = 1e-9, 1e-9, 1e-6, 1e-3


def panda(dt: float = KHZ, **kwargs: object) -> CommandLimiter:
    lim = CommandLimiter(PANDA, SETS, dt, **kwargs)  # type: ignore[arg-type]
    lim.reset(HOME)
    return lim


def reached(v: float, a: float, jerk: float, dec: float, t: float) -> tuple[float, float, float]:
    """Position, velocity, acceleration after time t of the S-curve stop (jerk -J to the peak deceleration
    p = min(D, sqrt(J v + a^2 / 2)), 0 while at p, +J back), stepped in many small constant-jerk pieces."""
    p = min(dec, math.sqrt(max(0.0, jerk * v + 0.5 * a * a)))
    t1 = (a + p) / jerk
    t2 = max(0.0, v + a * a / (2 * jerk) - p * p / jerk) / p if p > 0 else 0.0
    x = 0.0
    for j, length in ((-jerk, t1), (0.0, t2), (jerk, max(0.0, t - t1 - t2))):
        h = length / 5000
        for _ in range(5000):
            x += v * h + a * h * h / 2 + j * h ** 3 / 6
            v += a * h + j * h * h / 2
            a += j * h
    return x, v, a


class Kinematics:
    """Recomputes v, a, j from the published positions and asserts every limit at every command."""

    def __init__(self, lim: CommandLimiter, in_range: bool = True) -> None:
        self.lim = lim
        self.in_range = in_range
        self.q = list(lim.q)
        self.v = list(lim.v)
        self.a = list(lim.a)
        self.m = [min(a, d) if j < math.inf else max(a, d) for a, d, j in zip(lim.acc, lim.dec, lim.jerk)]

    def step(self, out: Sequence[float], stopping: bool = False) -> None:
        lim, dt = self.lim, self.lim.dt
        assert not any(r[0] in ("jerk_yielded", "deceleration_yielded") for r in lim.interventions), lim.interventions
        for i in range(lim.n):
            q = out[i]
            v = (q - self.q[i]) / dt
            a = (v - self.v[i]) / dt
            j = (a - self.a[i]) / dt
            name = lim.joint_names[i]
            assert not self.in_range or lim.lo[i] - TOL_Q <= q <= lim.hi[i] + TOL_Q, f"{name}: position {q}"
            assert abs(v) <= lim.vmax[i] + TOL_V, f"{name}: velocity {v}"
            assert abs(a) <= self.m[i] + TOL_A, f"{name}: acceleration {a}"
            assert abs(j) <= lim.jerk[i] + TOL_J, f"{name}: jerk {j}"
            if stopping:
                assert v * self.v[i] >= 0.0, f"{name}: reversed in a stop ({self.v[i]} -> {v})"
            if lim.jerk[i] < math.inf and v == 0.0:  # at rest, or landed there: holding keeps the jerk
                assert abs(a) <= lim.jerk[i] * dt + TOL_A, f"{name}: at rest with a {a}"
            elif lim.jerk[i] < math.inf:
                # Stoppable without reversing: |v| >= (braking part of a + J dt / 2)^2 / 2J, up to rounding.
                s = 1.0 if v > 0 else -1.0
                brake = min(0.0, s * a + 0.5 * lim.jerk[i] * dt)
                assert abs(v) >= brake * brake / (2 * lim.jerk[i]) - 1e-9, f"{name}: v {v}, a {a} cannot stop"
            self.q[i], self.v[i], self.a[i] = q, v, a

    def stop(self, max_ticks: int) -> int:
        for k in range(max_ticks):
            self.step(self.lim.stop(), stopping=True)
            if self.lim.stopped and all(a == 0.0 for a in self.lim.a):
                return k + 1
        raise AssertionError(f"still moving after {max_ticks} ticks: v {self.lim.v}")


@pytest.mark.parametrize("v, a", [(1.0, 0.0), (2.0, 5.0), (0.3, -5.0), (0.01, 2.0), (2.6, -14.0), 
                                  (0.02, -7.0), (0.5, 14.0), (-0.0001, 3.0)])
def test_the_s_curve_stop_ends_at_rest_after_its_time_having_gone_its_excursion(v: float, a: float) -> None:
    jerk, dec = 7500.0, 15.0
    if a < 0 and v < a * a / (2 * jerk):
        pytest.skip("cannot stop without reversing")
    t = stop_time(v, a, jerk, dec)
    x, v_end, a_end = reached(v, a, jerk, dec, t)
    assert abs(v_end) < 1e-9 * (1 + abs(v)) and abs(a_end) < 1e-6
    assert stop_excursion(v, a, jerk, dec) == pytest.approx(max(x, 0.0), rel=1e-7, abs=1e-12)


def test_the_s_curve_stop_from_rest_takes_no_time_and_goes_nowhere() -> None:
    assert stop_time(0.0, 0.0, 7500.0, 15.0) == 0.0 and stop_excursion(0.0, 0.0, 7500.0, 15.0) == 0.0


@pytest.mark.parametrize("v, a", [(0.001, -5.0), (0.00001, -1.0)])
def test_a_joint_braking_too_hard_to_stop_without_reversing_goes_at_most_the_stop_from_the_hardest_braking(
        v: float, a: float) -> None:
    """v < a^2 / 2J: it reaches v = 0 before a does; its forward travel is at most that of braking at
    a = -sqrt(2 J v), which ends exactly at rest: v sqrt(2 v / J) / 3."""
    jerk, dec = 7500.0, 15.0
    assert stop_excursion(v, a, jerk, dec) == pytest.approx(v * math.sqrt(2 * v / jerk) / 3, rel=1e-12)
    a0 = -math.sqrt(2 * jerk * v)
    x, v_end, _ = reached(v, a0, jerk, dec, stop_time(v, a0, jerk, dec))
    assert stop_excursion(v, a, jerk, dec) == pytest.approx(x, rel=1e-6) and abs(v_end) < 1e-12


@pytest.mark.parametrize("v, a", [(-1.0, 0.0), (-0.001, -5.0), (-0.01, 10.0), (0.0, -3.0)])
def test_a_joint_moving_back_that_can_stop_without_coming_forward_has_no_forward_excursion(v: float, a: float) -> None:
    assert stop_excursion(v, a, 7500.0, 15.0) == 0.0


def test_a_joint_pushed_forward_from_moving_back_has_the_forward_excursion_of_its_s_curve() -> None:
    """v = -0.001 but a = 10: the velocity turns positive before the acceleration can ramp away."""
    v, a, jerk, dec = -0.001, 10.0, 7500.0, 15.0
    x, _, _ = reached(v, a, jerk, dec, stop_time(v, a, jerk, dec))
    assert stop_excursion(v, a, jerk, dec) == pytest.approx(x, rel=1e-6) and x > 0


@pytest.mark.parametrize("dt", [KHZ, 0.01])
@pytest.mark.parametrize("upper", [True, False])
def test_a_panda_braking_onto_its_range_end_keeps_every_limit_and_stops_on_it(dt: float, upper: bool) -> None:
    lim = panda(dt, target_horizon_s=0.0)
    chk = Kinematics(lim)
    target = [(hi + 5.0) if upper else (lo - 5.0) for lo, hi in zip(lim.lo, lim.hi)]
    for _ in range(int(2.0 / dt)):
        chk.step(lim.limit(target, None))
    for i in range(7):
        edge = lim.hi[i] if upper else lim.lo[i]
        assert abs(lim.q[i] - edge) < 1e-6 and lim.v[i] == 0.0, (i, lim.q[i], edge)


@pytest.mark.parametrize("dt", [KHZ, 0.01])
def test_the_approach_of_a_target_never_passes_it(dt: float) -> None:
    """Steps of every size towards targets at rest: each joint's distance to the target never changes sign."""
    lim = panda(dt, target_horizon_s=0.05)
    chk = Kinematics(lim)
    rng = random.Random(4)
    for _ in range(5):
        target = [min(max(q + rng.uniform(-0.8, 0.8), lo), hi) for q, lo, hi in zip(lim.q, lim.lo, lim.hi)]
        start = list(lim.q)
        for _ in range(int(1.2 / dt)):
            chk.step(lim.limit(target, None))
            for i in range(lim.n):
                assert (lim.q[i] - target[i]) * (start[i] - target[i]) >= -1e-12, (i, lim.q[i], target[i])
        assert max(abs(q - t) for q, t in zip(lim.q, target)) < 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_every_stop_from_random_motion_ends_at_rest_within_its_s_curve_time(seed: int) -> None:
    """Streams of random targets, cut by a stop at a random tick: the stop never reverses and has every joint
    at rest within the S-curve time from its velocity and the least favourable acceleration at the period's
    end (a + J dt / 2), no extra tick."""
    lim = panda(KHZ, target_horizon_s=rng_horizon(seed))
    chk = Kinematics(lim)
    rng = random.Random(seed)
    for _ in range(6):
        target = [rng.uniform(lo - 0.5, hi + 0.5) for lo, hi in zip(lim.lo, lim.hi)]
        for _ in range(rng.randrange(1, 400)):
            chk.step(lim.limit(target, None))
        bounds = []
        for i in range(7):
            s = 1.0 if lim.v[i] >= 0 else -1.0
            a = min(s * lim.a[i] + 0.5 * lim.jerk[i] * KHZ, lim.acc[i])
            bounds.append(stop_time(abs(lim.v[i]), a, lim.jerk[i], min(lim.acc[i], lim.dec[i])))
        moving = [0] * 7
        for k in range(1, 2000):
            chk.step(lim.stop(), stopping=True)
            moving = [k if lim.v[i] != 0.0 else m for i, m in enumerate(moving[:7])]
            if lim.stopped:
                break
        for i in range(7):
            assert moving[i] * KHZ <= bounds[i] + 1e-12, (i, moving[i], bounds[i])


def rng_horizon(seed: int) -> float:
    return (0.0, 0.05, 0.2)[seed % 3]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_speeding_up_to_the_velocity_limit_at_1khz_ramps_the_acceleration_away_before_it(sign: float) -> None:
    lim = panda(KHZ, target_horizon_s=0.0)
    chk = Kinematics(lim)
    target = list(HOME)
    target[0] = 2.8 * sign
    peak = 0.0
    for _ in range(1500):
        chk.step(lim.limit(target, None))
        peak = max(peak, abs(lim.v[0]))
    assert peak == pytest.approx(lim.vmax[0], rel=1e-9)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_robot_starting_beyond_its_range_comes_back_without_ever_going_further_out(sign: float) -> None:
    lim = CommandLimiter(PANDA, SETS, KHZ)
    start = list(HOME)
    start[3] = -0.02 if sign > 0 else -3.1  # panda_joint4's range is [-3.0718, -0.0698]
    lim.reset(start)
    chk = Kinematics(lim, in_range=False)
    worst = abs(start[3] - (lim.hi[3] if sign > 0 else lim.lo[3]))
    for _ in range(800):
        chk.step(lim.limit(HOME, None))
        out = max(lim.q[3] - lim.hi[3], lim.lo[3] - lim.q[3], 0.0)
        assert out <= worst + 1e-12
        worst = out
    assert lim.lo[3] <= lim.q[3] <= lim.hi[3]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_max_step_window_is_braked_for_at_1khz_without_a_yield(sign: float) -> None:
    """The robot does not follow (measurement fixed), the target is far: the command brakes into the window's
    edge with the S-curve and rests on it."""
    lim = panda(KHZ, max_relative_target=[0.1])
    chk = Kinematics(lim)
    target = list(HOME)
    target[0] = 2.5 * sign
    for _ in range(1500):
        chk.step(lim.limit(target, HOME))
        assert not any(r[0] == "max_step_yielded" for r in lim.interventions)
        assert abs(lim.q[0]) <= 0.1 + 1e-12
    assert lim.q[0] == pytest.approx(0.1 * sign, abs=1e-6) and lim.v[0] == 0.0


def test_a_joint_with_a_smaller_deceleration_than_acceleration_keeps_both_and_the_jerk() -> None:
    """A = 8, D = 4, J = 200 at 100 Hz: the acceleration stays within D both ways, so the velocity may change
    sign at any acceleration within the jerk limit."""
    spec = parse_joint_limits_yaml(limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0,
                                                      max_acceleration=8.0, max_deceleration=4.0,
                                                      max_jerk=200.0)))["a"]
    lim = CommandLimiter(["a"], [spec], 0.01)
    lim.reset([0.0])
    chk = Kinematics(lim)
    rng = random.Random(2)
    for _ in range(30):
        target = [rng.uniform(-1.5, 1.5)]
        for _ in range(rng.randrange(1, 60)):
            chk.step(lim.limit(target, None))
    chk.stop(400)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_reversing_while_tracking_keeps_every_moving_state_stoppable(sign: float) -> None:
    """A sinusoid fast enough to bind the acceleration: every reversal passes through states a stop could take
    over (checked at each command), and a stop from any of them ends at rest without reversing."""
    lim = panda(KHZ, target_horizon_s=0.0)
    chk = Kinematics(lim)
    for k in range(1200):
        target = list(HOME)
        target[1] = sign * 0.6 * math.sin(2 * math.pi * 2.0 * k * KHZ)
        chk.step(lim.limit(target, None))
    chk.stop(1000)
