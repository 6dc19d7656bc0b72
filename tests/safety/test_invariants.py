"""The supervisor's invariants under every input sequence, judged by the independent oracle.

Hypothesis drives a state machine over plausible moves, far out-of-range and huge finite targets,
NaN/inf, reversals, wrong lengths and names, old/future/NaN stamps, dropouts of commands and of
joint states, e-stop latch and release, at 100 Hz and 1 kHz; named cases pin ordinary faults that can break
an invariant (the module docstrings of safety/limiter.py say how the limiter keeps each).
"""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from safety_fuzz import HUGE, Rig, config_for, run_random
from safety_robots import PANDA_NAMES, fuzz_robots, panda

from omni_vla_safety.limiter import CommandLimiter
from omni_vla_safety.limits import parse_joint_limits_yaml

PANDA = panda()
ROBOTS = {robot.name: robot for robot in fuzz_robots()}
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]


def assert_clean(rig: Rig) -> None:
    assert not rig.oracle.violations, rig.oracle.violations[:5]


@pytest.mark.parametrize("rate_hz", [100.0, 1000.0])
@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_random_hostile_streams_break_no_invariant_on_any_robot(robot: str, rate_hz: float) -> None:
    """A short budget here; `omni-vla bench safety --fuzz N` runs the same generator for N steps."""
    rig = run_random(ROBOTS[robot], rate_hz, 6000, seed=len(robot) + 2)
    assert_clean(rig)
    counts = rig.sup.counts
    assert rig.oracle.step == 6000 and counts["rejected_out_of_range"] > 0 and counts["rejected_non_finite"] > 0


def test_a_jerk_limited_joint_caught_mid_stop_by_a_trajectory_keeps_its_jerk_limit() -> None:
    """The fuzz's first find on the UR5e with jerk limits (seed 2, step 19205 at 1 kHz): a joint riding its stop's
    no-reversal bound, its whole jerk window a rounding short of it, had its velocity set to 0 in one tick."""
    rig = run_random(ROBOTS["ur5e"], 1000.0, 19300, seed=2)
    assert_clean(rig)


class SupervisorMachine(RuleBasedStateMachine):
    """Any interleaving of inputs; after every tick the oracle must have nothing to report."""

    @initialize(rate=st.sampled_from([100.0, 1000.0]), seed=st.integers(0, 2**16), outside=st.booleans(),
                uniform=st.booleans(), saturate=st.booleans())
    def start(self, rate: float, seed: int, outside: bool, uniform: bool, saturate: bool) -> None:
        self.rng = random.Random(seed)
        config = config_for(PANDA, rate, uniform_scaling=uniform, out_of_range="saturate" if saturate else "refuse")
        start = list(HOME)
        if outside:
            start[3] = -0.055  # above panda_joint4's max (-0.0698), within the 0.02 tolerance
            start[7] = 0.045  # gripper beyond 0.04
        self.rig = Rig(PANDA, config, start)
        self.rig.tick()

    @rule(n=st.integers(1, 40), states=st.booleans())
    def ticks(self, n: int, states: bool) -> None:
        for _ in range(n):
            self.rig.tick(joint_states=states)

    @rule(spread=st.sampled_from([0.05, 0.5, 3.0]))
    def plausible(self, spread: float) -> None:
        self.rig.command(self.rig.plausible(self.rng, spread))

    @rule()
    def corners(self) -> None:
        self.rig.command(self.rig.corner(self.rng))

    @rule()
    def far_out_of_range(self) -> None:
        self.rig.command(self.rig.far(self.rng))

    @rule(value=st.sampled_from([HUGE, -HUGE, 1e30, math.nan, math.inf, -math.inf]), joint=st.integers(0, 7))
    def garbage_value(self, value: float, joint: int) -> None:
        target = list(self.rig.measured)
        target[joint] = value
        self.rig.command(target)

    @rule(kind=st.sampled_from(["short", "long", "duplicate", "unknown", "reversed"]))
    def malformed(self, kind: str) -> None:
        names, target = list(PANDA_NAMES), self.rig.plausible(self.rng)
        if kind == "short":
            target = target[:-1]
        elif kind == "long":
            target.append(0.0)
        elif kind == "duplicate":
            names[1] = names[0]
        elif kind == "unknown":
            names[2] = "elbow"
        else:
            names, target = names[::-1], target[::-1]
        self.rig.command(target, names=names)

    @rule(age=st.sampled_from([-5.0, -0.5, 0.0, 0.1, 1.0, 100.0, math.nan, math.inf, -math.inf]))
    def stamped(self, age: float) -> None:
        self.rig.command(self.rig.plausible(self.rng), stamp=self.rig.now - age)

    @rule(kind=st.sampled_from(["nan", "beyond", "duplicate", "missing", "short"]))
    def bad_joint_state(self, kind: str) -> None:
        names, pos = list(PANDA_NAMES), list(self.rig.measured)
        if kind == "nan":
            pos[0] = math.nan
        elif kind == "beyond":
            pos[3] = 0.5  # panda_joint4's max is -0.0698
        elif kind == "duplicate":
            names[1] = names[0]
        elif kind == "missing":
            names, pos = names[1:], pos[1:]
        else:
            pos = pos[:-1]
        self.rig.joint_state(names, pos)

    @rule(value=st.booleans())
    def estop(self, value: bool) -> None:
        self.rig.estop(value)

    @rule()
    def reset_estop(self) -> None:
        self.rig.reset_estop()

    @invariant()
    def oracle_is_satisfied(self) -> None:
        assert_clean(self.rig)


SupervisorMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])
test_supervisor_state_machine = SupervisorMachine.TestCase


# ---- named cases: an ordinary fault that can break an invariant ----

def moving_rig(rate_hz: float = 100.0, **overrides: object) -> Rig:
    rig = Rig(PANDA, config_for(PANDA, rate_hz, **overrides), HOME)
    rig.tick()
    target = list(HOME)
    target[0] = 2.5
    for k in range(int(0.4 * rate_hz)):
        if k % max(1, int(rate_hz / 20)) == 0:
            rig.command(target)
        rig.tick()
    assert abs(rig.sup.limiter.v[0]) > 1.0
    return rig


def test_commands_during_joint_state_dropout_never_exceed_acceleration() -> None:
    """Max step against a stale measurement must not outrank deceleration (was -110 rad/s^2 vs 15)."""
    rig = moving_rig()
    target = list(HOME)
    target[0] = -2.5  # reversal while the joint states are gone
    for _ in range(40):
        rig.command(target)
        rig.tick(joint_states=False)
    assert_clean(rig)
    assert rig.sup.limiter.stopped


def test_start_outside_range_within_tolerance_returns_at_the_limits_without_a_jump() -> None:
    start = list(HOME)
    start[3] = -0.0698 + 0.019  # panda_joint4's max, plus most of the 0.02 tolerance
    rig = Rig(PANDA, config_for(PANDA, 100.0), start)
    rig.tick()
    assert rig.measured[3] == pytest.approx(-0.0698 + 0.019)  # holding where it is, not jumping in
    for k in range(150):
        if k % 5 == 0:
            rig.command([*HOME[:3], -1.0, *HOME[4:]])
        rig.tick()
    assert_clean(rig)
    assert rig.measured[3] < -0.0698


def test_huge_finite_target_with_uniform_scaling_keeps_outputs_finite() -> None:
    rig = moving_rig(uniform_scaling=True, out_of_range="saturate")
    for _ in range(30):
        rig.command([HUGE] * 8)
        rig.tick()
    for _ in range(30):
        rig.command(HOME)
        rig.tick()
    assert_clean(rig)
    assert all(math.isfinite(q) for q in rig.measured)


def test_stop_at_1khz_ends_at_rest_and_stays() -> None:
    rig = moving_rig(1000.0)
    rig.estop(True)
    for _ in range(600):
        rig.tick()
    held = list(rig.measured)
    for _ in range(100):
        rig.tick()
    assert rig.measured == held
    assert_clean(rig)


def test_estop_release_keeps_the_command_continuous() -> None:
    rig = moving_rig()
    rig.estop(True)
    for _ in range(60):
        rig.tick()
    stopped_at = list(rig.measured)
    rig.measured[0] += 0.05  # the robot was pushed while stopped
    rig.estop(False)
    rig.reset_estop()
    assert not rig.sup.estop_latched
    rig.tick(joint_states=False)
    assert rig.measured == stopped_at  # no jump to the measurement
    assert_clean(rig)


def test_nan_stamp_is_refused_and_the_watchdog_still_fires() -> None:
    rig = moving_rig()
    assert not rig.sup.on_command(PANDA_NAMES, HOME, math.nan, rig.now)
    assert rig.sup.counts["rejected_stale"] == 1
    rig.command(HOME, stamp=rig.now)
    for _ in range(100):
        rig.tick()
    assert rig.sup.state == "watchdog_stop" and rig.sup.limiter.stopped


def test_joint_state_naming_a_joint_twice_is_refused() -> None:
    rig = moving_rig()
    names = list(PANDA_NAMES)
    names[1] = names[0]
    assert not rig.sup.on_joint_state(names, HOME, rig.now)
    assert rig.sup.counts["bad_joint_state"] == 1


def test_non_finite_joint_states_while_holding_do_not_move_the_arm() -> None:
    rig = Rig(PANDA, config_for(PANDA, 100.0), HOME)
    rig.tick()
    held = list(rig.measured)
    for value in (math.nan, math.inf, -math.inf, math.nan):
        rig.joint_state(PANDA_NAMES, [value] + HOME[1:])
        rig.tick(joint_states=False)
    assert rig.measured == held
    assert rig.sup.counts["bad_joint_state"] == 4


def test_far_out_of_range_proposal_is_refused_and_held() -> None:
    rig = moving_rig()
    far = list(HOME)
    far[0] = 2.8973 + 2.0
    assert not rig.sup.on_command(PANDA_NAMES, far, rig.now, rig.now)
    assert rig.sup.counts["rejected_out_of_range"] == 1 and rig.sup.target is None
    assert "outside" in rig.sup.reason and "panda_joint1" in rig.sup.reason
    for _ in range(60):
        rig.tick()
    assert rig.sup.limiter.stopped and rig.measured[0] < 2.8973


def test_saturate_option_clamps_far_proposals_into_the_range() -> None:
    rig = moving_rig(out_of_range="saturate")
    far = list(HOME)
    far[0] = 2.8973 + 2.0
    for k in range(400):
        if k % 5 == 0:
            rig.command(far, stamp=rig.now)
        rig.tick()
    assert rig.sup.counts["rejected_out_of_range"] == 0
    assert rig.measured[0] == pytest.approx(2.8973, abs=1e-6)
    assert_clean(rig)


def test_proposal_within_tolerance_is_accepted_and_clamped() -> None:
    rig = moving_rig()
    near = list(HOME)
    near[7] = 0.04 + 0.001  # gripper a millimetre past its range: within out_of_range_tolerance
    assert rig.sup.on_command(PANDA_NAMES, near, rig.now, rig.now)
    for _ in range(200):
        rig.command(near)
        rig.tick()
    assert rig.measured[7] == pytest.approx(0.04, abs=1e-9)


def test_velocity_kept_a_margin_below_the_limit() -> None:
    rig = moving_rig()
    for _ in range(20):
        rig.command([2.5, *HOME[1:]])
        rig.tick()
    assert rig.sup.limiter.v[0] == pytest.approx(2.175 * (1 - rig.config.limit_margin))


def test_estop_released_but_not_reset_keeps_the_arm_stopped() -> None:
    rig = moving_rig()
    rig.estop(True)
    rig.estop(False)
    for k in range(100):
        if k % 5 == 0:
            rig.command([2.5, *HOME[1:]])
        rig.tick()
    assert rig.sup.estop_latched and rig.sup.limiter.stopped
    assert_clean(rig)


def test_limiter_refuses_a_joint_without_velocity_or_acceleration_limits() -> None:
    sets = parse_joint_limits_yaml("joint_limits:\n  a: {has_position_limits: true, min_position: -1, max_position: 1}\n")
    with pytest.raises(ValueError, match="'a' has no velocity or acceleration limit"):
        CommandLimiter(["a"], [sets["a"]], 0.01)


def test_watchdog_stop_at_1khz_with_uniform_scaling_never_reverses_a_joint() -> None:
    """A watchdog stop at 1 kHz with uniform scaling, after non-finite states, far proposals and malformed
    commands: no joint reverses while the arm stops."""
    m = SupervisorMachine()
    m.start(rate=1000.0, uniform=True, saturate=True, seed=37316, outside=False)
    steps = ([("bad_joint_state", {"kind": "nan"})] * 2 + [("ticks", {"n": 40, "states": True})]
             + [("corners", {})] * 3 + [("ticks", {"n": 33, "states": True}), ("malformed", {"kind": "short"}),
                                        ("corners", {}), ("ticks", {"n": 11, "states": False}),
                                        ("ticks", {"n": 16, "states": False}), ("far_out_of_range", {}),
                                        ("malformed", {"kind": "short"}), ("ticks", {"n": 15, "states": False}),
                                        ("far_out_of_range", {})]
             + [("corners", {})] * 8 + [("ticks", {"n": 25, "states": False}), ("malformed", {"kind": "short"}),
                                        ("ticks", {"n": 1, "states": False})])
    for name, kwargs in steps:
        getattr(m, name)(**kwargs)
    assert not m.rig.oracle.violations, m.rig.oracle.violations[:3]
