"""Per-command limiter: random and adversarial streams never exceed a limit and always stop in range.

Kinematics are recomputed from the published positions only (v = dq/dt, a = dv/dt, j = da/dt
at the command period dt), as the robot would see them. Tolerances (floating point):
position 1e-9, velocity 1e-9, acceleration 1e-6, jerk 1e-3, stopping distance 1e-6 (units/s^n).

Also the behaviour the random streams do not reach: configuration refusals, non-finite targets, the max-step
window and the rate windows yielding to the braking rules, and uniform scaling falling back to per-joint
limiting.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from limits_yaml import limits_yaml

from omni_vla_safety.limiter import DECELERATION, MAX_STEP, UNIFORM_SCALE_INFEASIBLE, CommandLimiter, describe
from omni_vla_safety.limits import JointLimitSet, load_limit_sets, parse_joint_limits_yaml

REPO = Path(__file__).resolve().parents[2]
PANDA = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
PANDA_LIMITS = load_limit_sets(REPO / "config" / "joint_limits.yaml")
SETS = [PANDA_LIMITS[j] for j in PANDA]
# The Panda without its jerk limits: the rate-limited path (acceleration window switching with the velocity's sign).
SETS_NO_JERK = [parse_joint_limits_yaml((REPO / "config" / "joint_limits.yaml").read_text()
                                        .replace("has_jerk_limits: true", "has_jerk_limits: false"))[j] for j in PANDA]
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
DT = 0.01
TOL_Q, TOL_V, TOL_A, TOL_J, TOL_BRAKE = 1e-9, 1e-9, 1e-6, 1e-3, 1e-6


def panda(jerk: bool = True, dt: float = DT, **kwargs: object) -> CommandLimiter:
    lim = CommandLimiter(PANDA, SETS if jerk else SETS_NO_JERK, dt, **kwargs)  # type: ignore[arg-type]
    lim.reset(home())
    return lim


def home() -> list[float]:
    return [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]


class Checker:
    """Recomputes kinematics of the output stream and asserts every configured limit."""

    def __init__(self, limiter: CommandLimiter) -> None:
        self.lim = limiter
        self.dt = limiter.dt
        self.q = list(limiter.q)
        self.v = [0.0] * limiter.n
        self.a = [0.0] * limiter.n

    def step(self, out: Sequence[float]) -> None:
        lim, dt = self.lim, self.dt
        assert not any(rec[0].endswith("_yielded") and rec[0] != "max_step_yielded" for rec in lim.interventions)
        for i in range(lim.n):
            q, v_prev, a_prev = out[i], self.v[i], self.a[i]
            v = (q - self.q[i]) / dt
            a = (v - v_prev) / dt
            name = lim.joint_names[i]
            assert lim.lo[i] - TOL_Q <= q <= lim.hi[i] + TOL_Q, f"{name} position {q} outside range"
            assert abs(v) <= lim.vmax[i] + TOL_V, f"{name} velocity {v} > {lim.vmax[i]}"
            speeding_up = (v_prev > 0 and a > 0) or (v_prev < 0 and a < 0) or v_prev == 0
            bound = lim.acc[i] if speeding_up else lim.dec[i]
            assert abs(a) <= bound + TOL_A, f"{name} acceleration {a} > {bound} (v_prev {v_prev})"
            jerk = (a - a_prev) / dt
            assert abs(jerk) <= lim.jerk[i] + TOL_J, f"{name} jerk {jerk} > {lim.jerk[i]}"
            d = lim.dec[i]
            assert v <= math.sqrt(2 * d * max(lim.hi[i] - q, 0.0)) + TOL_BRAKE, f"{name} cannot stop before upper"
            assert -v <= math.sqrt(2 * d * max(q - lim.lo[i], 0.0)) + TOL_BRAKE, f"{name} cannot stop before lower"
            self.q[i], self.v[i], self.a[i] = q, v, a

    def stop_within(self, max_steps: int) -> int:
        for k in range(max_steps):
            self.step(self.lim.stop())
            if self.lim.stopped:
                return k + 1
        raise AssertionError(f"not stopped after {max_steps} steps; v={self.v}")


targets = st.lists(st.floats(-10.0, 10.0, allow_nan=False), min_size=8, max_size=8)
stream = st.lists(st.tuples(targets, st.integers(1, 12)), min_size=1, max_size=25)


def run_stream(lim: CommandLimiter, chk: Checker, steps: list[tuple[list[float], int]], lag: bool) -> None:
    measured = prev = list(lim.q)
    for target, hold in steps:
        for _ in range(hold):
            out = list(lim.limit(target, measured))
            chk.step(out)
            measured = prev if lag else out  # lag: the robot is one command behind
            prev = out


@pytest.mark.parametrize("dt", [DT, 0.001])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(steps=stream, lag=st.booleans(), uniform=st.booleans())
def test_random_command_streams_never_exceed_limits_and_always_stop_in_range(
        dt: float, steps: list[tuple[list[float], int]], lag: bool, uniform: bool) -> None:
    """At 100 Hz and at 1 kHz (where the Panda's jerk limit is below its acceleration plus deceleration per
    period): position, velocity, acceleration and jerk, every command, and a stop at the end."""
    lim = panda(dt=dt, max_relative_target=[0.25] * 7 + [0.02], target_horizon_s=0.05, uniform_scaling=uniform)
    chk = Checker(lim)
    run_stream(lim, chk, steps, lag)
    worst = max(v / d + 2.0 * d / j for v, d, j in zip(lim.vmax, lim.dec, lim.jerk))
    chk.stop_within(int(worst / dt) + 3)


@pytest.mark.parametrize("uniform", [False, True])
def test_a_stop_that_begins_as_a_joint_passes_through_rest_continues_the_way_it_was_going(uniform: bool) -> None:
    """At 1 kHz joint 4 reverses onto rest with an acceleration one tick of jerk cannot undo; the stop that follows
    carries on in that direction, ramps the acceleration back at the jerk limit, and lands at rest."""
    far, rest = [0.0, 0.0, 0.0, -2.0, 0.0, 0.0, 0.0, 0.0], [0.0] * 8
    lim = panda(dt=0.001, max_relative_target=[0.25] * 7 + [0.02], target_horizon_s=0.05, uniform_scaling=uniform)
    chk = Checker(lim)
    run_stream(lim, chk, [(far, 1), (rest, 3), (rest, 7), (far, 11)], False)
    worst = max(v / d + 2.0 * d / j for v, d, j in zip(lim.vmax, lim.dec, lim.jerk))
    chk.stop_within(int(worst / 0.001) + 3)


limit_corners = st.lists(st.sampled_from(["lo", "hi", "far_lo", "far_hi", "mid"]), min_size=8, max_size=8)


@settings(max_examples=80, deadline=None)
@given(corners=st.lists(limit_corners, min_size=2, max_size=30), period=st.integers(1, 6),
       horizon=st.sampled_from([0.0, 0.05]))
def test_adversarial_bang_bang_targets_at_the_limits_never_exceed_limits(
        corners: list[list[str]], period: int, horizon: float) -> None:
    """Targets flip between limits and far beyond them: braking must always leave room to stop."""
    lim = panda(target_horizon_s=horizon)
    chk = Checker(lim)
    run_corners(lim, chk, corners, period)
    chk.stop_within(40)


@settings(max_examples=40, deadline=None)
@given(corners=st.lists(limit_corners, min_size=2, max_size=20), period=st.integers(5, 60))
def test_adversarial_bang_bang_targets_at_1khz_keep_the_jerk_limit(corners: list[list[str]], period: int) -> None:
    """The same at 1 kHz: braking before the range ends, and every reversal, within the jerk limit."""
    lim = panda(dt=0.001, target_horizon_s=0.05)
    chk = Checker(lim)
    run_corners(lim, chk, corners, period)
    chk.stop_within(400)


def run_corners(lim: CommandLimiter, chk: Checker, corners: list[list[str]], period: int) -> None:
    for corner in corners:
        target = [{"lo": lo, "hi": hi, "far_lo": lo - 5.0, "far_hi": hi + 5.0, "mid": 0.5 * (lo + hi)}[c]
                  for c, lo, hi in zip(corner, lim.lo, lim.hi)]
        for _ in range(period):
            chk.step(lim.limit(target, None))


SOFT_LOW_JERK = limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=8.0, max_deceleration=4.0, max_jerk=200.0, soft_lower_limit=-0.8, soft_upper_limit=0.7, k_position=20.0),
    b=dict(min_position=0.0, max_position=0.5, max_velocity=0.5, max_acceleration=3.0))


def soft_low_jerk() -> CommandLimiter:
    sets = parse_joint_limits_yaml(SOFT_LOW_JERK)
    lim = CommandLimiter(["a", "b"], [sets["a"], sets["b"]], DT)
    lim.reset([0.0, 0.25])
    return lim


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(st.lists(st.floats(-3, 3), min_size=2, max_size=2), st.integers(1, 30)),
                      min_size=1, max_size=15))
def test_soft_limits_and_low_jerk_streams_respect_position_velocity_acceleration(
        steps: list[tuple[list[float], int]]) -> None:
    """J dt < A + D here (and A != D): the jerk limit holds too, braking included."""
    lim = soft_low_jerk()
    chk = Checker(lim)
    for target, hold in steps:
        for _ in range(hold):
            chk.step(lim.limit(target, None))
    assert all(-0.8 - TOL_Q <= q <= 0.7 + TOL_Q for q in [chk.q[0]])
    chk.stop_within(200)


def test_deceleration_enforced_near_position_limit() -> None:
    """Full speed at the upper limit: the joint brakes at <= max_deceleration and stops at the limit."""
    lim = panda(target_horizon_s=0.0)
    chk = Checker(lim)
    target = home()
    target[0] = 50.0  # far beyond panda_joint1's 2.8973
    speeds, braking = [], []
    for _ in range(400):
        chk.step(lim.limit(target, None))
        if speeds and chk.v[0] < speeds[-1] - 1e-12:
            braking.append((speeds[-1] - chk.v[0]) / DT)
        speeds.append(chk.v[0])
    assert math.isclose(max(speeds), lim.vmax[0], rel_tol=1e-12)  # reached full speed first
    assert braking and max(braking) <= lim.dec[0] + TOL_A
    assert chk.q[0] <= lim.hi[0] and lim.hi[0] - chk.q[0] < 1e-3  # stopped at, not short of, the limit
    assert abs(chk.v[0]) < 1e-9


def test_position_target_beyond_limit_held_at_limit() -> None:
    lim = panda()
    target = home()
    target[3] = 1.0  # panda_joint4 max is -0.0698
    for _ in range(500):
        out = lim.limit(target, None)
    assert math.isclose(out[3], -0.0698, abs_tol=1e-6) and out[3] <= -0.0698
    assert any(r[0] == "position" and r[1] == 3 for r in lim.interventions) or lim.stopped


def test_velocity_saturated_at_max_velocity_and_reported() -> None:
    lim = panda(target_horizon_s=0.0)
    target = home()
    target[4] = 2.5
    reports = []
    for _ in range(60):
        lim.limit(target, None)
        reports += [r for r in lim.interventions if r[0] == "velocity" and r[1] == 4]
    assert abs(lim.v[4]) <= 2.61 + TOL_V
    assert reports and reports[0][2] == 2.61 and reports[0][3] > 2.61 and reports[0][4] == 2.61


def test_max_relative_target_bounds_command_around_measured_position() -> None:
    """A blocked robot (measured stays put) never gets a command more than max_relative_target away."""
    lim = panda(max_relative_target=[0.1], target_horizon_s=0.0)
    measured = home()
    target = [q + 1.0 for q in home()]
    target[7] = 0.03
    for _ in range(200):
        out = lim.limit(target, measured)
        assert all(abs(o - m) <= 0.1 + 1e-9 for o, m in zip(out, measured))
    assert math.isclose(out[0], measured[0] + 0.1, abs_tol=1e-9)
    assert any(r[0] == "max_step" for r in lim.interventions) or lim.stopped


def test_soft_limit_spring_slows_approach_like_ros2_control() -> None:
    """Speed towards the soft limit is at most k_position * remaining distance (ros2_control's soft
    limiter), except while braking down to that curve at max_deceleration: the spring ranks below
    the hard acceleration limits."""
    sets = parse_joint_limits_yaml(SOFT_LOW_JERK.replace("has_jerk_limits: true", "has_jerk_limits: false"))
    lim = CommandLimiter(["a", "b"], [sets["a"], sets["b"]], DT)
    lim.reset([0.0, 0.25])
    on_curve = 0
    for _ in range(300):
        q, v_prev = lim.q[0], lim.v[0]
        lim.limit([5.0, 0.25], None)
        spring = 20.0 * (0.7 - q)
        assert lim.v[0] <= max(spring, v_prev - 4.0 * DT) + 1e-9
        on_curve += lim.v[0] > 0.01 and math.isclose(lim.v[0], spring, rel_tol=1e-9)
    assert on_curve >= 5  # the spring really shaped the final approach
    assert 0.69 < lim.q[0] <= 0.7


def test_uniform_scaling_keeps_direction_of_motion() -> None:
    lim = panda(uniform_scaling=True, target_horizon_s=0.0)
    start = list(lim.q)
    target = list(start)
    target[0] += 2.0
    target[1] += 0.5
    target[2] -= 1.0
    for _ in range(5):
        lim.limit(target, None)
        moved = [q - s for q, s in zip(lim.q, start)]
        assert math.isclose(moved[1] / moved[0], 0.25, rel_tol=1e-9)
        assert math.isclose(moved[2] / moved[0], -0.5, rel_tol=1e-9)
        assert all(abs(m) < 1e-12 for m in moved[3:])
    assert any(r[0] == "uniform_scale" for r in lim.interventions)


def test_uniform_scaling_off_limits_each_joint_independently() -> None:
    lim = panda(uniform_scaling=False, target_horizon_s=0.0)
    start = list(lim.q)
    target = list(start)
    target[0] += 2.0
    target[1] += 0.5
    lim.limit(target, None)
    moved = [q - s for q, s in zip(lim.q, start)]
    assert not math.isclose(moved[1] / moved[0], 0.25, rel_tol=1e-3)  # each joint at its own acceleration


def test_stop_ramps_velocity_to_zero_at_max_deceleration() -> None:
    lim = panda(target_horizon_s=0.0)
    target = home()
    target[0] = -2.0
    for _ in range(40):
        lim.limit(target, None)
    v0 = lim.v[0]
    assert v0 < -1.0
    speeds = [v0]
    while not lim.stopped:
        lim.stop()
        speeds.append(lim.v[0])
    steps = [b - a for a, b in zip(speeds, speeds[1:])]
    assert all(0 < s <= 15.0 * DT + 1e-9 for s in steps)
    assert all(math.isclose(s, 15.0 * DT, rel_tol=1e-6) for s in steps[:-1])  # at max deceleration
    held = list(lim.stop())
    assert lim.stop() == held  # then holds position


def test_jerk_limited_against_last_command_when_feasible() -> None:
    """Starting from rest the first steps ramp acceleration by at most max_jerk * dt."""
    lim = soft_low_jerk()
    accels = []
    for _ in range(5):
        lim.limit([0.6, 0.25], None)
        accels.append(lim.a[0])
    assert math.isclose(accels[0], 200.0 * DT, rel_tol=1e-9)
    assert all(abs(b - a) <= 200.0 * DT + 1e-9 for a, b in zip(accels, accels[1:]))


def test_limiter_refuses_mismatched_configuration() -> None:
    sets: list[JointLimitSet] = [PANDA_LIMITS[j] for j in PANDA]
    for kwargs, message in (({"max_relative_target": [0.1, 0.2]}, "max_relative_target"),):
        try:
            CommandLimiter(PANDA, sets, DT, **kwargs)  # type: ignore[arg-type]
        except ValueError as exc:
            assert message in str(exc)
        else:
            raise AssertionError("mismatched configuration accepted")


@pytest.mark.parametrize("names, dt, kwargs, message", [
    (PANDA[:7], DT, {}, "7 joint names but 8 limit sets"),
    (PANDA, 0.0, {}, "dt must be positive"),
    (PANDA, -0.01, {}, "dt must be positive"),
    (PANDA, math.nan, {}, "dt must be positive"),
    (PANDA, DT, {"margin": -0.01}, "margin must be in [0, 1)"),
    (PANDA, DT, {"margin": 1.0}, "margin must be in [0, 1)"),
    (PANDA, DT, {"max_relative_target": [0.1] * 3}, "max_relative_target needs 1 or 8 values, got 3"),
])
def test_limiter_refuses_inconsistent_configuration_naming_it(names: list[str], dt: float, kwargs: dict,
                                                               message: str) -> None:
    with pytest.raises(ValueError) as exc:
        CommandLimiter(names, SETS, dt, **kwargs)
    assert message in str(exc.value)


def drive_uniformly(lim: CommandLimiter, start: list[float], target: list[float], lead: int, follower: int,
                    ratio: float, still: int) -> None:
    """Five ticks towards `target`: never infeasible, `follower` moves `ratio` times `lead`, `still` stays put."""
    for _ in range(5):
        lim.limit(target, None)
        assert not any(r[0] == UNIFORM_SCALE_INFEASIBLE for r in lim.interventions)
        assert math.isclose((lim.q[follower] - start[follower]) / (lim.q[lead] - start[lead]), ratio, rel_tol=1e-9)
    assert lim.q[still] == start[still]



def test_limiter_accepts_the_edges_of_its_configuration() -> None:
    assert CommandLimiter(PANDA, SETS, DT, margin=0.0).vmax[0] == 2.175
    assert CommandLimiter(PANDA, SETS, DT, margin=0.5).vmax[0] == pytest.approx(2.175 * 0.5)
    lim = CommandLimiter(PANDA, SETS, DT, max_relative_target=[0.1])
    assert lim.max_step == [0.1] * 8
    lim = CommandLimiter(PANDA, SETS, DT, max_relative_target=[0.0] + [0.1] * 7)  # <= 0: off for that joint
    assert lim.max_step == [math.inf] + [0.1] * 7
    assert CommandLimiter(PANDA, SETS, DT).max_step == [math.inf] * 8


@pytest.mark.parametrize("missing", ["position", "velocity", "acceleration"])
def test_limiter_refuses_a_joint_without_a_required_limit(missing: str) -> None:
    fields = {"has_position_limits": True, "min_position": -1.0, "max_position": 1.0,
              "has_velocity_limits": True, "max_velocity": 1.0,
              "has_acceleration_limits": True, "max_acceleration": 1.0}
    fields[f"has_{missing}_limits"] = False
    sets = parse_joint_limits_yaml("joint_limits:\n  j:\n" + "".join(f"    {k}: {v}\n" for k, v in fields.items()))
    with pytest.raises(ValueError, match=f"joint 'j' has no {missing} limit: refusing to run it unlimited"):
        CommandLimiter(["j"], [sets["j"]], DT)


@pytest.mark.parametrize("positions", [HOME[:7], HOME + [0.0], HOME[:7] + [math.nan], HOME[:7] + [math.inf]])
def test_reset_refuses_a_wrong_count_or_non_finite_positions(positions: list[float]) -> None:
    lim = panda()
    with pytest.raises(ValueError, match="reset needs 8 finite positions"):
        lim.reset(positions)
    assert lim.q == HOME and lim.stopped


def test_reset_starts_from_rest_at_the_given_positions() -> None:
    lim = panda(target_horizon_s=0.0)
    target = list(HOME)
    target[0] = 1.0
    for _ in range(20):
        lim.limit(target, None)
    assert not lim.stopped
    start = [q + 0.1 for q in HOME]
    lim.reset(start)
    assert lim.q == start and lim.out == start and lim.stopped and lim.a == [0.0] * 8


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_target_holds_or_clamps_the_joint_and_keeps_commands_finite(bad: float) -> None:
    lim = panda(target_horizon_s=0.0)
    target = list(HOME)
    target[2] = bad
    target[0] = 0.5
    for _ in range(400):
        out = lim.limit(target, None)
        assert all(math.isfinite(x) for x in out)
    assert out[0] == pytest.approx(0.5)
    expected = {True: HOME[2], False: lim.hi[2] if bad > 0 else lim.lo[2]}[math.isnan(bad)]
    assert out[2] == pytest.approx(expected) and lim.stopped


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_max_step_window_yields_to_deceleration_when_the_measurement_jumps_far_behind(sign: float) -> None:
    """A wild measurement far behind a fast command cannot make the command jump back: the
    deceleration limit wins, the max-step window is reported as yielded, and the command heads back."""
    lim = panda(max_relative_target=[0.1], target_horizon_s=0.0)
    target = list(HOME)
    target[0] = 2.5 * sign
    for _ in range(40):
        lim.limit(target, list(lim.q))  # a perfectly tracking robot
    v0, q0 = lim.v[0], lim.q[0]
    assert v0 * sign > 1.5
    measured = list(lim.q)
    measured[0] = q0 - 1.0 * sign
    lim.limit(target, measured)
    yielded = [r for r in lim.interventions if r[0] == MAX_STEP + "_yielded" and r[1] == 0]
    assert yielded and yielded[0][2] == 0.1 and yielded[0][3] == pytest.approx(-1.0 * sign)
    assert describe(yielded[0], PANDA).startswith("panda_joint1: max_step limit 0.1 could not be honoured")
    assert lim.v[0] == pytest.approx(v0 - sign * lim.dec[0] * DT)  # braking at max deceleration, no jump
    for _ in range(300):
        lim.limit(target, measured)
    assert lim.q[0] == pytest.approx(measured[0] + 0.1 * sign) and lim.stopped  # at the window's edge


@pytest.mark.parametrize("upper", [True, False])
def test_position_wins_when_a_state_leaves_no_room_to_brake(upper: bool) -> None:
    """From a state the limiter did not produce (e.g. rounding), too fast too close to a position
    limit: the command never passes the limit and the deceleration limit is reported as yielded."""
    lim = panda(jerk=False)
    start = list(HOME)
    start[0] = lim.hi[0] - 0.001 if upper else lim.lo[0] + 0.001
    lim.reset(start)
    lim.v[0] = 1.0 if upper else -1.0  # cannot stop within 1 mm at max deceleration
    out = lim.limit(HOME, None)
    assert lim.lo[0] <= out[0] <= lim.hi[0]
    rec = [r for r in lim.interventions if r[0].endswith("_yielded") and r[1] == 0]
    assert rec and rec[0][0] == DECELERATION + "_yielded" and rec[0][2] == lim.dec[0]
    assert rec[0][3] == (1.0 if upper else -1.0)  # the velocity it came with
    assert "deceleration limit" in describe(rec[0], PANDA)


def test_outside_the_range_moving_away_heads_back_at_once_reporting_the_deceleration_yield() -> None:
    """Outside the range and moving away fast: never further out; the deceleration limit yields."""
    lim = panda(jerk=False)
    start = list(HOME)
    start[0] = lim.lo[0] - 0.01
    lim.reset(start)
    lim.v[0] = -1.0
    out = lim.limit(HOME, None)
    assert out[0] == start[0]  # stops at once rather than moving further out
    assert (DECELERATION + "_yielded", 0, lim.dec[0], -1.0, 0.0) in lim.interventions


def test_uniform_scaling_infeasible_when_a_moving_joint_is_asked_to_stay_falls_back_to_per_joint() -> None:
    lim = panda(uniform_scaling=True, target_horizon_s=0.0)
    target = list(HOME)
    target[0] = 2.0
    for _ in range(30):
        lim.limit(target, None)
    assert lim.v[0] > 1.0
    target = list(lim.q)  # every joint asked to stay exactly where its last command is
    target[1] += 0.3
    v0 = lim.v[0]
    lim.limit(target, None)
    assert (UNIFORM_SCALE_INFEASIBLE, -1, 0.0, 1.0, 0.0) in lim.interventions
    assert describe(lim.interventions[0], PANDA) == "uniform scaling infeasible this period: joints limited independently"
    assert lim.v[0] == pytest.approx(v0 - lim.dec[0] * DT)  # joint 1 brakes on its own
    assert lim.v[1] > 0.0  # joint 2 still moves towards its target


def test_limit_values_reported_for_each_intervention_kind() -> None:
    sets = parse_joint_limits_yaml(limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=3.0, max_deceleration=4.0, max_jerk=500.0, soft_lower_limit=-0.5, soft_upper_limit=0.6, k_position=10.0)))
    lim = CommandLimiter(["a"], [sets["a"]], DT, max_relative_target=[0.2])
    assert [lim.limit_value(k, 0, True) for k in ("position", "soft_limit", "velocity", "max_step",
                                                  "acceleration", "deceleration", "jerk")] == \
        [0.6, 0.6, 2.0, 0.2, 3.0, 4.0, 500.0]
    assert lim.limit_value("position", 0, False) == -0.5 and lim.limit_value("soft_limit", 0, False) == -0.5


SOFT = limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=4.0, soft_lower_limit=-0.7, soft_upper_limit=0.7, k_position=20.0))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_soft_limit_spring_slows_the_approach_on_both_sides(sign: float) -> None:
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(SOFT)["a"]], DT)
    lim.reset([0.0])
    on_curve = 0
    reports = []
    for _ in range(300):
        q, v_prev = lim.q[0], lim.v[0]
        lim.limit([5.0 * sign], None)
        spring = 20.0 * (0.7 - sign * q)  # speed allowed towards the soft limit on this side
        assert sign * lim.v[0] <= max(spring, sign * v_prev - 4.0 * DT) + 1e-9
        on_curve += sign * lim.v[0] > 0.01 and math.isclose(sign * lim.v[0], spring, rel_tol=1e-9)
        reports += [r for r in lim.interventions if r[0] == "soft_limit"]
    assert on_curve >= 5
    assert reports and reports[0][2] == 0.7 * sign  # reported with the soft limit it enforced
    assert 0.69 < sign * lim.q[0] <= 0.7


@pytest.mark.parametrize("rate_hz", [100.0, 1000.0])
@pytest.mark.parametrize("horizon", [0.0, 0.05])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_approach_of_a_far_target_never_overshoots_it(rate_hz: float, horizon: float, sign: float) -> None:
    dt = 1.0 / rate_hz
    lim = CommandLimiter(PANDA, SETS, dt, target_horizon_s=horizon)
    lim.reset(HOME)
    target = list(HOME)
    target[0] = 1.5 * sign
    furthest = 0.0
    for _ in range(int(3.0 * rate_hz)):
        out = lim.limit(target, None)
        furthest = max(furthest, sign * out[0])
    assert furthest <= 1.5 + 1e-9  # never past the target
    assert out[0] == pytest.approx(1.5 * sign, abs=1e-9) and lim.stopped


def test_controlled_stop_at_1khz_takes_about_the_jerk_limited_minimum_time() -> None:
    """Where jerk binds (1 kHz), the stop still brakes as hard as jerk and deceleration allow."""
    dt = 0.001
    lim = CommandLimiter(PANDA, SETS, dt, target_horizon_s=0.0)
    lim.reset(HOME)
    target = list(HOME)
    target[0] = 2.8
    for _ in range(1500):
        lim.limit(target, None)
        if abs(lim.v[0] - lim.vmax[0]) < 1e-12 and lim.a[0] == 0.0:
            break
    v0, d, j = lim.v[0], lim.dec[0], lim.jerk[0]
    assert v0 == pytest.approx(lim.vmax[0])
    ticks = 0
    while not lim.stopped:
        lim.stop()
        ticks += 1
    minimum = (v0 / d + d / j) / dt  # jerk up to max deceleration, hold it, jerk back to rest
    assert minimum - 1 <= ticks <= 1.05 * minimum + 2


ASYM = limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=3.0, max_deceleration=5.0),
    b=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=1.0))


def test_deceleration_yield_reports_the_deceleration_limit_not_the_acceleration_one() -> None:
    sets = parse_joint_limits_yaml(ASYM)
    lim = CommandLimiter(["a", "b"], [sets["a"], sets["b"]], DT)
    lim.reset([0.999, 0.0])
    lim.v[0] = 1.0
    lim.limit([0.0, 0.0], None)
    assert ("deceleration_yielded", 0, 5.0, 1.0, 0.0) in lim.interventions
    assert lim.q[0] <= 1.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_uniform_scaling_infeasible_when_a_fast_joint_cannot_slow_to_the_common_scale(sign: float) -> None:
    """Joint a cruises; joint b, slow to accelerate, is given a far target: the common scale b
    allows would ask a to brake harder than it can, so each joint is limited on its own."""
    sets = parse_joint_limits_yaml(ASYM)
    lim = CommandLimiter(["a", "b"], [sets["a"], sets["b"]], DT, uniform_scaling=True)
    lim.reset([-0.9 * sign, 0.0])
    for _ in range(40):
        lim.limit([0.9 * sign, 0.0], None)  # only a moves (b asked to stay: scale stays feasible)
    assert sign * lim.v[0] > 1.0 and not any(r[0] == UNIFORM_SCALE_INFEASIBLE for r in lim.interventions)
    v0 = lim.v[0]
    lim.limit([0.9 * sign, 0.9 * sign], None)
    assert (UNIFORM_SCALE_INFEASIBLE, -1, 0.0, 1.0, 0.0) in lim.interventions
    assert sign * lim.v[0] >= sign * v0 - 5.0 * DT - 1e-12  # a brakes no harder than its deceleration limit
    assert lim.v[1] == pytest.approx(sign * 1.0 * DT)  # b starts at its own max acceleration


@pytest.mark.parametrize("end", ["lo", "hi"])
def test_uniform_scaling_keeps_the_direction_with_the_gripper_parked_at_a_limit(end: str) -> None:
    lim = panda(uniform_scaling=True, target_horizon_s=0.0)
    start = list(HOME)
    start[7] = getattr(lim, end)[7]  # gripper closed (lo) or open (hi) on its limit, asked to stay there
    lim.reset(start)
    target = list(start)
    target[0] += 2.0
    target[1] += 0.5
    drive_uniformly(lim, start, target, lead=0, follower=1, ratio=0.25, still=7)


def test_uniform_scaling_never_drives_a_joint_away_from_its_target() -> None:
    """Joint a still moves down fast and cannot reverse this tick: no common scale in [0, 1] exists,
    so the joints are limited on their own (never a negative scale that sends b backwards)."""
    sets = parse_joint_limits_yaml(ASYM)
    lim = CommandLimiter(["a", "b"], [sets["a"], sets["b"]], DT, uniform_scaling=True)
    lim.reset([0.9, 0.0])
    for _ in range(40):
        lim.limit([-0.9, 0.0], None)
    assert lim.v[0] < -1.0
    lim.limit([0.9, 0.002], None)  # b: a short move, which a small negative scale would also allow
    assert (UNIFORM_SCALE_INFEASIBLE, -1, 0.0, 1.0, 0.0) in lim.interventions
    assert lim.v[1] > 0.0  # b heads for its target


def test_uniform_scaling_reports_the_binding_joint_and_nothing_when_none_binds() -> None:
    lim = panda(uniform_scaling=True, target_horizon_s=1.0)
    target = list(HOME)
    target[1] += 0.001  # tiny move: within every limit, nothing scaled
    lim.limit(target, None)
    assert lim.interventions == []
    target[1] += 2.0  # joint 2 binds (its acceleration), joint 1 a little
    target[0] += 0.1
    lim.limit(target, None)
    scale = [r for r in lim.interventions if r[0] == "uniform_scale"]
    assert len(scale) == 1 and scale[0][1] == 1 and 0.0 < scale[0][2] < 1.0


def at_rest_on_a_limit(upper: bool, outwards: bool) -> tuple[CommandLimiter, list[float]]:
    """Joint 1 at rest exactly on its limit, carrying the deceleration limit as acceleration (set by hand)."""
    lim = CommandLimiter(PANDA, SETS, 0.001)
    start = list(HOME)
    start[0] = lim.hi[0] if upper else lim.lo[0]
    lim.reset(start)
    lim.a[0] = (1.0 if upper == outwards else -1.0) * lim.dec[0]
    return lim, start


@pytest.mark.parametrize("upper", [True, False])
def test_a_stop_at_rest_on_a_position_limit_holds_there_when_its_acceleration_points_out_of_the_range(
        upper: bool) -> None:
    """At 1 kHz (jerk binds) a joint at rest on its limit whose acceleration points outwards: the range comes
    first, the jerk gives way once (reported), and the joint then holds with nothing more to report."""
    lim, start = at_rest_on_a_limit(upper, outwards=True)
    for k in range(3):
        lim.stop()
        assert lim.q[0] == start[0] and lim.v[0] == 0.0
        assert [rec[0] for rec in lim.interventions] == (["jerk_yielded"] if k == 0 else [])


@pytest.mark.parametrize("upper", [True, False])
def test_a_stop_at_rest_on_a_position_limit_whose_acceleration_points_inwards_ramps_it_out_within_the_jerk(
        upper: bool) -> None:
    """The acceleration a joint carries at rest is where it goes next: the stop follows it into the range,
    ramps it back at the jerk limit, and lands at rest inside, reporting nothing."""
    lim, start = at_rest_on_a_limit(upper, outwards=False)
    inwards = -1.0 if upper else 1.0
    q, v, a = start[0], 0.0, lim.a[0]
    for _ in range(20):
        lim.stop()
        assert not lim.interventions
        v_new = (lim.q[0] - q) / lim.dt
        a_new = (v_new - v) / lim.dt
        assert abs(a_new - a) / lim.dt <= lim.jerk[0] * (1.0 + 1e-9)
        assert lim.lo[0] <= lim.q[0] <= lim.hi[0] and v_new * inwards >= 0.0
        q, v, a = lim.q[0], v_new, a_new
    assert lim.stopped and (q - start[0]) * inwards > 0.0


def test_a_joint_without_soft_limits_reports_an_unbounded_soft_limit_on_both_sides() -> None:
    sets = parse_joint_limits_yaml(ASYM)
    lim = CommandLimiter(["a", "b"], [sets["a"], sets["b"]], DT)
    assert lim.limit_value("soft_limit", 1, False) == -math.inf
    assert lim.limit_value("soft_limit", 1, True) == math.inf


TIE = limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=3.0, max_jerk=300.0))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_tie_between_the_acceleration_and_jerk_bounds_is_reported_as_the_higher_priority_acceleration(
        sign: float) -> None:
    """J dt^2 == A dt (300 * 0.01^2 == 3 * 0.01): from rest both bounds are the same number; the
    report names the higher-priority limit, as for every tie between nested intervals."""
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(TIE)["a"]], DT)
    lim.reset([0.0])
    assert lim._adt[0] == lim._jdt2[0]
    lim.limit([0.9 * sign], None)
    assert lim.interventions == [("acceleration", 0, 3.0, 90.0 * sign, 0.03 * sign)]


def _one_joint(lo: float, hi: float) -> object:
    return parse_joint_limits_yaml(f"""
joint_limits:
  a:
    has_position_limits: true
    min_position: {lo}
    max_position: {hi}
    has_velocity_limits: true
    max_velocity: 2.0
    has_acceleration_limits: true
    max_acceleration: 3.0
""")["a"]


@pytest.mark.parametrize("upper", [True, False])
def test_a_measurement_exactly_one_max_step_beyond_a_joint_resting_on_its_limit_yields_nothing(upper: bool) -> None:
    """The max-step window [0, ...] only touches the allowed [..., 0] at the limit: they intersect
    (the command 0 meets both), so no max_step_yielded is reported."""
    lim = CommandLimiter(["a"], [_one_joint(-1.0, 1.0)], DT, max_relative_target=[0.5])
    edge = 1.0 if upper else -1.0
    lim.reset([edge])
    lim.limit([0.0], [edge * 1.5])
    assert not any(r[0].endswith("_yielded") for r in lim.interventions)
    assert lim.q[0] == edge and lim.v[0] == 0.0


@pytest.mark.parametrize("upper", [True, False])
def test_a_joint_a_hair_inside_its_limit_lands_on_it_where_rounding_would_step_past(upper: bool) -> None:
    """1e-100 inside a limit at 0.0: q - B(x) dt rounds past the limit (by ~1e-116); the command lands
    exactly on the limit instead of stalling where it is."""
    lo, hi = (-1.0, 0.0) if upper else (0.0, 1.0)
    lim = CommandLimiter(["a"], [_one_joint(lo, hi)], DT)
    q0 = -1e-100 if upper else 1e-100
    lim.reset([q0])
    lim.limit([1.0 if upper else -1.0], None)
    assert lim.q[0] == 0.0


def test_intervention_kinds_built_at_runtime_are_described_and_valued_like_the_constants() -> None:
    """Records may come back from a log or another process: kinds compare by value, not identity."""
    def k(s: str) -> str:
        return "".join(list(s))  # an equal string that is not the interned constant
    assert describe((k("uniform_scale_infeasible"), -1, 0.0, 1.0, 0.0), PANDA) == \
        "uniform scaling infeasible this period: joints limited independently"
    assert describe((k("uniform_scale"), 1, 0.5, 1.0, 0.5), PANDA) == \
        "panda_joint2: all joints scaled by 0.5000 to keep the direction of motion"
    sets = parse_joint_limits_yaml(TIE)
    lim = CommandLimiter(["a"], [sets["a"]], DT)
    assert lim.limit_value(k("position"), 0, True) == 1.0 and lim.limit_value(k("position"), 0, False) == -1.0
    assert lim.limit_value(k("soft_limit"), 0, True) == math.inf


def test_a_fresh_limiter_before_any_reset_is_at_rest_at_zero() -> None:
    """Until reset, the command state is rest at 0: the first commands equal those after reset([0, ...])."""
    fresh = CommandLimiter(PANDA, SETS, 0.001)
    assert fresh.stopped and fresh.q == [0.0] * 8 and fresh.a == [0.0] * 8
    zero = CommandLimiter(PANDA, SETS, 0.001)
    zero.reset([0.0] * 8)
    for _ in range(5):
        assert list(fresh.limit(HOME, None)) == list(zero.limit(HOME, None))


SOFT_TIE = limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=1.5625, soft_lower_limit=-0.5, soft_upper_limit=0.5, k_position=16.0))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_tie_between_the_acceleration_and_soft_limit_bounds_is_reported_as_the_higher_priority_acceleration(
        sign: float) -> None:
    """2^-10 inside a soft limit with k = 16: the spring bound is 2^-6, exactly A dt (1.5625 * 0.01)."""
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(SOFT_TIE)["a"]], DT)
    lim.reset([sign * (2.0 ** -10 - 0.5)])
    assert lim._adt[0] == 2.0 ** -6
    lim.limit([-0.9 * sign], None)
    assert lim.interventions == [("acceleration", 0, 1.5625, -0.09765625 * sign, -0.015625 * sign)]


def test_jerk_never_binds_when_j_dt_equals_a_plus_d_commands_as_without_a_jerk_limit() -> None:
    """J dt == A + D (600 * 0.01 == 3 + 3): every velocity the rate windows allow is within the jerk
    window, so a move and a stop are command for command those of the same joint without jerk limit."""
    base = limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=3.0))
    jerky = CommandLimiter(["a"], [parse_joint_limits_yaml(base + "    has_jerk_limits: true\n    max_jerk: 600.0\n")["a"]], DT)
    plain = CommandLimiter(["a"], [parse_joint_limits_yaml(base)["a"]], DT)
    assert jerky.jerk[0] * DT == jerky.acc[0] + jerky.dec[0]
    for lim in (jerky, plain):
        lim.reset([-0.8])
    for tick in range(120):
        if tick < 60:
            assert jerky.limit([0.8], None)[0] == pytest.approx(plain.limit([0.8], None)[0], abs=1e-12)
        else:
            assert jerky.stop()[0] == pytest.approx(plain.stop()[0], abs=1e-12)
    assert jerky.stopped and plain.stopped


def test_uniform_scale_record_names_the_unscaled_request_and_the_applied_scale() -> None:
    lim = panda(uniform_scaling=True, target_horizon_s=1.0)
    target = list(HOME)
    target[1] += 2.0
    target[0] += 0.1
    lim.limit(target, None)
    (rec,) = [r for r in lim.interventions if r[0] == "uniform_scale"]
    assert rec[1] == 1 and rec[3] == 1.0 and rec[4] == rec[2]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_approach_is_not_reported_when_it_coincides_with_the_deceleration_bound(sign: float) -> None:
    """Moving at B(x) + D dt towards a target x away: the approach cap B(x) equals the deceleration
    bound exactly; the command is the approach's (shaping, not an intervention), so nothing is reported."""
    lim = CommandLimiter(["a"], [_one_joint(-1.0, 1.0)], DT)
    x = 2.0 ** -5
    b = lim.brake_speed(0, x)
    lim.reset([0.25 * sign])
    lim.v[0] = sign * (b + lim._ddt[0])
    assert lim.v[0] - sign * lim._ddt[0] == sign * b  # the tie is exact
    lim.limit([sign * (0.25 + x)], None)
    assert lim.interventions == []
    assert lim.v[0] == pytest.approx(sign * b)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_three_way_tie_of_acceleration_max_step_and_soft_limit_is_reported_as_the_acceleration(sign: float) -> None:
    """The measurement lags far behind: the max-step window yields onto the acceleration bound 2^-6, which
    the soft spring (2^-10 inside, k = 16) also meets exactly; the report keeps the higher-priority kind."""
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(SOFT_TIE)["a"]], DT, max_relative_target=[0.1])
    lim.reset([sign * (2.0 ** -10 - 0.5)])
    lim.limit([-0.9 * sign], [-1.0 * sign])
    assert [r[0] for r in lim.interventions] == ["max_step_yielded", "acceleration"]
    assert lim.interventions[1] == ("acceleration", 0, 1.5625, -0.09765625 * sign, -0.015625 * sign)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_max_step_window_is_braked_for_on_both_sides_when_the_robot_does_not_follow(sign: float) -> None:
    """The measurement stays put, the target is far: the command brakes into the window's edge and
    stops on it, never beyond and without any yield."""
    lim = CommandLimiter(["a"], [_one_joint(-1.0, 1.0)], DT, max_relative_target=[0.1])
    lim.reset([0.0])
    for _ in range(100):
        lim.limit([-0.9 * sign], [0.0])
        assert abs(lim.q[0]) <= 0.1
        assert not any(r[0].endswith("_yielded") for r in lim.interventions)
    assert lim.q[0] == pytest.approx(-0.1 * sign) and lim.stopped


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_joint_just_outside_its_soft_range_returns_at_the_spring_speed_that_equals_the_acceleration_bound(
        sign: float) -> None:
    """2^-10 beyond the soft limit with k = 16: the spring asks 2^-6 back, exactly A dt; the joint
    heads back at that speed (never held outside)."""
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(SOFT_TIE)["a"]], DT)
    lim.reset([sign * (0.5 + 2.0 ** -10)])
    lim.limit([0.0], None)
    assert lim.v[0] == pytest.approx(-sign * 2.0 ** -6)
    assert [r[0] for r in lim.interventions] == ["acceleration"]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_tie_between_the_deceleration_and_max_step_bounds_is_reported_as_the_higher_priority_deceleration(
        sign: float) -> None:
    """Measured 0.5 + 2^-8 ahead with a 0.5 max step: the window's near edge is 2^-8 / dt, exactly the
    deceleration bound of the current velocity; the report keeps the deceleration."""
    lim = CommandLimiter(["a"], [_one_joint(-1.0, 1.0)], DT, max_relative_target=[0.5])
    lim.reset([0.0])
    w = 2.0 ** -8 / DT
    lim.v[0] = sign * (w + lim._ddt[0])
    assert lim.v[0] - sign * lim._ddt[0] == sign * w  # the tie is exact
    lim.limit([0.0], [sign * (0.5 + 2.0 ** -8)])
    assert lim.interventions == [("deceleration", 0, 3.0, 0.0, sign * w)]


def test_a_small_move_within_every_limit_is_commanded_at_the_horizon_velocity() -> None:
    """Nothing binds: the command velocity is exactly the target error over the target horizon (0.3 s)."""
    lim = panda(target_horizon_s=0.3)
    target = list(HOME)
    target[0] += 1e-4
    lim.limit(target, None)
    assert lim.interventions == []
    assert lim.v[0] == pytest.approx(1e-4 / 0.3, rel=1e-9)


def test_moves_and_stops_at_1khz_mirror_each_other_command_for_command() -> None:
    """Joint 1 of the Panda has symmetric limits: a move towards -2.5 then a stop is the exact mirror of
    the move towards +2.5 and its stop (the jerk-phase approach applies on both sides)."""
    runs = []
    for sign in (1.0, -1.0):
        lim = CommandLimiter(PANDA, SETS, 0.001, target_horizon_s=0.0)
        lim.reset(HOME)
        target = list(HOME)
        target[0] = 2.5 * sign
        path = [lim.limit(target, None)[0] for _ in range(300)]
        while not lim.stopped and len(path) < 2000:
            path.append(lim.stop()[0])
        runs.append(path)
    assert len(runs[0]) == len(runs[1]) < 2000
    assert runs[1] == pytest.approx([-q for q in runs[0]], abs=1e-12)


def test_a_limiter_for_hundreds_of_joints_accepts_one_max_step_per_joint() -> None:
    n = 300
    lim = CommandLimiter([f"j{i}" for i in range(n)], [_one_joint(-1.0, 1.0)] * n, DT, max_relative_target=[0.1] * n)
    assert lim.max_step == [0.1] * n


JERKY = limits_yaml(a=dict(min_position=-1.0, max_position=1.0, max_velocity=2.0, max_acceleration=15.0, max_jerk=7500.0))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_stop_whose_jerk_window_just_reaches_zero_comes_to_rest_without_a_yield(sign: float) -> None:
    """dt = 2^-10, v = 2^-8 braking so hard that v + a dt + J dt^2 == 0 exactly: the jerk window only
    touches rest, which the stop takes (no speeding up, nothing yielded)."""
    dt = 2.0 ** -10
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(JERKY)["a"]], dt)
    lim.reset([0.0])
    v, j2 = sign * 2.0 ** -8, lim._jdt2[0]
    lim.v[0], lim.a[0] = v, -(v + sign * j2) / dt
    assert abs(lim.a[0]) <= lim.dec[0] and v + lim.a[0] * dt + sign * j2 == 0.0  # an exact touch
    lim.stop()
    assert lim.v[0] == 0.0 and lim.interventions == []


@pytest.mark.parametrize("margin", [1.5, 2.0, math.inf, math.nan])
def test_limiter_refuses_a_margin_above_one_or_undefined(margin: float) -> None:
    with pytest.raises(ValueError, match=r"margin must be in \[0, 1\)"):
        CommandLimiter(PANDA, SETS, DT, margin=margin)


def test_uniform_scaling_reports_only_the_binding_joint_not_the_joints_it_slows() -> None:
    """Joint 2 binds; joints 1 and 3 are slowed by the common scale within their own limits: that is
    the uniform_scale record, not a limit of theirs."""
    lim = panda(uniform_scaling=True, target_horizon_s=1.0)
    target = list(HOME)
    target[1] += 2.0
    target[0] += 0.1
    target[2] -= 0.1
    lim.limit(target, None)
    assert [r[1] for r in lim.interventions if r[0] == "uniform_scale"] == [1]
    assert [r for r in lim.interventions if r[1] in (0, 2)] == []
    assert 0.0 < lim.v[0] < 0.1 and -0.1 < lim.v[2] < 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_tie_between_the_velocity_and_acceleration_bounds_is_reported_as_the_higher_priority_velocity(
        sign: float) -> None:
    """max_velocity 0.03 == A dt (3 * 0.01): from rest both bounds are the same number."""
    sets = parse_joint_limits_yaml(TIE.replace("max_velocity: 2.0", "max_velocity: 0.03")
                                   .replace("has_jerk_limits: true", "has_jerk_limits: false"))
    lim = CommandLimiter(["a"], [sets["a"]], DT)
    lim.reset([0.0])
    assert lim.vmax[0] == lim._adt[0]
    lim.limit([0.9 * sign], None)
    assert lim.interventions == [("velocity", 0, 0.03, 90.0 * sign, 0.03 * sign)]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_stop_from_a_slow_joint_under_full_braking_acceleration_never_reverses_it(sign: float) -> None:
    """~1 kHz, v = 2^-8 while decelerating at D: the jerk limit alone would carry the joint through zero;
    the stop holds the direction of motion instead (the jerk yields) and ends at rest."""
    dt = 2.0 ** -10
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(JERKY)["a"]], dt)
    lim.reset([0.0])
    lim.v[0], lim.a[0] = sign * 2.0 ** -8, -sign * lim.dec[0]
    for _ in range(50):
        lim.stop()
        assert sign * lim.v[0] >= 0.0
    assert lim.stopped


def test_uniform_scaling_with_nothing_binding_commands_exactly_the_wanted_velocities_both_ways() -> None:
    """Small moves up and down within every limit: scale 1 (never above), nothing reported."""
    lim = panda(uniform_scaling=True, target_horizon_s=1.0)
    target = list(HOME)
    target[0] += 0.001
    target[2] -= 0.001
    lim.limit(target, None)
    assert lim.interventions == []
    assert lim.v[0] == pytest.approx(0.001, rel=1e-9) and lim.v[2] == pytest.approx(-0.001, rel=1e-9)
    assert lim.v[1] == 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_weak_soft_limit_spring_below_one_still_binds(sign: float) -> None:
    """k_position 0.5: 0.1 from the soft limit, the spring allows 0.05 rad/s, below every other bound."""
    sets = parse_joint_limits_yaml(SOFT_TIE.replace("max_acceleration: 1.5625", "max_acceleration: 100.0")
                                   .replace("k_position: 16.0", "k_position: 0.5"))
    lim = CommandLimiter(["a"], [sets["a"]], DT)
    lim.reset([0.4 * sign])
    lim.limit([0.5 * sign], None)
    assert lim.v[0] == pytest.approx(0.05 * sign)
    assert [r[0] for r in lim.interventions] == ["soft_limit"]


def test_uniform_scaling_infeasible_when_a_joint_moving_down_is_asked_to_stay_falls_back_to_per_joint() -> None:
    lim = panda(uniform_scaling=True, target_horizon_s=0.0)
    target = list(HOME)
    target[0] = -2.0
    for _ in range(30):
        lim.limit(target, None)
    assert lim.v[0] < -1.0
    target = list(lim.q)  # every joint asked to stay exactly where its last command is
    target[1] += 0.3
    v0 = lim.v[0]
    lim.limit(target, None)
    assert (UNIFORM_SCALE_INFEASIBLE, -1, 0.0, 1.0, 0.0) in lim.interventions
    assert lim.v[0] == pytest.approx(v0 + lim.dec[0] * DT)  # joint 1 brakes on its own
    assert lim.v[1] > 0.0


@pytest.mark.parametrize("upper", [True, False])
def test_with_no_room_to_brake_the_command_still_heads_on_to_the_limit_at_the_braking_bound(upper: bool) -> None:
    """Too fast 1 mm from a limit: the command is the position bound B(x), in the direction of motion,
    not a jump backwards to the other edge of the allowed interval."""
    lim = panda(jerk=False)
    start = list(HOME)
    start[0] = lim.hi[0] - 0.001 if upper else lim.lo[0] + 0.001
    lim.reset(start)
    lim.v[0] = 1.0 if upper else -1.0
    lim.limit(HOME, None)
    b = lim.brake_speed(0, 0.001)
    assert lim.v[0] == pytest.approx(b if upper else -b, rel=1e-9)


def test_a_limiter_for_hundreds_of_joints_resets_them() -> None:
    n = 300
    lim = CommandLimiter([f"j{i}" for i in range(n)], [_one_joint(-1.0, 1.0)] * n, DT)
    lim.reset([0.5] * n)
    assert lim.q == [0.5] * n and lim.stopped


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_uniform_scaling_does_not_report_a_joint_whose_wanted_velocity_sits_exactly_on_its_bound(sign: float) -> None:
    """dt = 2^-7, A = 4, horizon 0.5 s: joint a wants exactly its acceleration bound 2^-5 (allowed, so
    no limit of its own); joint b's far target sets the common scale; only b is reported."""
    spec = parse_joint_limits_yaml("joint_limits:\n  a:\n    has_position_limits: true\n    min_position: -1.0\n"
                                   "    max_position: 1.0\n    has_velocity_limits: true\n    max_velocity: 2.0\n"
                                   "    has_acceleration_limits: true\n    max_acceleration: 4.0\n")["a"]
    dt = 2.0 ** -7
    lim = CommandLimiter(["a", "b"], [spec, spec], dt, target_horizon_s=0.5, uniform_scaling=True)
    lim.reset([0.0, 0.0])
    assert lim._adt[0] == 2.0 ** -5
    lim.limit([sign * 2.0 ** -6, sign * 0.9], None)
    assert [r[1] for r in lim.interventions if r[0] == "uniform_scale"] == [1]
    assert [r for r in lim.interventions if r[1] == 0] == []
    assert 0.0 < sign * lim.v[0] < 2.0 ** -5


def test_without_a_max_step_the_measurement_never_changes_the_command() -> None:
    plain, measured = panda(), panda()
    target = list(HOME)
    target[0] += 1.0
    target[3] -= 0.5
    wild = [q + 5.0 for q in HOME]
    for _ in range(20):
        assert list(measured.limit(target, wild)) == list(plain.limit(target, None))
        assert measured.interventions == plain.interventions


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_measurement_never_steers_the_max_step_window(bad: float) -> None:
    plain, measured = panda(max_relative_target=[0.1]), panda(max_relative_target=[0.1])
    target = list(HOME)
    target[0] += 0.05
    for _ in range(10):
        good = list(plain.q)
        plain.limit(target, good)
        meas = list(measured.q)
        meas[0] = bad
        measured.limit(target, meas)
        assert measured.q == plain.q
        assert not any(r[0] == "max_step_yielded" for r in measured.interventions)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_uniform_scaling_infeasible_when_a_slowly_moving_joint_is_asked_to_stay(sign: float) -> None:
    """A few ticks from rest joint 1 moves at well under 1 rad/s, yet cannot stop this tick: asked to stay
    while joint 2 moves, no common scale exists."""
    lim = panda(uniform_scaling=True, target_horizon_s=0.0)
    target = list(HOME)
    target[0] = 2.0 * sign
    for _ in range(3):
        lim.limit(target, None)
    assert lim.dec[0] * DT < sign * lim.v[0] < 1.0
    target = list(lim.q)
    target[1] += 0.3
    lim.limit(target, None)
    assert (UNIFORM_SCALE_INFEASIBLE, -1, 0.0, 1.0, 0.0) in lim.interventions


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_max_step_yield_record_names_the_step_the_lag_and_no_applied_value(sign: float) -> None:
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(SOFT_TIE)["a"]], DT, max_relative_target=[0.1])
    q0 = sign * (2.0 ** -10 - 0.5)
    lim.reset([q0])
    lim.limit([-0.9 * sign], [-1.0 * sign])
    assert lim.interventions[0] == ("max_step_yielded", 0, 0.1, -1.0 * sign - q0, 0.0)


@pytest.mark.parametrize("x", [1e-9, 1e-6, 1e-3, 0.05, 0.3, 2.0])
def test_braking_speed_satisfies_the_discrete_stopping_relation(x: float) -> None:
    """B(x) is the largest v with v^2 + 2 D dt v = 2 D x (stops within x braking at D in steps of dt)."""
    lim = CommandLimiter(PANDA, SETS, DT)
    for i in range(len(PANDA)):
        d, b = lim.dec[i], lim.brake_speed(i, x)
        assert b > 0 and b * b + 2 * d * DT * b == pytest.approx(2 * d * x, rel=1e-9)
    assert lim.brake_speed(0, 0.0) == 0.0 and lim.brake_speed(0, -1.0) == 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_stop_leaving_a_position_limit_brakes_within_the_jerk_limit(sign: float) -> None:
    """~1 kHz, the joint sits on its limit but already moves away from it and accelerates: the stop
    brakes it jerk-limited (no abrupt halt, nothing yielded), it never goes back past the limit."""
    dt = 2.0 ** -10
    lim = CommandLimiter(["a"], [parse_joint_limits_yaml(JERKY)["a"]], dt)
    edge = -1.0 if sign > 0 else 1.0
    lim.reset([edge])
    lim.v[0], lim.a[0] = sign * 2.0 ** -8, sign * lim.acc[0]
    for _ in range(60):
        a0 = lim.a[0]
        lim.stop()
        assert not any(r[0] == "jerk_yielded" for r in lim.interventions)
        assert abs(lim.a[0] - a0) <= lim.jerk[0] * dt * (1 + 1e-9)
        assert sign * (lim.q[0] - edge) >= 0.0
    assert lim.stopped


def test_a_whole_robot_record_is_described_for_all_joints() -> None:
    assert describe(("velocity", -1, 2.0, 3.0, 2.0), PANDA).startswith("all joints: velocity limit 2")


def test_a_negative_max_relative_target_turns_that_joints_window_off_like_zero() -> None:
    lim = CommandLimiter(PANDA, SETS, DT, max_relative_target=[-0.1] + [0.1] * 7)
    assert lim.max_step == [math.inf] + [0.1] * 7


def test_a_controlled_stop_from_cruise_reports_nothing() -> None:
    """The stop's own braking is the plan, not an intervention."""
    lim = panda(target_horizon_s=0.0)
    target = list(HOME)
    target[0] = 2.5
    for _ in range(60):
        lim.limit(target, None)
    assert lim.v[0] > 1.0
    while not lim.stopped:
        lim.stop()
        assert lim.interventions == []


def _geo_joint(vmax: float) -> object:
    return parse_joint_limits_yaml("joint_limits:\n  a:\n    has_position_limits: true\n    min_position: -1.0\n"
                                   "    max_position: 1.0\n    has_velocity_limits: true\n"
                                   f"    max_velocity: {vmax}\n    has_acceleration_limits: true\n"
                                   "    max_acceleration: 4.0\n")["a"]


# dt = 2^-7, D = 4: B(x) = 0.5 exactly at x = 0.03515625 from a limit ((0.5 + D dt)^2 = 2 D x + (D dt)^2).
GEO_DT, GEO_X = 2.0 ** -7, 0.03515625


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_tie_between_the_velocity_and_position_bounds_is_reported_as_the_higher_priority_velocity(
        sign: float) -> None:
    lim = CommandLimiter(["a"], [_geo_joint(0.5)], GEO_DT)
    lim.reset([sign * (1.0 - GEO_X)])
    assert lim.brake_speed(0, GEO_X) == 0.5 == lim.vmax[0]
    lim.v[0] = sign * 0.5  # cruising at the velocity limit towards the limit
    lim.limit([sign * 1.0], None)
    assert [r[:2] for r in lim.interventions] == [("velocity", 0)]
    assert lim.v[0] == pytest.approx(sign * 0.5)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_deceleration_window_that_just_touches_the_braking_bound_takes_it_without_a_yield(sign: float) -> None:
    """v = B(x) + D dt: braking at D lands exactly on B(x); that is allowed, nothing yields."""
    lim = CommandLimiter(["a"], [_geo_joint(2.0)], GEO_DT)
    lim.reset([sign * (1.0 - GEO_X)])
    lim.v[0] = sign * (0.5 + lim._ddt[0])
    lim.limit([sign * 0.99], None)
    assert not any(r[0].endswith("_yielded") for r in lim.interventions)
    assert lim.v[0] == pytest.approx(sign * 0.5)


@pytest.mark.parametrize("upper", [True, False])
def test_the_jerk_yield_record_names_the_jerk_limit_the_acceleration_and_no_applied_value(upper: bool) -> None:
    lim, _ = at_rest_on_a_limit(upper, outwards=True)
    a0 = lim.a[0]
    lim.stop()
    assert lim.interventions == [("jerk_yielded", 0, lim.jerk[0], a0, 0.0)]


def test_stopped_means_every_velocity_strictly_below_a_nanoradian_per_second() -> None:
    lim = panda()
    lim.v[3] = 1e-9
    assert not lim.stopped
    lim.v[3] = 0.99e-9
    assert lim.stopped


def test_an_infinite_max_relative_target_given_by_the_caller_means_no_window() -> None:
    plain, windowless = panda(), panda(max_relative_target=[float("inf")] * 8)
    target = list(HOME)
    target[0] += 1.0
    for _ in range(10):
        meas = [q + 0.5 for q in windowless.q]
        assert list(windowless.limit(target, meas)) == list(plain.limit(target, None))
        assert windowless.interventions == plain.interventions


def test_uniform_scaling_keeps_the_direction_with_the_first_joint_asked_to_stay() -> None:
    lim = panda(uniform_scaling=True, target_horizon_s=0.0)
    target = list(HOME)
    target[1] += 1.0
    target[2] += 0.25
    drive_uniformly(lim, list(HOME), target, lead=1, follower=2, ratio=0.25, still=0)


def test_uniform_scaling_feasible_when_a_joint_with_no_room_to_brake_allows_exactly_one_scale() -> None:
    """Joint 1, too fast 1 mm from its limit, can take only the braking bound B (its interval is one
    point), so exactly one scale B / wanted works: it is applied to every joint, nothing infeasible."""
    lim = panda(jerk=False, uniform_scaling=True, target_horizon_s=0.0)
    start = list(HOME)
    start[0] = lim.hi[0] - 0.001
    lim.reset(start)
    lim.v[0] = 1.0
    target = list(start)
    target[0] = lim.hi[0]
    target[1] += 0.0001
    lim.limit(target, None)
    assert not any(r[0] == UNIFORM_SCALE_INFEASIBLE for r in lim.interventions)
    scale = lim.brake_speed(0, 0.001) / (0.001 / DT)
    assert lim.v[1] == pytest.approx(0.0001 / DT * scale, rel=1e-6)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_inverted_max_step_window_touching_the_velocity_bound_yields_to_the_deceleration_edge(sign: float) -> None:
    """dt = 2^-7, A = D = 4, cruising at -2 rad/s (the velocity limit) with the robot lagging 0.140625 behind
    a 0.125 window: the window (its far edge exactly -2) lies beyond the interval [-2, -2 + D dt]; the
    max step yields and the command keeps to the deceleration edge, not the velocity one."""
    lim = CommandLimiter(["a"], [_geo_joint(2.0)], GEO_DT, max_relative_target=[0.125])
    lim.reset([0.0])
    lim.v[0] = -2.0 * sign
    lim.limit([-0.9 * sign], [-0.140625 * sign])
    assert [r[0] for r in lim.interventions][:1] == ["max_step_yielded"]
    assert lim.v[0] == pytest.approx(sign * (-2.0 + 4.0 * GEO_DT))


def test_limiter_refuses_more_joint_names_than_limit_sets() -> None:
    with pytest.raises(ValueError, match="9 joint names but 8 limit sets"):
        CommandLimiter(PANDA + ["extra_joint"], SETS, DT)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_robot_ahead_of_the_window_pulls_the_command_at_the_full_lead_over_dt(sign: float) -> None:
    """Measured 0.0015 beyond a 0.1 window: the command must head out at 0.15 rad/s, more than the
    acceleration allows from rest, so the max step yields and the command accelerates fully."""
    lim = CommandLimiter(["a"], [_one_joint(-1.0, 1.0)], DT, max_relative_target=[0.1])
    lim.reset([0.0])
    lim.limit([0.0], [sign * 0.1015])
    assert [r[0] for r in lim.interventions][:1] == ["max_step_yielded"]
    assert lim.v[0] == pytest.approx(sign * 0.03)


def test_limiter_refuses_more_max_relative_target_values_than_joints() -> None:
    with pytest.raises(ValueError, match="max_relative_target needs 1 or 8 values, got 9"):
        CommandLimiter(PANDA, SETS, DT, max_relative_target=[0.1] * 9)


def test_uniform_scaling_names_the_first_of_two_joints_binding_at_the_same_scale() -> None:
    spec = _one_joint(-1.0, 1.0)
    lim = CommandLimiter(["a", "b"], [spec, spec], DT, uniform_scaling=True)
    lim.reset([0.0, 0.0])
    lim.limit([0.5, 0.5], None)
    assert [r[1] for r in lim.interventions if r[0] == "uniform_scale"] == [0]


def test_by_default_joints_are_limited_independently_without_uniform_scaling() -> None:
    lim = panda(target_horizon_s=1.0)
    target = list(HOME)
    target[1] += 2.0
    target[0] += 0.1
    lim.limit(target, None)
    assert not any(r[0].startswith("uniform_scale") for r in lim.interventions)
    assert lim.v[0] == pytest.approx(0.1)
