"""Per-command limiter: random and adversarial streams never exceed a limit and always stop in range.

Kinematics are recomputed from the published positions only (v = dq/dt, a = dv/dt, j = da/dt
at the command period dt), as the robot would see them. Tolerances (floating point):
position 1e-9, velocity 1e-9, acceleration 1e-6, jerk 1e-3, stopping distance 1e-6 (units/s^n).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from limits_yaml import limits_yaml

from omni_vla_safety.limiter import CommandLimiter
from omni_vla_safety.limits import JointLimitSet, load_limit_sets, parse_joint_limits_yaml

REPO = Path(__file__).resolve().parents[2]
PANDA = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
PANDA_LIMITS = load_limit_sets(REPO / "config" / "joint_limits.yaml")
DT = 0.01
TOL_Q, TOL_V, TOL_A, TOL_J, TOL_BRAKE = 1e-9, 1e-9, 1e-6, 1e-3, 1e-6


def panda(**kwargs: object) -> CommandLimiter:
    lim = CommandLimiter(PANDA, [PANDA_LIMITS[j] for j in PANDA], DT, **kwargs)  # type: ignore[arg-type]
    lim.reset(home())
    return lim


def home() -> list[float]:
    return [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]


class Checker:
    """Recomputes kinematics of the output stream and asserts every configured limit."""

    def __init__(self, limiter: CommandLimiter, check_jerk: bool = True) -> None:
        self.lim = limiter
        self.q = list(limiter.q)
        self.v = [0.0] * limiter.n
        self.a = [0.0] * limiter.n
        self.check_jerk = check_jerk
        self.jerk_violations = 0

    def step(self, out: Sequence[float]) -> None:
        lim = self.lim
        yielded = {rec[1] for rec in lim.interventions if rec[0] == "jerk_yielded"}
        for i in range(lim.n):
            q, v_prev, a_prev = out[i], self.v[i], self.a[i]
            v = (q - self.q[i]) / DT
            a = (v - v_prev) / DT
            name = lim.joint_names[i]
            assert lim.lo[i] - TOL_Q <= q <= lim.hi[i] + TOL_Q, f"{name} position {q} outside range"
            assert abs(v) <= lim.vmax[i] + TOL_V, f"{name} velocity {v} > {lim.vmax[i]}"
            speeding_up = (v_prev > 0 and a > 0) or (v_prev < 0 and a < 0) or v_prev == 0
            bound = lim.acc[i] if speeding_up else lim.dec[i]
            assert abs(a) <= bound + TOL_A, f"{name} acceleration {a} > {bound} (v_prev {v_prev})"
            jerk = (a - a_prev) / DT
            if abs(jerk) > lim.jerk[i] + TOL_J:
                assert not self.check_jerk, f"{name} jerk {jerk} > {lim.jerk[i]}"
                assert i in yielded, f"{name} jerk {jerk} exceeded without a jerk_yielded report"
                self.jerk_violations += 1
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


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=stream, lag=st.booleans(), uniform=st.booleans())
def test_random_command_streams_never_exceed_limits_and_always_stop_in_range(
        steps: list[tuple[list[float], int]], lag: bool, uniform: bool) -> None:
    lim = panda(max_relative_target=[0.25] * 7 + [0.02], target_horizon_s=0.05, uniform_scaling=uniform)
    chk = Checker(lim)
    run_stream(lim, chk, steps, lag)
    worst = max(v / (d * DT) for v, d in zip(lim.vmax, lim.dec))
    chk.stop_within(int(worst) + 3)


limit_corners = st.lists(st.sampled_from(["lo", "hi", "far_lo", "far_hi", "mid"]), min_size=8, max_size=8)


@settings(max_examples=80, deadline=None)
@given(corners=st.lists(limit_corners, min_size=2, max_size=30), period=st.integers(1, 6),
       horizon=st.sampled_from([0.0, 0.05]))
def test_adversarial_bang_bang_targets_at_the_limits_never_exceed_limits(
        corners: list[list[str]], period: int, horizon: float) -> None:
    """Targets flip between limits and far beyond them: braking must always leave room to stop."""
    lim = panda(target_horizon_s=horizon)
    chk = Checker(lim)
    for corner in corners:
        target = [{"lo": lo, "hi": hi, "far_lo": lo - 5.0, "far_hi": hi + 5.0, "mid": 0.5 * (lo + hi)}[c]
                  for c, lo, hi in zip(corner, lim.lo, lim.hi)]
        for _ in range(period):
            chk.step(lim.limit(target, None))
    chk.stop_within(40)


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
    """Jerk (J dt < A + D here) may only be exceeded when braking needs it, and then it is reported."""
    lim = soft_low_jerk()
    chk = Checker(lim, check_jerk=False)
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
