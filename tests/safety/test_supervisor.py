"""Supervisor state machine on a fake clock: fail-closed validation, watchdog, e-stop, hold.

One behaviour per test, in the style of ros2_control's joint_limits tests: what a non-finite or malformed joint
state or proposal leaves behind, where the watchdog's timeouts start and what its reason names, and how the
state machine leaves each state. Fake clock and a robot that reaches every command.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from omni_vla_safety.config import SupervisorConfig, config_from_yaml
from omni_vla_safety.limits import load_limit_sets, require_joints
from omni_vla_safety.supervisor import ACTIVE, ESTOP, HOLD, WAITING, WATCHDOG, Supervisor

REPO = Path(__file__).resolve().parents[2]
CONFIG = config_from_yaml(REPO / "config" / "safety_supervisor.yaml")
NAMES = list(CONFIG.joint_names)
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
DT = CONFIG.dt
BAD = [math.nan, math.inf, -math.inf]


class Rig:
    """A supervisor plus a perfectly tracking robot (it reaches every command) and a fake clock."""

    def __init__(self, **overrides: object) -> None:
        config = CONFIG.model_copy(update=overrides) if overrides else CONFIG
        limits = require_joints(load_limit_sets(REPO / "config" / "joint_limits.yaml"), NAMES, "joint_limits")
        self.sup = Supervisor(config, limits)
        self.now = 0.0
        self.robot = list(HOME)
        self.outputs: list[list[float]] = []

    def tick(self, n: int = 1, state: list[float] | None = None, names: list[str] | None = None,
             joint_states: bool = True) -> list[float] | None:
        """n supervisor ticks; the joint state sent is the robot's unless `state`/`names` say otherwise."""
        out = None
        for _ in range(n):
            self.now += DT
            if joint_states:
                self.sup.on_joint_state(NAMES if names is None else names,
                                        self.robot if state is None else state, self.now)
            out = self.sup.tick(self.now)
            if out is not None:
                self.robot = list(out)
                self.outputs.append(list(out))
        return out

    def command(self, positions: list[float], names: list[str] | None = None, stamp: float | None = -1.0) -> bool:
        return self.sup.on_command(NAMES if names is None else names, positions,
                                   self.now if stamp == -1.0 else stamp, self.now)

    def velocities(self, joint: int) -> list[float]:
        qs = [o[joint] for o in self.outputs]
        return [(b - a) / DT for a, b in zip(qs, qs[1:])]

    def speed(self, joint: int) -> float:
        return (self.outputs[-1][joint] - self.outputs[-2][joint]) / DT


def moving(rig: Rig, ticks: int = 30, joint: int = 0, goal: float = 2.0) -> list[float]:
    """Drive one joint towards a far goal with 20 Hz proposals until it moves fast; returns the target."""
    target = list(HOME)
    target[joint] = goal
    for k in range(ticks):
        if k % 5 == 0:
            assert rig.command(target)
        rig.tick()
    assert rig.speed(joint) > 0.5
    return target


def test_no_output_before_first_joint_state() -> None:
    rig = Rig()
    assert rig.tick(5, joint_states=False) is None
    assert rig.sup.state == WAITING
    assert not rig.command(HOME)  # nothing measured: rejected
    assert rig.sup.counts["rejected_no_joint_state"] == 1
    out = rig.tick()
    assert out == HOME and rig.sup.state == HOLD  # first state: hold where the robot is


def test_valid_command_followed_within_limits() -> None:
    rig = Rig()
    rig.tick()
    target = list(HOME)
    target[1] = 0.3
    for k in range(200):
        if k % 5 == 0:
            assert rig.command(target)
        rig.tick()
    assert rig.sup.state == ACTIVE
    assert math.isclose(rig.robot[1], 0.3, abs_tol=1e-4)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_command_rejected_and_held(bad: float) -> None:
    rig = Rig()
    rig.tick()
    moving(rig)
    v_before = rig.velocities(0)[-1]
    assert v_before > 0.5
    target = list(HOME)
    target[2] = bad
    assert not rig.command(target)
    assert rig.sup.counts["rejected_non_finite"] == 1
    assert "panda_joint3" in rig.sup.reason
    rig.tick(40)
    assert rig.sup.state == HOLD
    assert all(math.isfinite(x) for o in rig.outputs for x in o)
    speeds = rig.velocities(0)
    assert speeds[-1] == 0.0 and rig.outputs[-1] == rig.outputs[-2]  # stopped, holding
    decel = [(a - b) / DT for a, b in zip(speeds, speeds[1:]) if a > b]
    assert max(decel) <= 15.0 + 1e-6  # held through a controlled stop, not a jump


@pytest.mark.parametrize("names, positions, kind, needle", [
    (NAMES[:7], HOME[:7], "rejected_size", "expected 8"),
    (NAMES, HOME[:7], "rejected_size", "8 joint names but 7 positions"),
    (NAMES[:7] + ["panda_finger_joint2"], HOME, "rejected_names", "unknown joint 'panda_finger_joint2'"),
    (NAMES[:7] + ["panda_joint1"], HOME, "rejected_names", "'panda_joint1' twice"),
])
def test_malformed_command_rejected_naming_the_problem(names: list[str], positions: list[float], kind: str,
                                                       needle: str) -> None:
    rig = Rig()
    rig.tick()
    assert not rig.command(positions, names=names)
    assert rig.sup.counts[kind] == 1 and needle in rig.sup.reason
    assert rig.sup.target is None


def test_reordered_joint_names_indexed_by_name() -> None:
    rig = Rig()
    rig.tick()
    target = list(HOME)
    target[6] = 0.5
    order = list(reversed(range(8)))
    assert rig.command([target[i] for i in order], names=[NAMES[i] for i in order])
    assert rig.sup.target == target


def test_old_and_future_stamped_commands_rejected() -> None:
    rig = Rig()
    rig.tick()
    assert not rig.command(HOME, stamp=rig.now - 0.5)
    assert rig.sup.counts["rejected_stale"] == 1
    assert not rig.command(HOME, stamp=rig.now + 1.0)
    assert rig.sup.counts["rejected_future_stamp"] == 1
    assert rig.command(HOME, stamp=rig.now - 0.05)


def test_zero_stamp_uses_receive_time() -> None:
    rig = Rig()
    rig.tick()
    assert rig.command(HOME, stamp=None)
    assert rig.sup.command_time == rig.now


def test_stale_command_brings_robot_to_controlled_stop() -> None:
    rig = Rig()
    rig.tick()
    moving(rig, ticks=40)
    last_command = rig.now
    v_at_loss = rig.velocities(0)[-1]
    assert v_at_loss > 1.0
    n_before = len(rig.outputs)
    rig.tick(60)  # proposals stop arriving, joint states keep coming
    assert rig.sup.state == WATCHDOG and "proposals stopped" in rig.sup.reason
    assert rig.sup.counts["watchdog_command"] == 1
    speeds = rig.velocities(0)[n_before - 1:]
    decel = [(a - b) / DT for a, b in zip(speeds, speeds[1:])]
    assert max(decel) <= 15.0 + 1e-6 and min(decel) >= -1e-9  # monotone ramp within max_deceleration
    stop_tick = next(k for k, v in enumerate(speeds) if v == 0.0)
    timeout_ticks = math.ceil(CONFIG.command_timeout_s / DT)
    assert stop_tick <= timeout_ticks + math.ceil(v_at_loss / (15.0 * DT)) + 2
    assert all(o == rig.outputs[-1] for o in rig.outputs[n_before + stop_tick:])  # then holds
    assert rig.now - last_command > CONFIG.command_timeout_s


def test_stale_joint_state_brings_robot_to_controlled_stop_and_rejects_commands() -> None:
    rig = Rig()
    rig.tick()
    moving(rig, ticks=40)
    rig.tick(30, joint_states=False)
    assert rig.sup.state == WATCHDOG and rig.sup.counts["watchdog_joint_state"] == 1
    assert rig.sup.limiter.stopped
    assert not rig.command(HOME)
    assert rig.sup.counts["rejected_no_joint_state"] == 1


def test_new_valid_command_resumes_after_watchdog_stop() -> None:
    rig = Rig()
    rig.tick()
    moving(rig)
    rig.tick(50)
    assert rig.sup.state == WATCHDOG
    assert rig.command(HOME)
    rig.tick()
    assert rig.sup.state == ACTIVE


def test_estop_latches_and_resets_only_when_clear() -> None:
    rig = Rig()
    rig.tick()
    moving(rig)
    rig.sup.on_estop(True, rig.now)
    rig.tick()
    assert rig.sup.state == ESTOP
    ok, why = rig.sup.reset_estop(rig.now)
    assert not ok and "still True" in why
    rig.sup.on_estop(False, rig.now)  # condition gone, but the robot is still braking
    ok, why = rig.sup.reset_estop(rig.now)
    assert not ok and "braking" in why
    moving_cmd = list(HOME)
    moving_cmd[0] = 2.0
    assert not rig.command(moving_cmd)  # ignored while latched
    rig.tick(40)
    assert rig.sup.state == ESTOP and rig.sup.limiter.stopped  # False alone does not unlatch
    rig.sup.on_estop(True, rig.now)
    rig.sup.on_estop(False, rig.now)
    ok, why = rig.sup.reset_estop(rig.now)
    assert ok, why
    rig.tick()
    assert rig.sup.state == HOLD  # needs a fresh proposal to move again
    assert rig.command(moving_cmd)
    rig.tick()
    assert rig.sup.state == ACTIVE


def test_interventions_counted_and_described_with_joint_limit_and_values() -> None:
    rig = Rig(target_horizon_s=0.0)
    rig.tick()
    target = list(HOME)
    target[4] = 2.8
    for _ in range(40):
        rig.command(target)
        rig.tick()
    assert rig.sup.counts["velocity"] > 0 and rig.sup.counts["acceleration"] > 0
    messages = [m for kind, m in rig.sup.events if kind == "velocity"]
    limit = 2.61 * (1 - CONFIG.limit_margin)  # the margin kept below the configured limit
    assert f"panda_joint5: velocity limit {limit:g}: requested velocity" in messages[0]
    status = rig.sup.status()
    assert status["state"] == ACTIVE and status["counts"]["velocity"] == rig.sup.counts["velocity"]


def test_config_refuses_inconsistent_parameters_naming_them() -> None:
    with pytest.raises(ValidationError, match="max_relative_target"):
        SupervisorConfig(max_relative_target=[0.1, 0.2])
    with pytest.raises(ValidationError, match="command_timeout_s"):
        SupervisorConfig(command_timeout_s=0.01)
    with pytest.raises(ValidationError, match="joint_names"):
        SupervisorConfig(joint_names=["a", "a"])
    with pytest.raises(ValidationError, match="unknown_parameter"):
        SupervisorConfig(unknown_parameter=1)


def test_parameter_file_defaults_match_the_validated_model() -> None:
    """config/safety_supervisor.yaml and SupervisorConfig must not drift apart (the Panda restates two lists)."""
    per_joint = {"max_relative_target", "out_of_range_tolerance"}
    assert CONFIG.model_dump(exclude=per_joint) == SupervisorConfig().model_dump(exclude=per_joint)


def test_joint_limits_file_resolved_from_cwd_then_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from omni_vla_safety.config import resolve_path

    monkeypatch.chdir(tmp_path)
    assert resolve_path("config/joint_limits.yaml").samefile(REPO / "config" / "joint_limits.yaml")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "joint_limits.yaml").write_text("joint_limits: {}\n")
    assert resolve_path("config/joint_limits.yaml") == tmp_path / "config" / "joint_limits.yaml"
    with pytest.raises(FileNotFoundError, match="nowhere.yaml"):
        resolve_path("config/nowhere.yaml")


# --- joint states ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", BAD)
def test_non_finite_first_joint_state_leaves_the_supervisor_waiting(bad: float) -> None:
    rig = Rig()
    state = list(HOME)
    state[3] = bad
    assert not rig.sup.on_joint_state(NAMES, state, 0.0)
    assert rig.sup.state == WAITING and rig.sup.measured is None
    assert rig.sup.counts["bad_joint_state"] == 1 and "panda_joint4" in rig.sup.reason
    assert rig.sup.tick(0.0) is None  # nothing measured: nothing published


@pytest.mark.parametrize("reordered", [False, True])
@pytest.mark.parametrize("bad", BAD)
def test_non_finite_joint_states_stop_the_arm_like_missing_ones(bad: float, reordered: bool) -> None:
    """A NaN/inf joint state is ignored: it must not feed the joint-state watchdog (fast path and
    name-lookup path of JointOrder.state)."""
    rig = Rig()
    rig.tick()
    target = moving(rig)
    measured_before = list(rig.sup.measured or [])
    state = list(rig.robot)
    state[2] = bad
    names = list(NAMES)
    if reordered:
        names, state = names[::-1], state[::-1]
    timeout_ticks = math.ceil(CONFIG.joint_state_timeout_s / DT)
    for k in range(timeout_ticks + 60):
        if k % 5 == 0:
            rig.command(target)  # the policy keeps proposing: must not keep the arm going
        rig.tick(state=state, names=names)
    assert rig.sup.counts["bad_joint_state"] == timeout_ticks + 60
    assert rig.sup.measured == measured_before  # the bad state was never stored
    assert rig.sup.state == WATCHDOG and rig.sup.counts["watchdog_joint_state"] == 1
    assert rig.sup.limiter.stopped and rig.outputs[-1] == rig.outputs[-2]
    assert rig.sup.counts["rejected_no_joint_state"] > 0
    assert all(math.isfinite(x) for out in rig.outputs for x in out)


@pytest.mark.parametrize("side", ["lo", "hi"])
def test_a_first_joint_state_beyond_the_accepted_bounds_leaves_the_supervisor_waiting(side: str) -> None:
    """The first measurement seeds the command: one at the bound is taken, one a hair beyond it never is."""
    rig = Rig()
    edge = rig.sup.accept_lo[3] if side == "lo" else rig.sup.accept_hi[3]
    beyond = math.nextafter(edge, -math.inf if side == "lo" else math.inf)
    for value in (beyond, 45.0 if side == "hi" else -45.0, 1e308 if side == "hi" else -1e308):
        state = list(HOME)
        state[3] = value
        assert not rig.sup.on_joint_state(NAMES, state, 0.0)
        assert rig.sup.state == WAITING and rig.sup.measured is None and rig.sup.tick(0.0) is None
        assert "'panda_joint4' measured at" in rig.sup.reason and "out_of_range_tolerance" in rig.sup.reason
    assert rig.sup.counts["bad_joint_state"] == 3
    state = list(HOME)
    state[3] = edge
    assert rig.sup.on_joint_state(NAMES, state, 0.0) and rig.sup.tick(0.0) is not None


def test_a_measurement_beyond_the_bounds_while_moving_is_ignored_and_the_arm_stops_like_without_one() -> None:
    """A glitch or a unit error mid-motion does not steer the command; held on, the watchdog stops the arm."""
    rig = Rig()
    rig.tick()
    target = moving(rig)
    measured_before = list(rig.sup.measured or [])
    state = list(rig.robot)
    state[0] = math.degrees(state[0]) + 40.0  # the driver switched to degrees
    timeout_ticks = math.ceil(CONFIG.joint_state_timeout_s / DT)
    for k in range(timeout_ticks + 60):
        if k % 5 == 0:
            rig.command(target)
        rig.tick(state=state)
    assert rig.sup.measured == measured_before
    assert rig.sup.counts["bad_joint_state"] == timeout_ticks + 60
    assert rig.sup.state == WATCHDOG and rig.sup.limiter.stopped
    lo, hi = rig.sup.limiter.lo, rig.sup.limiter.hi
    assert all(lo[i] <= x <= hi[i] for out in rig.outputs for i, x in enumerate(out))


def test_nan_joint_state_while_holding_keeps_the_arm_still_and_refuses_proposals() -> None:
    rig = Rig()
    rig.tick(3)
    state = list(HOME)
    state[0] = math.nan
    rig.tick(math.ceil(CONFIG.joint_state_timeout_s / DT) + 2, state=state)
    assert rig.sup.state == WATCHDOG
    assert all(out == HOME for out in rig.outputs)
    goal = list(HOME)
    goal[0] = 0.5
    assert not rig.command(goal)  # nothing trustworthy measured: no proposal is followed
    rig.tick(20, state=state)
    assert rig.outputs[-1] == HOME



@pytest.mark.parametrize("bad", BAD)
def test_joint_state_with_non_finite_receive_time_is_ignored_and_does_not_feed_the_watchdog(bad: float) -> None:
    """A +inf receive time stored as the last state time would keep the watchdog fed forever."""
    rig = Rig()
    rig.tick()
    moving(rig, ticks=10)
    assert not rig.sup.on_joint_state(NAMES, rig.robot, bad)
    assert rig.sup.counts["bad_joint_state"] == 1 and "not finite" in rig.sup.reason
    for _ in range(math.ceil(CONFIG.joint_state_timeout_s / DT) + 1):
        rig.tick(joint_states=False)
        rig.sup.on_joint_state(NAMES, rig.robot, bad)
    assert rig.sup.state == WATCHDOG

# --- e-stop ---------------------------------------------------------------------------------------

def test_estop_pulse_between_two_ticks_latches_a_controlled_stop() -> None:
    """The tick reads the latch, not the input: a press released before the next tick still stops."""
    rig = Rig()
    rig.tick()
    target = moving(rig)
    rig.sup.on_estop(True, rig.now)
    rig.sup.on_estop(False, rig.now)
    rig.tick()
    assert rig.sup.state == ESTOP and rig.sup.status()["estop_latched"]
    for k in range(60):
        if k % 5 == 0:
            assert not rig.command(target)  # ignored while latched
        rig.tick()
        assert rig.sup.state == ESTOP
    assert rig.sup.counts["ignored_estop"] == 12
    assert rig.sup.limiter.stopped and rig.outputs[-1] == rig.outputs[-2]
    ok, _ = rig.sup.reset_estop(rig.now)
    assert ok
    rig.tick()
    assert rig.sup.state == HOLD


def test_released_unreset_estop_is_reported_as_estop_even_when_joint_states_go_stale() -> None:
    rig = Rig()
    rig.tick()
    moving(rig)
    rig.sup.on_estop(True, rig.now)
    rig.tick(40)
    rig.sup.on_estop(False, rig.now)
    rig.tick(30, joint_states=False)
    assert rig.sup.state == ESTOP and rig.sup.counts["watchdog_joint_state"] == 0
    assert rig.sup.limiter.stopped



def test_estop_topic_false_while_running_does_not_stop_the_arm() -> None:
    rig = Rig()
    rig.tick()
    moving(rig, ticks=10)
    rig.sup.on_estop(False, rig.now)  # a "released" e-stop publishing its idle value
    assert not rig.sup.estop_latched and rig.sup.counts["estop"] == 0
    rig.tick()
    assert rig.sup.state == ACTIVE and rig.speed(0) > 0.5


def test_reset_estop_without_a_latched_estop_succeeds_and_changes_nothing() -> None:
    rig = Rig()
    rig.tick()
    target = moving(rig, ticks=10)
    ok, why = rig.sup.reset_estop(rig.now)
    assert ok and "not latched" in why
    assert rig.sup.counts["estop_reset"] == 0 and rig.sup.target == target
    rig.tick()
    assert rig.sup.state == ACTIVE


# --- status and diagnostics -----------------------------------------------------------------------

def test_interventions_update_last_intervention_but_not_the_state_reason() -> None:
    rig = Rig(target_horizon_s=0.0)
    rig.tick()
    target = list(HOME)
    target[4] = 2.8
    rig.command(target)
    reason = rig.sup.reason
    rig.tick(5)
    assert rig.sup.counts["acceleration"] > 0
    status = rig.sup.status()
    assert status["reason"] == reason == "joint state received; holding until a valid proposal"
    assert status["last_intervention"].startswith("panda_joint5: ")


def test_status_counts_every_tick_since_the_first_joint_state() -> None:
    rig = Rig()
    rig.tick(3, joint_states=False)
    assert rig.sup.status()["ticks"] == 0
    rig.tick(7)
    assert rig.sup.status()["ticks"] == 7


def _seconds_in(reason: str) -> float:
    return float(reason.split("(")[1].split(" s old")[0])


def _tick_until_watchdog(rig: Rig, joint_states: bool) -> float:
    for _ in range(100):
        rig.tick(joint_states=joint_states)
        if rig.sup.state == WATCHDOG:
            return rig.now
    raise AssertionError("no watchdog stop")


@pytest.mark.parametrize("move_ticks", [0, 10])
def test_joint_state_watchdog_reason_says_how_old_the_last_joint_state_is(move_ticks: int) -> None:
    rig = Rig()
    rig.tick()
    if move_ticks:
        moving(rig, ticks=move_ticks)
    last_state = rig.now
    stopped_at = _tick_until_watchdog(rig, joint_states=False)
    assert_watchdog_reason(rig, "watchdog_joint_state", "joint states stale (", stopped_at - last_state,
                           "joint_state_timeout_s", CONFIG.joint_state_timeout_s)


def assert_watchdog_reason(rig: Rig, kind: str, start: str, age: float, parameter: str, timeout: float) -> None:
    """One event of `kind`, saying how old the input was (as measured) and naming the timeout parameter."""
    events = [m for k, m in rig.sup.events if k == kind]
    assert len(events) == 1 and events[0].startswith(start)
    assert _seconds_in(events[0]) == pytest.approx(age, abs=1e-3)
    assert age > timeout
    assert f"{parameter} {timeout}]" in events[0]


def test_command_watchdog_reason_says_how_old_the_last_proposal_is() -> None:
    rig = Rig()
    rig.tick()
    moving(rig, ticks=10)
    last_command = rig.sup.command_time
    stopped_at = _tick_until_watchdog(rig, joint_states=True)
    assert_watchdog_reason(rig, "watchdog_command", "proposals stopped (", stopped_at - last_command,
                           "command_timeout_s", CONFIG.command_timeout_s)


# --- out-of-range proposals -----------------------------------------------------------------------

@pytest.mark.parametrize("side", ["lower", "upper"])
def test_proposal_beyond_the_range_within_tolerance_is_clamped_and_beyond_it_refused(side: str) -> None:
    rig = Rig()
    rig.tick()
    joint = 0
    lo, hi = rig.sup.limiter.lo[joint], rig.sup.limiter.hi[joint]
    tol = CONFIG.out_of_range_tolerance[joint]
    edge, outward = (lo, -1.0) if side == "lower" else (hi, 1.0)
    for offset in (0.0, 0.5 * tol, 0.999 * tol):  # at the limit and beyond it, within tolerance: accepted
        target = list(HOME)
        target[joint] = edge + outward * offset
        assert rig.command(target), offset
        assert rig.sup.counts["rejected_out_of_range"] == 0
    target = list(HOME)
    target[joint] = edge + outward * 1.001 * tol
    assert not rig.command(target)
    assert rig.sup.counts["rejected_out_of_range"] == 1 and "panda_joint1" in rig.sup.reason
    target[joint] = edge + outward * 0.999 * tol
    assert rig.command(target)
    for k in range(600):
        if k % 5 == 0:
            assert rig.command(target)
        rig.tick()
    assert rig.robot[joint] == pytest.approx(edge, abs=1e-6)  # clamped into the range, never beyond
    assert lo <= min(o[joint] for o in rig.outputs) and max(o[joint] for o in rig.outputs) <= hi


def test_a_good_joint_state_is_accepted() -> None:
    rig = Rig()
    assert rig.sup.on_joint_state(NAMES, HOME, 0.0)
    assert rig.sup.state == HOLD and rig.sup.measured == HOME


# --- validation -----------------------------------------------------------------------------------

def test_command_with_an_extra_joint_is_rejected_for_its_size() -> None:
    rig = Rig()
    rig.tick()
    names = NAMES + ["panda_finger_joint2"]
    assert not rig.sup.on_command(names, HOME + [0.02], rig.now, rig.now)
    assert rig.sup.counts["rejected_size"] == 1 and "9 positions, expected 8" in rig.sup.reason
    assert not rig.sup.on_command(NAMES + [NAMES[0]], HOME + [0.0], rig.now, rig.now)
    assert rig.sup.counts["rejected_size"] == 2 and rig.sup.counts["rejected_names"] == 0


@pytest.mark.parametrize("bad", BAD)
def test_command_with_a_non_finite_stamp_or_receive_time_is_rejected_as_stale(bad: float) -> None:
    rig = Rig()
    rig.tick()
    assert not rig.sup.on_command(NAMES, HOME, bad, rig.now)
    assert rig.sup.counts["rejected_stale"] == 1 and "not finite" in rig.sup.reason
    assert not rig.sup.on_command(NAMES, HOME, rig.now, bad)
    assert rig.sup.counts["rejected_stale"] + rig.sup.counts["rejected_no_joint_state"] == 2
    assert rig.command(HOME) and rig.sup.command_time == rig.now


def test_finite_joint_values_whose_sum_overflows_are_accepted() -> None:
    """The fast finite check sums the values; an overflowing sum must fall back to the per-joint check."""
    from omni_vla_safety.validation import JointOrder

    order = JointOrder(["a", "b"])
    assert order.state(["a", "b"], [1e308, 1e308]) == [1e308, 1e308]
    assert order.command(["b", "a"], [-1e308, -1e308]) == [-1e308, -1e308]



def test_joint_state_naming_a_joint_twice_is_ignored_naming_that_joint() -> None:
    rig = Rig()
    names = list(NAMES)
    names[5] = "panda_joint5"  # panda_joint5 twice (and panda_joint6 missing)
    names.append("panda_joint6")
    assert not rig.sup.on_joint_state(names, HOME + [0.0], 0.0)
    assert rig.sup.counts["bad_joint_state"] == 1
    assert rig.sup.reason == "joint state ignored: joint state names joint 'panda_joint5' twice"


def test_future_stamped_command_rejected_saying_how_far_ahead() -> None:
    rig = Rig()
    rig.tick()
    assert not rig.sup.on_command(NAMES, HOME, rig.now + 1.0, rig.now)
    assert rig.sup.counts["rejected_future_stamp"] == 1
    assert "command stamp is 1.000 s in the future (max_future_stamp_s 0.050)" in rig.sup.reason


def test_command_with_more_positions_than_names_is_rejected_for_its_size() -> None:
    rig = Rig()
    rig.tick()
    assert not rig.sup.on_command(NAMES[:7], HOME, rig.now, rig.now)  # 7 names, 8 positions
    assert rig.sup.counts["rejected_size"] == 1 and "7 joint names but 8 positions" in rig.sup.reason
    assert rig.sup.target is None


def test_joint_state_with_more_positions_than_names_is_ignored() -> None:
    rig = Rig()
    assert not rig.sup.on_joint_state(NAMES, HOME + [0.0], 0.0)
    assert rig.sup.counts["bad_joint_state"] == 1 and "8 names but 9 positions" in rig.sup.reason
    assert rig.sup.measured is None and rig.sup.state == WAITING


def test_joint_order_refuses_duplicate_joint_names() -> None:
    from omni_vla_safety.validation import JointOrder

    with pytest.raises(ValueError, match="duplicate joint names"):
        JointOrder(["a", "b", "a"])


def test_command_stamped_exactly_now_accepted_with_zero_future_tolerance() -> None:
    rig = Rig(max_future_stamp_s=0.0)
    rig.tick()
    assert rig.sup.on_command(NAMES, HOME, rig.now, rig.now)
    assert not rig.sup.on_command(NAMES, HOME, rig.now + 1e-6, rig.now)
    assert rig.sup.counts["rejected_future_stamp"] == 1


def test_whole_body_joint_state_with_hundreds_of_extra_joints_is_accepted() -> None:
    """Extra joints are ignored however many there are (lengths compared by value, not identity)."""
    rig = Rig()
    names = [f"body_joint{i}" for i in range(300)] + NAMES[::-1]
    assert rig.sup.on_joint_state(names, [0.0] * 300 + HOME[::-1], 0.0)
    assert rig.sup.measured == HOME and rig.sup.state == HOLD


# --- the clock going back (ROS time: a simulation reset, a bag replayed from its start) ---------------------------

def test_a_joint_state_received_after_now_is_not_fresh() -> None:
    """Its age is unknown once time went back: without this a reset an hour in would let the last joint state count
    as fresh for an hour."""
    rig = Rig()
    rig.tick()
    assert rig.sup.joint_state_fresh(rig.now)
    assert rig.sup.joint_state_fresh(rig.now - DT)  # the tick read its clock just before the callback stored it
    assert not rig.sup.joint_state_fresh(rig.now - DT - 1e-6)
    assert rig.sup.joint_state_fresh(rig.now + CONFIG.joint_state_timeout_s)


def test_when_time_goes_back_the_arm_stops_and_resumes_on_inputs_of_the_new_time() -> None:
    rig = Rig()
    rig.tick()
    target = moving(rig)
    rig.now -= 3600.0
    rig.tick(joint_states=False)
    assert rig.sup.state == WATCHDOG and rig.sup.reason.startswith("joint states stale (-3599.99")
    for _ in range(200):
        rig.tick(joint_states=False)
    assert rig.sup.limiter.stopped
    rig.tick()  # joint states flow again on the new time; the proposal was dropped by the stop
    assert rig.sup.state == WATCHDOG
    assert rig.command(target)
    rig.tick(5)
    assert rig.sup.state == ACTIVE and rig.speed(0) > 0.0


def test_a_followed_proposal_dated_ahead_of_now_beyond_the_future_tolerance_stops_the_arm() -> None:
    """The joint states keep coming on the new time, the proposal being followed is from before the jump."""
    rig = Rig()
    rig.tick()
    moving(rig)
    rig.now -= 10.0
    rig.tick()
    assert rig.sup.state == WATCHDOG and rig.sup.reason.startswith("proposals stopped (-")
    assert rig.sup.command_fresh(rig.sup.command_time - CONFIG.max_future_stamp_s - DT)
    assert not rig.sup.command_fresh(rig.sup.command_time - CONFIG.max_future_stamp_s - DT - 1e-6)
