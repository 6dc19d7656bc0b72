"""The S-curve stop's closed forms and the limiter's search for the fastest velocity that still stops before a wall,
checked on thousands of generated states against an oracle written apart from them: a braking control law stepped
in tiny constant-jerk pieces (ramp the deceleration up at -J while the velocity left exceeds what ramping it back
down would shed, hold it at the deceleration limit, ramp back at +J), and, for the search, the limiter's own
excess function probed just above what it returned.

The control law knows nothing of peak decelerations or phase times; it only asks, at each piece, whether it is time
to let go of the brake. Where it stops is where the joint stops.
"""
from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Iterator

import pytest

from omni_vla_safety.limiter import CommandLimiter, stop_excursion, stop_time
from omni_vla_safety.limits import load_limit_sets

REPO = Path(__file__).resolve().parents[2]
PANDA = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
SETS = [load_limit_sets(REPO / "config" / "joint_limits.yaml")[j] for j in PANDA]
PIECES = 200


def must_let_go(v: float, a: float, j: float, step: float, jerk: float) -> bool:
    """After `step` at jerk j: braking, and no more velocity left than letting go would shed."""
    v1, a1 = v + a * step + j * step * step / 2, a + j * step
    return a1 <= 0.0 and v1 <= a1 * a1 / (2 * jerk)


def braked(v: float, a: float, jerk: float, dec: float) -> tuple[float, float]:
    """(farthest forward position, time to rest) under the braking law from (v, a), position starting at 0. It ends
    when the joint can no longer come forward (v <= 0 and no push left that outlasts it), or when it lets go of
    the brake: from there a ramps to 0 at +J in -a/J, shedding a^2 / 2J of velocity, and the joint is at rest."""
    h = ((abs(a) + 2 * dec) / jerk + abs(v) / dec + abs(a) / jerk) / PIECES
    x = far = t = 0.0
    while True:
        if v <= 0.0 and (a <= 0.0 or v + a * a / (2 * jerk) <= 0.0):
            return far, t
        if a <= 0.0 and v <= a * a / (2 * jerk):
            rest = -a / jerk
            x += v * rest + a * rest * rest / 2 + jerk * rest ** 3 / 6
            return max(far, x), t + rest
        j = -jerk if a > -dec else 0.0       # brake harder, or hold the deceleration limit
        step = h
        if j < 0.0 and a - jerk * h < -dec:
            step = (a + dec) / jerk           # land on the limit instead of stepping past it
        if must_let_go(v, a, j, step, jerk):  # land on the moment to let go (bisection)
            lo_s, hi_s = 0.0, step
            for _ in range(60):
                mid = 0.5 * (lo_s + hi_s)
                lo_s, hi_s = (lo_s, mid) if must_let_go(v, a, j, mid, jerk) else (mid, hi_s)
            step = hi_s
        x += v * step + a * step * step / 2 + j * step ** 3 / 6
        v += a * step + j * step * step / 2
        a = -dec if j < 0.0 and a + j * step < -dec else a + j * step
        t += step
        far = max(far, x)


def states(seed: int, n: int, jerk: float, dec: float) -> list[tuple[float, float]]:
    """Moving forward at any acceleration it can stop from, moving back while pushed forward (around the band
    where the push turns it), braking nearly as hard as it can: scaled to J and D so every branch is reached."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a = rng.uniform(-dec, dec)
        kind = rng.random()
        if kind < 0.4:
            v = rng.uniform(0.0, 3.0) * (1 + rng.choice([0.0, 1.0]) * 100 * rng.random() * dec * dec / jerk)
            v = max(v, (min(a, 0.0) ** 2) / (2 * jerk))
        elif kind < 0.8:
            a = abs(a)
            v = -rng.uniform(0.2, 3.0) * a * a / (2 * jerk)
        else:
            a = -abs(a)
            v = rng.uniform(1.0, 1.5) * a * a / (2 * jerk)
        out.append((v, a))
    return out


@pytest.mark.parametrize("jerk, dec", [(7500.0, 15.0), (3750.0, 7.5), (200.0, 20.0)])
def test_the_closed_form_excursion_and_time_are_where_and_when_the_braking_law_stops(jerk: float, dec: float) -> None:
    for v, a in states(7, 400, jerk, dec):
        far, t = braked(v, a, jerk, dec)
        x = stop_excursion(v, a, jerk, dec)
        assert x == pytest.approx(far, rel=1e-7, abs=1e-15), (v, a, x, far)
        if v >= 0.0:
            assert stop_time(v, a, jerk, dec) == pytest.approx(t, rel=1e-7, abs=1e-12), (v, a)


@pytest.mark.parametrize("jerk, dec", [(7500.0, 15.0), (200.0, 20.0)])
def test_a_joint_pushed_forward_while_moving_back_goes_forward_exactly_when_the_push_outlasts_its_speed(
        jerk: float, dec: float) -> None:
    """v < 0, a > 0: ramping a away at -J adds a^2 / 2J of velocity first. Within -v it never turns forward; beyond,
    it does, but comes forward of where it started only once that outweighs how far it went back first."""
    for s in (0.5, 0.9, 0.99, 1.01, 1.2, 1.45, 1.55, 2.0, 2.5, 4.0):
        a = 0.8 * dec
        v = -a * a / (2 * jerk) / s
        far, _ = braked(v, a, jerk, dec)
        x = stop_excursion(v, a, jerk, dec)
        assert x == pytest.approx(far, rel=1e-7, abs=1e-15), (s, x, far)
        assert s > 1.0 or x == 0.0
    assert stop_excursion(-a * a / (2 * jerk) / 4.0, a, jerk, dec) > 0.0


def test_the_time_to_rest_of_a_joint_at_rest_or_moving_back_without_a_push_is_zero() -> None:
    assert stop_time(0.0, 0.0, 7500.0, 15.0) == 0.0
    assert stop_time(-0.5, 0.0, 7500.0, 15.0) == 0.0 and stop_time(-0.5, -3.0, 7500.0, 15.0) == 0.0
    assert stop_time(0.0, 0.5, 7500.0, 15.0) == pytest.approx(braked(0.0, 0.5, 7500.0, 15.0)[1], rel=1e-7)


@pytest.mark.parametrize("dt", [0.001, 0.01])
def test_the_fastest_velocity_that_stops_before_a_wall_fits_and_nothing_faster_does(dt: float) -> None:
    """_cap(i, x, v, lo, hi): the largest s in [lo, hi] whose stop (_excess <= 0) stays within x; None only when
    even lo does not fit. Walls from far beyond the shortcut's reach to just behind the joint."""
    lim = CommandLimiter(PANDA, SETS, dt)
    rng = random.Random(11)
    checked = 0
    for _ in range(3000):
        i = rng.randrange(7)
        m, vmax = lim._m[i], lim.vmax[i]
        v = rng.uniform(-vmax, vmax)
        lo, hi = sorted((v + rng.uniform(-1, 1) * m * dt, v + rng.uniform(-1, 1) * m * dt))
        reach = (max(hi, 0.0) + m * m / (2 * lim.jerk[i])) ** 2 / m
        pick = rng.random()
        if pick < 0.1:
            x = rng.choice([-1e-4, 1e-6, 1e-3])
        elif pick < 0.6:  # a wall that binds inside the window: where the stop from some s in it ends
            x = max(lim._excess(i, 0.0, v, rng.uniform(lo, hi)), 1e-9)
        else:
            x = reach * 10 ** rng.uniform(-3, 1.3)
        c = lim._cap(i, x, v, lo, hi)
        if c is None:
            assert lim._excess(i, x, v, lo) > 0.0, (i, x, v, lo, hi)
            continue
        assert lo <= c <= hi and lim._excess(i, x, v, c) <= 1e-12 * (1 + abs(x)), (i, x, v, lo, hi, c)
        above = c + 1e-9 * (1 + abs(c))
        if c < hi and above <= hi:
            assert lim._excess(i, x, v, above) > 0.0, (i, x, v, lo, hi, c)
            checked += 1
    assert checked > 300


def test_a_joint_without_a_jerk_limit_brakes_on_its_deceleration_curve() -> None:
    sets = [s.model_copy(update={"hard": s.hard.model_copy(update={"has_jerk_limits": False})}) for s in SETS]
    lim = CommandLimiter(PANDA, sets, 0.001)
    assert lim.jerk[0] == math.inf
    assert lim._wall(0, 0.2, 0.0, -1.0, 1.0) == lim.brake_speed(0, 0.2)


def test_a_velocity_window_that_is_empty_is_returned_as_its_lower_end() -> None:
    lim = CommandLimiter(PANDA, SETS, 0.001)
    assert lim._wall(0, 0.2, 0.0, 0.5, 0.4) == 0.5


def test_a_wall_no_velocity_in_the_window_can_stop_before_is_reported_below_the_window() -> None:
    lim = CommandLimiter(PANDA, SETS, 0.001)
    lo, hi = 2.0, 2.01
    assert lim._cap(0, 1e-6, 2.0, lo, hi) is None and lim._wall(0, 1e-6, 2.0, lo, hi) < lo


def _moving_near_the_range_end(rng: random.Random, dt: float) -> CommandLimiter:
    """A Panda limiter whose joints were driven towards their upper ends for a while: moving, braking, near."""
    lim = CommandLimiter(PANDA, SETS, dt)
    lim.reset([hi - rng.uniform(0.0, min(0.05, (hi - lo) / 2)) for lo, hi in zip(lim.lo, lim.hi)])
    for _ in range(rng.randrange(1, 40)):
        lim.limit([hi - rng.uniform(-0.01, 0.03) for hi in lim.hi], None)
    return lim


def _twins(seed: int, dt: float) -> Iterator[tuple[random.Random, CommandLimiter, CommandLimiter]]:
    """300 generated states, each as two identical limiters to give two targets to."""
    rng = random.Random(seed)
    for _ in range(300):
        lim = _moving_near_the_range_end(rng, dt)
        yield rng, lim, copy.deepcopy(lim)


@pytest.mark.parametrize("dt", [0.001, 0.01])
def test_a_target_beyond_the_range_is_followed_as_the_range_end(dt: float) -> None:
    for rng, lim, twin in _twins(5, dt):
        beyond = [hi + rng.choice([1e-6, 0.3, 10.0]) for hi in lim.hi]
        assert lim.limit(beyond, None) == twin.limit(list(lim.hi), None)
        below = [lo - rng.choice([1e-6, 0.3, 10.0]) for lo in lim.lo]
        assert lim.limit(below, None) == twin.limit(list(lim.lo), None)


@pytest.mark.parametrize("dt", [0.001, 0.01])
def test_a_non_finite_target_is_followed_as_the_command_itself(dt: float) -> None:
    """Inside the range: there a target at the command is its own clamp, as a NaN one becomes."""
    for _rng, lim, twin in _twins(6, dt):
        assert lim.limit([math.nan] * lim.n, None) == twin.limit(list(lim.q), None)


@pytest.mark.parametrize("dt", [0.001, 0.01])
def test_a_joint_still_speeding_up_when_it_must_brake_stops_on_its_range_end_not_past_it(dt: float) -> None:
    """From rest at distances where braking begins while the joint is still accelerating (where the discrete steps'
    lead over the continuous stop matters), towards a target beyond the range: never past the end, at rest on it."""
    for d in [1e-4 * 1.4 ** k for k in range(26)]:
        lim = CommandLimiter(PANDA, SETS, dt)
        lim.reset([hi - d for hi in lim.hi])
        target = [hi + 5.0 for hi in lim.hi]
        top = list(lim.q)
        for _ in range(int(1.5 / dt)):
            out = lim.limit(target, None)
            top = [max(a, b) for a, b in zip(top, out)]
        for i in range(7):
            assert top[i] <= lim.hi[i] + 1e-12, (d, i, top[i] - lim.hi[i])
            assert lim.hi[i] - lim.q[i] <= 1e-6 and lim.v[i] == pytest.approx(0.0, abs=1e-9), (d, i)
