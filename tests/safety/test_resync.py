"""The operator's re-sync (`Supervisor.resync_command`), without ROS, on a fake clock.

After a stop the command stays where the stop ended; a re-sync moves it to the measured pose. Pinned here: when
it is refused (following proposals, still moving, no fresh or a refused joint state, a pose out of range), and
that an accepted one brings the command to the measured pose with every step inside the limits. The limits are
checked by the independent oracle (tests/safety/safety_oracle.py, its own reading of the limits, kinematics
recomputed from the published positions), told that motion is allowed exactly while the test expects the re-sync
to move; convergence and no overshoot are measured here from the outputs.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pytest
from safety_fuzz import Rig, Robot
from safety_robots import described, panda

from omni_vla_safety.config import SupervisorConfig, config_from_yaml
from omni_vla_safety.supervisor import ACTIVE, ESTOP, HOLD, RESYNC, WATCHDOG

REPO = Path(__file__).resolve().parents[2]
PANDA_PARAMS = REPO / "config" / "safety_supervisor.yaml"
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
MOVED = [0.6, -0.4, 0.3, -2.1, 0.5, 1.2, -0.7, 0.035]  # where a scene reset put the arm (far beyond max_step)
AT = 1e-6  # "at the measured pose" for this test


class ResyncRig(Rig):
    """The fuzzing rig with a robot that can be frozen (a paused sim: it ignores commands) and moved by hand."""

    def __init__(self, robot: Robot, config: SupervisorConfig, start: Sequence[float]) -> None:
        super().__init__(robot, config, start)
        self.follow = True
        self.outputs: list[list[float]] = []

    def step(self, n: int = 1, joint_states: bool = True, allowed: Sequence[float] | None = None) -> None:
        """n ticks; `allowed`: the oracle is told a valid command to this pose arrived (motion is allowed)."""
        for _ in range(n):
            self.now += self.config.dt
            if joint_states:
                self.joint_state()
            if allowed is not None:
                self.oracle.command(self.robot.names, list(allowed), None, self.now)
            out = self.sup.tick(self.now)
            self.oracle.output(out, self.now)
            if out is not None:
                self.outputs.append(list(out))
                if self.follow:
                    self.measured = list(out)

    def resync(self) -> tuple[bool, str]:
        return self.sup.resync_command(self.now)

    def clean(self) -> None:
        assert not self.oracle.violations, self.oracle.violations[:5]


def panda_rig(rate_hz: float = 100.0) -> ResyncRig:
    config = config_from_yaml(PANDA_PARAMS)
    if rate_hz != config.rate_hz:
        config = config.model_copy(update={"rate_hz": rate_hz})
    rig = ResyncRig(panda(), config, HOME)
    rig.step(3)
    return rig


def stopped_and_moved(rig: ResyncRig, pose: Sequence[float]) -> None:
    """E-stop, wait until stopped, freeze the robot and put it at `pose`, release and reset: the command is stale."""
    rig.estop(True)
    rig.step(200)
    rig.follow = False
    rig.measured = list(pose)
    rig.step(5)
    rig.estop(False)
    rig.reset_estop()
    assert rig.sup.state == HOLD and not rig.sup.estop_latched


def follow_resync(rig: ResyncRig, pose: Sequence[float], max_ticks: int) -> int:
    """Tick until the command is at `pose`; on every joint, at every rate, the distance to it never grows nor
    changes sign (no overshoot)."""
    start = len(rig.outputs)
    for k in range(max_ticks):
        rig.step(allowed=pose)
        out = rig.outputs[-1]
        if max(abs(o - p) for o, p in zip(out, pose)) <= AT and rig.sup.state == HOLD:
            break
    else:
        raise AssertionError(f"not at the measured pose after {max_ticks} ticks: {rig.outputs[-1]} vs {pose}")
    path = rig.outputs[start - 1:]
    for i, p in enumerate(pose):
        gaps = [q[i] - p for q in path]
        assert all(abs(b) <= abs(a) + 1e-12 for a, b in zip(gaps, gaps[1:])), f"joint {i} moved away from the pose"
        assert all(a * b >= 0 or abs(b) <= AT for a, b in zip(gaps, gaps[1:])), f"joint {i} overshot the pose"
    return k + 1


# ---- refused ------------------------------------------------------------------------------------------------

def test_refused_before_any_joint_state() -> None:
    rig = ResyncRig(panda(), config_from_yaml(PANDA_PARAMS), HOME)
    ok, message = rig.resync()
    assert not ok and "no joint state" in message


def test_refused_while_following_proposals() -> None:
    rig = panda_rig()
    target = list(HOME)
    target[0] = 1.0
    for k in range(30):
        if k % 5 == 0:
            rig.command(target)
        rig.step()
    assert rig.sup.state == ACTIVE
    ok, message = rig.resync()
    assert not ok and "following proposals" in message
    assert rig.sup.resync is None and rig.sup.state == ACTIVE
    rig.clean()


def test_refused_while_the_command_still_moves() -> None:
    rig = panda_rig()
    target = list(HOME)
    target[0] = 2.0
    for k in range(40):
        if k % 5 == 0:
            rig.command(target)
        rig.step()
    rig.estop(True)
    rig.step()
    assert rig.sup.state == ESTOP and not rig.sup.limiter.stopped
    ok, message = rig.resync()
    assert not ok and "still moving" in message and rig.sup.resync is None
    rig.step(200)
    assert rig.resync()[0]  # once stopped the same request is accepted
    rig.clean()


def test_refused_with_a_stale_joint_state() -> None:
    rig = panda_rig()
    stopped_and_moved(rig, MOVED)
    rig.step(math.ceil(rig.config.joint_state_timeout_s / rig.config.dt) + 1, joint_states=False)
    assert rig.sup.state == WATCHDOG
    ok, message = rig.resync()
    assert not ok and "no fresh joint state" in message and rig.sup.resync is None
    rig.step()  # a fresh one again
    assert rig.resync()[0]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_refused_when_the_latest_joint_state_is_not_finite(bad: float) -> None:
    rig = panda_rig()
    stopped_and_moved(rig, MOVED)
    broken = list(MOVED)
    broken[3] = bad
    rig.joint_state(positions=broken)  # the good one before it is still fresh: it must not be used
    assert rig.sup.joint_state_fresh(rig.now)
    ok, message = rig.resync()
    assert not ok and "latest joint state was refused" in message and rig.sup.resync is None
    rig.joint_state()
    assert rig.resync()[0]


def test_refused_when_the_measured_pose_is_out_of_range_naming_the_joint() -> None:
    rig = panda_rig()
    outside = list(MOVED)
    outside[1] = 1.7628 + 0.05 + 0.01  # beyond the range plus out_of_range_tolerance
    stopped_and_moved(rig, outside)
    ok, message = rig.resync()
    assert not ok and "panda_joint2" in message and rig.sup.resync is None
    rig.step(20)
    assert rig.outputs[-1] == rig.outputs[-20]  # nothing moved


def test_refused_below_the_range_too_and_accepted_on_either_bound_as_a_proposal_would_be() -> None:
    rig = panda_rig()
    below = list(MOVED)
    below[4] = -2.8973 - 0.05 - 0.01
    stopped_and_moved(rig, below)
    ok, message = rig.resync()
    assert not ok and "panda_joint5" in message
    for bound in (rig.sup.accept_lo, rig.sup.accept_hi):  # inclusive, as check_range is for proposals
        rig.measured = list(MOVED)
        rig.measured[4] = bound[4]
        rig.joint_state()
        assert rig.resync()[0], bound[4]


def test_a_pose_exactly_the_tolerance_away_is_kept() -> None:
    from omni_vla_safety.supervisor import RESYNC_TOLERANCE

    rig = panda_rig()
    rig.follow = False
    assert rig.outputs[-1][0] == 0.0
    rig.measured = list(rig.outputs[-1])
    rig.measured[0] = RESYNC_TOLERANCE
    rig.step()
    ok, message = rig.resync()
    assert ok and "already at the measured pose" in message and rig.sup.resync is None


# ---- accepted -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate_hz", [100.0, 1000.0])
def test_accepted_when_stopped_and_the_command_reaches_the_measured_pose_within_the_limits(rate_hz: float) -> None:
    rig = panda_rig(rate_hz)
    stopped_and_moved(rig, MOVED)
    before = list(rig.outputs[-1])
    assert max(abs(a - b) for a, b in zip(before, MOVED)) > 0.25
    ok, message = rig.resync()
    assert ok and "accepted" in message, message
    ticks = follow_resync(rig, MOVED, max_ticks=round(5 * rate_hz))
    assert ticks > 10  # a move, not a jump
    assert rig.sup.state == HOLD and rig.sup.counts["resync"] == 1 and rig.sup.counts["resync_done"] == 1
    rig.step(round(0.5 * rate_hz))  # then it holds there
    assert max(abs(o - p) for o, p in zip(rig.outputs[-1], MOVED)) <= AT
    rig.clean()


def test_accepted_after_a_watchdog_stop_without_an_estop() -> None:
    rig = panda_rig()
    target = list(HOME)
    target[2] = 0.8
    for k in range(30):
        if k % 5 == 0:
            rig.command(target)
        rig.step()
    rig.step(100)  # proposals stopped: the command watchdog stops the arm
    assert rig.sup.state == WATCHDOG and rig.sup.limiter.stopped
    rig.follow = False
    rig.measured = list(MOVED)
    rig.step()
    assert rig.resync()[0]
    follow_resync(rig, MOVED, max_ticks=500)
    rig.clean()


def test_under_a_latched_estop_it_waits_for_the_reset_then_moves() -> None:
    rig = panda_rig()
    rig.estop(True)
    rig.step(50)
    rig.follow = False
    rig.measured = list(MOVED)
    rig.step()
    ok, message = rig.resync()
    assert ok and "once the e-stop is reset" in message
    held = list(rig.outputs[-1])
    rig.step(50, allowed=MOVED)  # the oracle ignores commands while latched: any motion is a violation
    assert rig.outputs[-1] == held and rig.sup.state == ESTOP
    rig.estop(False)
    rig.reset_estop()
    follow_resync(rig, MOVED, max_ticks=500)
    rig.clean()


def test_a_pose_already_at_the_command_is_kept_without_motion() -> None:
    rig = panda_rig()
    rig.estop(True)
    rig.step(50)
    rig.follow = False
    rig.measured = [q + 0.5 * AT for q in rig.outputs[-1]]
    rig.step()
    held = list(rig.outputs[-1])
    ok, message = rig.resync()
    assert ok and "already at the measured pose" in message and rig.sup.resync is None
    rig.estop(False)
    rig.reset_estop()
    rig.step(10)
    assert rig.outputs[-1] == held and rig.sup.state == HOLD and "resync" not in rig.sup.counts


def test_a_pose_just_outside_the_range_within_the_tolerance_is_clamped_into_it() -> None:
    rig = panda_rig()
    pose = list(MOVED)
    pose[7] = -0.01  # the gripper a centimetre past closed: within its 2 cm tolerance
    stopped_and_moved(rig, pose)
    assert rig.resync()[0]
    follow_resync(rig, pose[:7] + [0.0], max_ticks=500)
    rig.clean()


# ---- ended ----------------------------------------------------------------------------------------------------

def test_an_estop_during_the_resync_stops_it_and_ends_it() -> None:
    rig = panda_rig()
    stopped_and_moved(rig, MOVED)
    assert rig.resync()[0]
    rig.step(15, allowed=MOVED)
    assert rig.sup.state == RESYNC and not rig.sup.limiter.stopped
    rig.estop(True)
    rig.step(200)
    stopped_at = list(rig.outputs[-1])
    assert rig.sup.limiter.stopped and rig.sup.resync is None
    rig.estop(False)
    rig.reset_estop()
    rig.step(20)
    assert rig.outputs[-1] == stopped_at and rig.sup.state == HOLD  # it does not resume by itself
    rig.clean()


def test_stale_joint_states_during_the_resync_stop_it_and_end_it() -> None:
    rig = panda_rig()
    stopped_and_moved(rig, MOVED)
    assert rig.resync()[0]
    rig.step(15, allowed=MOVED)
    rig.step(200, joint_states=False)
    assert rig.sup.state == WATCHDOG and rig.sup.resync is None
    stopped_at = list(rig.outputs[-1])
    rig.step(20)
    assert rig.outputs[-1] == stopped_at and rig.sup.state == WATCHDOG
    rig.clean()


def test_a_new_proposal_takes_over_from_the_resync() -> None:
    rig = panda_rig()
    stopped_and_moved(rig, MOVED)
    assert rig.resync()[0]
    rig.step(15, allowed=MOVED)
    rig.follow = True
    rig.command(MOVED)
    assert rig.sup.resync is None
    rig.step()
    assert rig.sup.state == ACTIVE
    rig.clean()


def test_a_rejected_proposal_ends_the_resync() -> None:
    rig = panda_rig()
    stopped_and_moved(rig, MOVED)
    assert rig.resync()[0]
    rig.step(5, allowed=MOVED)
    rig.command([math.nan] * 8)
    assert rig.sup.resync is None
    rig.step(200)
    assert rig.sup.state == HOLD and rig.sup.limiter.stopped
    assert max(abs(o - p) for o, p in zip(rig.outputs[-1], MOVED)) > 0.1
    rig.clean()


def test_a_non_panda_robot_resyncs_within_its_own_limits(tmp_path: Path) -> None:
    robot = described("ur5e", tmp_path)
    config = SupervisorConfig(joint_names=robot.names)
    start = [0.5 * (j.lo + j.hi) for j in robot.oracle_joints]
    rig = ResyncRig(robot, config, start)
    rig.step(3)
    pose = [s + (0.6 if i % 2 else -0.6) for i, s in enumerate(start)]
    stopped_and_moved(rig, pose)
    assert rig.resync()[0]
    follow_resync(rig, pose, max_ticks=1000)
    rig.clean()
