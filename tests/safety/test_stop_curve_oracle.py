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

from safety_oracle import scurve_stop, travel

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
    even lo does not fit. Walls from far beyond any stop's reach to just behind the joint."""
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


@pytest.mark.parametrize("dt", [0.001, 0.01])
def test_the_window_top_is_kept_on_the_wall_its_stop_ends_on_and_refused_a_millionth_short(dt: float) -> None:
    """Walls a millionth short of where the top's stop ends, and exactly there; from slow to the velocity limit,
    speeding up and braking, and moving back while pushed forward hard enough to come forward (decision 0015: no
    cheaper test may stand in for the top's own stop)."""
    lim = CommandLimiter(PANDA, SETS, dt)
    rng = random.Random(24)
    for _ in range(4000):
        i = rng.randrange(7)
        m, vmax, j = lim._m[i], lim.vmax[i], lim.jerk[i]
        if rng.random() < 0.25:  # moving back, pushed forward by up to the acceleration limit
            alpha = rng.uniform(0.0, m)
            hi = -alpha * alpha / (2 * j) * rng.uniform(0.0, 1.0)
            v = hi - dt * (alpha + 0.5 * j * dt)
        else:
            hi = vmax * rng.choice([rng.random(), 10 ** rng.uniform(-6, 0), 1.0])
            v = min(vmax, max(0.0, hi + rng.uniform(-1.0, 1.0) * m * dt))
        lo = hi - rng.uniform(0.0, 2.0) * m * dt
        x0 = lim._excess(i, 0.0, v, hi)  # the wall the top's stop ends on (the excess at 0 is the stop plus hi dt)
        if x0 <= 0.0:
            continue
        short = lim._cap(i, x0 * (1.0 - 1e-6), v, lo, hi)
        assert short is None or short < hi, (i, v, lo, hi, x0)
        assert lim._cap(i, x0 * (1.0 + 1e-12), v, lo, hi) == hi, (i, v, lo, hi, x0)


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
    assert lim._wall(0, 1e-6, 2.0, lo, lo) < lo  # a window of one velocity that cannot stop either


def _stop_state(rng: random.Random, lim: CommandLimiter, i: int) -> tuple[float, float, float]:
    """(v, s, alpha): a joint at v given velocity s, alpha the most braking end-of-period acceleration the jerk
    allows after that tick ((s - v) / dt - J dt / 2, within the acceleration window). Speeding up a little or
    hard, braking, moving back while pushed forward (either side of where the push turns it): every branch of
    the bound. Braking harder than a stop without reversal allows (0 < s < alpha^2 / 2J) is left out: there
    the bound is that of `stop_excursion`, checked above."""
    dt, j, m = lim.dt, lim.jerk[i], lim._m[i]
    while True:
        alpha = rng.choice([rng.uniform(-m, m), rng.uniform(0.0, 1.0), rng.uniform(-1.0, 0.0)])
        kind = rng.random()
        if kind < 0.4:
            s = rng.uniform(0.0, lim.vmax[i]) * rng.choice([1.0, 1e-3])
        elif kind < 0.8:
            s = -abs(alpha) * abs(alpha) / (2 * j) * rng.uniform(0.2, 3.0)
        else:
            s = rng.uniform(-lim.vmax[i], 0.0)
        if alpha < 0.0 and 0.0 < s < alpha * alpha / (2 * j):
            continue
        return s - dt * (alpha + 0.5 * j * dt), s, alpha


def _forward_travel(s: float, alpha: float, jerk: float, dec: float) -> float:
    """Farthest forward of where it is that the S-curve stop from (s, alpha) takes a joint: it ends at rest
    moving forward, or never moves forward (the oracle's phases, not the limiter's closed form)."""
    if s <= 0.0 and s + max(alpha, 0.0) ** 2 / (2 * jerk) <= 0.0:
        return 0.0
    return max(0.0, travel(s, alpha, scurve_stop(s, alpha, jerk, dec)))


@pytest.mark.parametrize("dt", [0.001, 0.01])
def test_the_stop_bound_is_the_s_curve_travel_plus_the_commands_lead_while_it_still_speeds_up(dt: float) -> None:
    """The position bound of the module docstring, term by term: a velocity s fits a wall x ahead when the S-curve
    from (s, alpha) plus dt alpha^2 / 2J (alpha > 0, and the profile comes forward at all) ends within x - s dt;
    from beyond the wall (x < 0) the stop may not come forward at all, and s may not move further out."""
    lim = CommandLimiter(PANDA, SETS, dt)
    rng = random.Random(21)
    for _ in range(4000):
        i = rng.randrange(7)
        j, m = lim.jerk[i], lim._m[i]
        v, s, alpha = _stop_state(rng, lim, i)
        lead = dt * alpha * alpha / (2 * j) if alpha > 0.0 and s + alpha * alpha / (2 * j) > 0.0 else 0.0
        bound = _forward_travel(s, alpha, j, m) + lead
        x = rng.choice([rng.uniform(0.0, 2.0 * bound + 1e-6), -rng.uniform(0.0, 0.01), 0.0])  # 0: on the wall
        room = x - s * dt if x >= 0.0 else min(0.0, -s * dt)
        assert lim._excess(i, x, v, s) == pytest.approx(bound - room, rel=1e-11, abs=1e-15), (i, v, s, alpha, x)


def test_a_profile_that_peaks_exactly_at_rest_never_comes_forward_and_keeps_no_lead() -> None:
    """s = -alpha^2 / 2J exactly: ramping alpha away brings the joint to rest and no further, so the ticks have
    nothing to run ahead of (the lead term is for profiles that come forward)."""
    lim = CommandLimiter(PANDA, SETS, 0.001)
    j, dt = lim.jerk[0], lim.dt
    rng = random.Random(23)
    found = 0
    while found < 5:
        alpha = rng.uniform(0.5, lim._m[0])
        s = -alpha * alpha / (2 * j)
        v = s - dt * (alpha + 0.5 * j * dt)
        got = (s - v) / dt - 0.5 * j * dt  # the alpha the limiter computes: the tie must survive its rounding
        if s + got * got / (2 * j) != 0.0:
            continue
        found += 1
        assert lim._excess(0, 0.01, v, s) == -(0.01 - s * dt), (v, s, got)


def _commands_travel(s: float, alpha: float, jerk: float, dec: float, dt: float) -> float:
    """Farthest forward position of the commands that follow the S-curve from (s, alpha): each tick's velocity is
    the profile's at the tick's end, its position the last one's plus that velocity times dt (what the limiter
    sends), until the profile is at rest."""
    pieces, t0, v, a = [], 0.0, s, alpha
    for jk, length in scurve_stop(s, alpha, jerk, dec):
        pieces.append((t0 + length, t0, v, a, jk))
        v, a, t0 = v + a * length + jk * length * length / 2, a + jk * length, t0 + length
    q = far = 0.0
    for k in range(1, int(t0 / dt) + 2):
        t = k * dt
        end, start, v, a, jk = next((p for p in pieces if t <= p[0]), (t, t0, 0.0, 0.0, 0.0))
        u = t - start
        q += (v + a * u + jk * u * u / 2) * dt
        far = max(far, q)
    return far


@pytest.mark.parametrize("dt, ahead_at_least", [(0.001, 10), (0.01, 0)])
def test_the_commands_that_follow_a_stop_never_run_past_its_bound_and_run_ahead_of_the_profile(
        dt: float, ahead_at_least: int) -> None:
    """Why the lead term: ticks that take the profile's velocity at their end run ahead of the continuous stop
    while it still speeds up (alpha > 0). The bound (from x = 0: the excess plus -s dt) covers them in every
    generated state; at 1 kHz in some the commands pass the continuous stop itself, so the term cannot go (at 100 Hz,
    none of these: there the first tick already brakes more than the profile still gains)."""
    lim = CommandLimiter(PANDA, SETS, dt)
    rng = random.Random(22)
    ahead = 0
    for _ in range(1500):
        i = rng.randrange(7)
        j, m = lim.jerk[i], lim._m[i]
        v, s, alpha = _stop_state(rng, lim, i)
        if alpha <= 0.0:
            continue
        commands = _commands_travel(s, alpha, j, m, dt)
        assert commands <= lim._excess(i, 0.0, v, s) - s * dt + 1e-15, (i, v, s, alpha)
        ahead += commands > _forward_travel(s, alpha, j, m) + 1e-12
    assert ahead >= ahead_at_least, ahead


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
