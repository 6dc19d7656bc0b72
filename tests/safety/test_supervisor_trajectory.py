"""Proposals as trajectories: rows with times, interpolated at the supervisor's rate and tracked, and
what the limiter still changes counted as routine shaping or real clamps. Fake clock, perfect robot.

Also what the tracked rows must do at each edge of safety/trajectory.py and CommandLimiter.track, and what
Supervisor.on_trajectory and validation.check_times accept and refuse.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from limits_yaml import limits_yaml

from omni_vla_safety.config import config_from_yaml
from omni_vla_safety.limiter import CommandLimiter
from omni_vla_safety.limits import load_limit_sets, parse_joint_limits_yaml, require_joints
from omni_vla_safety.supervisor import ESTOP, MAX_POINTS, Supervisor
from omni_vla_safety.validation import Rejection, check_times

REPO = Path(__file__).resolve().parents[2]
CONFIG = config_from_yaml(REPO / "config" / "safety_supervisor.yaml")
NAMES = list(CONFIG.joint_names)
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
DT = CONFIG.dt
ROW = 0.05  # vla_node's row period at 20 Hz


class Rig:
    """A supervisor, a robot that reaches each command, a fake clock starting off the tick grid."""

    def __init__(self, **overrides: object) -> None:
        config = CONFIG.model_copy(update=overrides) if overrides else CONFIG
        limits = require_joints(load_limit_sets(REPO / "config" / "joint_limits.yaml"), NAMES, "joint_limits")
        self.sup = Supervisor(config, limits)
        self.now = 0.0033
        self.robot = list(HOME)
        self.outputs: list[tuple[float, list[float]]] = []
        self.sup.on_joint_state(NAMES, self.robot, self.now)

    def propose(self, rows: list[tuple[float, list[float]]], stamp: float | None = None) -> bool:
        return self.sup.on_trajectory(NAMES, rows, stamp, self.now)

    def tick(self, n: int = 1) -> list[float]:
        out: list[float] = []
        for _ in range(n):
            self.now += DT
            self.sup.on_joint_state(NAMES, self.robot, self.now)
            out = list(self.sup.tick(self.now) or [])
            self.robot = out
            self.outputs.append((self.now, out))
        return out


def joint0(*values: float) -> list[list[float]]:
    """Rows (positions) that differ from HOME on joint 0 only."""
    rows = []
    for x in values:
        row = list(HOME)
        row[0] = x
        rows.append(row)
    return rows


def motion(t: float) -> list[float]:
    """A smooth reach on three joints and the gripper, well inside every limit (<= 0.4 rad/s)."""
    p = list(HOME)
    p[0] = 0.5 * math.sin(0.8 * t)
    p[1] = 0.3 * math.sin(1.3 * t)
    p[3] = -1.5 + 0.2 * math.sin(1.1 * t)
    p[7] = 0.02 + 0.015 * math.sin(2.0 * t)
    return p


def stream(rig: Rig, seconds: float, rows: int = 1) -> None:
    """vla_node's stream: every 50 ms a proposal stamped 1 ms before arrival, `rows` rows 50 ms apart."""
    for k in range(round(seconds / DT)):
        if k % 5 == 0:
            stamp = rig.now - 0.001
            assert rig.propose([(ROW * (j + 1), motion(stamp + ROW * (j + 1))) for j in range(rows)], stamp)
        rig.tick()


@pytest.mark.parametrize("rows", [1, 4])
def test_a_smooth_stream_of_rows_is_followed_without_shaping_or_clamps(rows: int) -> None:
    rig = Rig()
    stream(rig, 0.5, rows)  # start from rest onto a moving reference: a short catch-up
    rig.sup.shaping.clear()
    rig.sup.clamps.clear()
    stream(rig, 5.0, rows)
    assert not rig.sup.clamps and not rig.sup.shaping
    assert rig.sup.counts.keys() <= {"acceleration", "deceleration"}  # only from the start-up catch-up
    # On time, less the smoothing window's half (0.02 s at 5 samples of 10 ms): within 1 mrad of the rows.
    lag = max(abs(out[0] - motion(t - 0.02)[0]) for t, out in rig.outputs[-400:])
    assert lag < 1e-3


def test_rows_are_interpolated_linearly_at_the_supervisor_rate_and_reached_on_time() -> None:
    rig = Rig(trajectory_smoothing_s=0.0)
    start = rig.now
    a, b = list(HOME), list(HOME)
    a[0], b[0] = 0.001, 0.003  # 0.02 then 0.04 rad/s: each change within one period's acceleration
    assert rig.propose([(0.05, a), (0.10, b)], stamp=start)
    for _ in range(10):
        t, out = rig.now + DT, rig.tick()
        w = (t - start) / 0.05
        want = 0.001 * w if w <= 1.0 else 0.001 + 0.002 * (w - 1.0)
        assert out[0] == pytest.approx(want, abs=1e-9)
    assert not rig.sup.counts


def test_time_from_start_counts_from_arrival_when_the_stamp_is_zero() -> None:
    rig = Rig(trajectory_smoothing_s=0.0)
    row = list(HOME)
    row[0] = 0.002
    arrival = rig.now
    assert rig.propose([(0.05, row)], stamp=None)
    out = rig.tick()
    assert out[0] == pytest.approx(0.002 * (rig.now - arrival) / 0.05, abs=1e-12)


def test_a_new_proposal_keeps_earlier_rows_and_replaces_later_ones() -> None:
    rig = Rig(trajectory_smoothing_s=0.0, command_timeout_s=5.0)
    t0 = rig.now
    first, second, replaced, new = (list(HOME) for _ in range(4))
    first[0], second[0], replaced[0], new[0] = 0.01, 0.02, 0.5, 0.03
    assert rig.propose([(0.05, first), (0.10, second), (0.15, replaced)], stamp=t0)
    assert rig.propose([(0.15, new)], stamp=t0)  # from 0.15 s on: `replaced` is gone, `first`, `second` stay
    path = rig.sup.reference.path
    assert path is not None and [p[0] for _, p in path[1:]] == [0.01, 0.02, 0.03]
    assert rig.sup.target == new  # the rows end at the last one: what a watchdog-free stream comes to rest at
    rig.tick(40)
    assert rig.robot[0] == pytest.approx(0.03, abs=1e-9)
    assert max(out[0] for _, out in rig.outputs) < 0.03 + 1e-3  # the rows stop at once: braked, a little past


def test_rows_all_due_already_are_approached_like_a_single_target() -> None:
    rig = Rig(command_timeout_s=5.0)
    row = list(HOME)
    row[0] = 0.05
    assert rig.propose([(0.0, row)], stamp=rig.now - 0.01)
    assert not rig.sup.reference.active and rig.sup.target == row
    rig.tick(100)
    assert rig.robot[0] == pytest.approx(0.05, abs=1e-9)


@pytest.mark.parametrize("times, kind", [
    ([0.05, 0.05], "rejected_times"), ([0.10, 0.05], "rejected_times"), ([-0.01], "rejected_times"),
    ([math.nan], "rejected_times"), ([math.inf], "rejected_times"), ([], "rejected_no_points"),
    ([0.001 * (k + 1) for k in range(1001)], "rejected_size"),
])
def test_malformed_row_times_reject_the_whole_proposal_and_hold(times: list[float], kind: str) -> None:
    rig = Rig()
    assert rig.propose([(0.05, motion(0.05))], rig.now)
    assert not rig.propose([(t, list(HOME)) for t in times], rig.now)
    assert rig.sup.counts[kind] == 1 and rig.sup.target is None and not rig.sup.reference.active
    assert not rig.sup.clamps  # malformed input is refused, not clamped


def test_one_row_out_of_range_rejects_the_proposal_and_counts_a_clamp() -> None:
    rig = Rig()
    bad = list(HOME)
    bad[0] = 3.5
    assert not rig.propose([(0.05, list(HOME)), (0.10, bad)], rig.now)
    assert rig.sup.clamps == {"rejected_out_of_range": 1}


def test_a_row_beyond_the_range_within_tolerance_is_clamped_into_it_uncounted() -> None:
    rig = Rig(command_timeout_s=5.0)
    row = list(HOME)
    row[7] = -0.01  # a policy closing the gripper a little beyond closed
    assert rig.propose([(0.5, row)], rig.now)
    rig.tick(100)
    assert rig.robot[7] == pytest.approx(0.0, abs=1e-12)
    assert not rig.sup.clamps


def test_a_velocity_step_smoothed_within_tolerance_is_shaping() -> None:
    rig = Rig(trajectory_smoothing_s=0.0)
    row = list(HOME)
    row[1] = 0.02  # joint 2 asked for 0.4 rad/s at once: 5 periods of its 7.1 rad/s^2, a few mrad of lag
    assert rig.propose([(0.05, row)], rig.now)
    rig.tick(30)
    assert rig.sup.shaping["acceleration"] >= 1 and not rig.sup.clamps
    assert rig.robot[1] == pytest.approx(0.02, abs=1e-9)


def test_a_jump_the_joint_cannot_follow_is_a_clamp() -> None:
    rig = Rig()
    row = list(HOME)
    row[1] = 0.2  # 4 rad/s asked of joint 2 (limit 2.1): seconds behind, far beyond the tolerance
    assert rig.propose([(0.05, row)], rig.now)
    rig.tick(60)
    assert rig.sup.clamps["velocity"] + rig.sup.clamps["acceleration"] > 0


def test_a_command_held_away_from_a_blocked_joint_is_a_max_step_clamp() -> None:
    rig = Rig()
    row = list(HOME)
    row[7] = 0.0  # the gripper closes on an object: the fingers stay at 0.02
    assert rig.propose([(0.05, row)], rig.now)
    for _ in range(30):
        rig.tick()
        rig.robot[7] = 0.02
    assert rig.sup.clamps["max_step"] > 0


def test_the_stream_ending_at_speed_stops_at_the_last_row_and_holds() -> None:
    rig = Rig()
    stream(rig, 1.0)
    last = rig.sup.target
    assert last is not None
    rig.tick(80)  # no more proposals, yet within command_timeout_s? no: the watchdog stops it
    assert rig.sup.state == "watchdog_stop"
    rig2 = Rig(command_timeout_s=5.0)
    stream(rig2, 1.0)
    final = list(rig2.sup.target or [])
    rig2.tick(100)
    assert rig2.robot == pytest.approx(final, abs=1e-9)
    speeds = [abs(b[1][0] - a[1][0]) / DT for a, b in zip(rig2.outputs[-20:], rig2.outputs[-19:])]
    assert max(speeds) == 0.0


@pytest.mark.parametrize("tight, kind", [(1, "clamps"), (0, "shaping")])
def test_a_per_joint_shaping_tolerance_is_the_joints_own(tight: int, kind: str) -> None:
    tolerance = [0.01] * len(NAMES)
    tolerance[tight] = 0.0  # joint `tight` counts every limit as a clamp; the others as before
    rig = Rig(trajectory_smoothing_s=0.0, shaping_tolerance=tolerance)
    row = list(HOME)
    row[1] = 0.02  # joint 2 asked for 0.4 rad/s at once: a few periods of acceleration limit
    assert rig.propose([(0.05, row)], rig.now)
    rig.tick(30)
    counted = {"clamps": rig.sup.clamps, "shaping": rig.sup.shaping}
    assert counted[kind]["acceleration"] >= 1
    assert not counted["shaping" if kind == "clamps" else "clamps"]


def test_every_limiter_intervention_is_counted_once_as_shaping_or_as_a_clamp() -> None:
    rig = Rig()
    row = list(HOME)
    row[1], row[7] = 0.2, 0.0  # a jump joint 2 cannot follow, and a gripper held open on an object
    assert rig.propose([(0.05, row)], rig.now)
    for _ in range(40):
        rig.tick()
        rig.robot[7] = 0.02
    kinds = set(rig.sup.shaping) | set(rig.sup.clamps)
    assert {"velocity", "acceleration", "max_step"} <= kinds
    assert all(rig.sup.shaping[k] + rig.sup.clamps[k] == rig.sup.counts[k] for k in kinds)


@pytest.mark.parametrize("requested, applied, shaping", [
    (3.0, 2.0, True),  # 1 rad/s for one period: exactly the 0.01 rad tolerance, still shaping
    (3.0, 1.5, False),
    (0.0, 2.0, False),  # a stop asked at once and braked: 0.02 rad beyond, a clamp
    (-1.0, 1.5, False),
])
def test_a_limit_is_shaping_while_the_command_stays_within_tolerance_of_what_was_asked(
        requested: float, applied: float, shaping: bool) -> None:
    sup = Rig().sup
    assert sup.classify(("deceleration", 1, 7.125, requested, applied)) is shaping
    assert sup.classify(("max_step", 1, 0.25, requested, requested)) is False  # never shaping, however small


def test_a_tick_stamped_before_the_proposal_arrived_holds_the_start_instead_of_moving_to_the_rows() -> None:
    rig = Rig(trajectory_smoothing_s=0.0)
    (row,) = joint0(0.004)
    assert rig.propose([(0.05, row)], stamp=rig.now)
    out = rig.sup.tick(rig.now - 0.5 * DT)  # the clock stepped back half a period (a sim clock reset)
    assert out == pytest.approx(HOME, abs=1e-12)


def test_a_proposal_replacing_the_next_row_mid_segment_is_followed_on_from_where_the_reference_is() -> None:
    rig = Rig(trajectory_smoothing_s=0.0)
    t0 = rig.now
    a, b, c = joint0(0.0004, 0.0012, 0.0014)
    assert rig.propose([(0.02, a), (0.06, b)], stamp=t0)
    rig.tick(3)  # between a and b: the reference at 0.0006, moving at 0.02 rad/s
    assert rig.robot[0] == pytest.approx(0.0006, abs=1e-9)
    assert rig.propose([(0.05, c)], stamp=t0)  # replaces b: from 0.0006 now to 0.0014 at t0 + 0.05
    for want in (0.0010, 0.0014, 0.0014):
        assert rig.tick()[0] == pytest.approx(want, abs=1e-9)


def test_old_rows_from_a_new_proposals_first_row_on_are_dropped_even_before_its_last_row() -> None:
    rig = Rig(trajectory_smoothing_s=0.0, command_timeout_s=5.0)
    t0 = rig.now
    first, second, replaced, x, y = joint0(0.001, 0.002, 0.5, 0.003, 0.005)
    assert rig.propose([(0.05, first), (0.10, second), (0.15, replaced)], stamp=t0)
    assert rig.propose([(0.10, x), (0.20, y)], stamp=t0)  # `second` and `replaced` lie in its span: gone
    for k in range(1, 26):
        t = 0.01 * k
        want = 0.001 * t / 0.05 if t <= 0.05 else (0.001 + 0.002 * (t - 0.05) / 0.05 if t <= 0.10
                                                    else min(0.003 + 0.002 * (t - 0.10) / 0.10, 0.005))
        assert rig.tick()[0] == pytest.approx(want, abs=1e-9), t
    assert not rig.sup.counts


def test_a_proposal_of_hundreds_of_rows_is_held_at_its_last_row_once_past_it() -> None:
    rig = Rig(trajectory_smoothing_s=0.0, command_timeout_s=5.0)
    rows = joint0(*(0.00002 * (k + 1) for k in range(300)))  # 300 rows 1 ms apart: 0.02 rad/s for 0.3 s
    assert rig.propose([(0.001 * (k + 1), row) for k, row in enumerate(rows)], stamp=rig.now)
    rig.tick(40)
    assert rig.robot == pytest.approx(rows[-1], abs=1e-9)


def test_a_proposal_arriving_exactly_when_a_row_falls_due_is_followed_on_from_that_row() -> None:
    rig = Rig(trajectory_smoothing_s=0.0, command_timeout_s=5.0)
    t0 = rig.now
    a, b, c = joint0(0.001, 0.5, 0.002)
    assert rig.propose([(0.05, a), (0.10, b)], stamp=t0)
    rig.tick(4)
    rig.now = t0 + 0.05  # a sim clock: the very time `a` falls due (the supervisor's own sum)
    rig.sup.on_joint_state(NAMES, rig.robot, rig.now)
    assert rig.propose([(0.10, c)], stamp=t0)  # replaces b
    assert rig.sup.tick(rig.now)[0] == pytest.approx(0.001, abs=1e-9)  # the tick at that same instant
    assert rig.sup.tick(t0 + 0.075)[0] == pytest.approx(0.0015, abs=1e-9)


def test_a_lag_behind_a_moving_reference_is_caught_up_without_passing_it() -> None:
    rig = Rig(trajectory_smoothing_s=0.0, command_timeout_s=5.0)
    t0 = rig.now
    row = list(HOME)
    row[1] = 0.6  # joint 2 asked for 1 rad/s at once: 0.14 s of its 7.1 rad/s^2, a lag of tens of mrad
    assert rig.propose([(0.6, row)], stamp=t0)
    rig.tick(59)
    lags = [(t - t0) - out[1] for t, out in rig.outputs]
    assert max(lags) > 0.05
    assert abs(lags[-1]) < 1e-9  # caught up before the last row
    assert min(lags) > -1e-9  # never ahead of the reference


def test_a_lead_past_a_stopped_reference_is_given_back_without_passing_it_the_other_way() -> None:
    rig = Rig(trajectory_smoothing_s=0.0, command_timeout_s=5.0)
    row = list(HOME)
    row[1] = 0.15  # 0.3 rad/s for 0.5 s, then at rest: the command brakes a few mrad past the row and comes back
    assert rig.propose([(0.5, row)], stamp=rig.now)
    rig.tick(100)
    positions = [out[1] for _, out in rig.outputs]
    peak = positions.index(max(positions))
    assert max(positions) > 0.15 + 1e-3
    assert min(positions[peak:]) > 0.15 - 1e-12
    assert positions[-1] == pytest.approx(0.15, abs=1e-12)


# dt 0.5 s and 2 rad/s^2 make the braking curve exact in floating point: B(6) = 4, and one period of
# acceleration or deceleration changes the speed by exactly 1.
TIE = parse_joint_limits_yaml(limits_yaml(j=dict(min_position=-100.0, max_position=100.0, max_velocity=10.0,
                                                 max_acceleration=2.0, max_deceleration=2.0)))["j"]


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("speed", [pytest.param(5, id="from_5_the_deceleration_edge"),
                                   pytest.param(3, id="from_3_the_acceleration_edge")])
def test_braking_onto_a_stopped_reference_exactly_at_a_rate_limits_edge_is_the_approach_not_an_intervention(
        speed: int, sign: float) -> None:
    lim = CommandLimiter(["j"], [TIE], 0.5)
    lim.reset([0.0])
    for _ in range(speed):
        lim.track([sign * 100.0], [0.0], None)  # speeding up: 1, 2, ... rad/s
    assert lim.v == [sign * speed] and lim.q == [sign * 0.25 * speed * (speed + 1)]
    # At rest 6 ahead: the approach asks 4 rad/s, one period's acceleration or deceleration from `speed`.
    lim.track([sign * (0.25 * speed * (speed + 1) + 6.0)], [0.0], None)
    assert lim.v == [sign * 4.0]
    assert lim.interventions == []


def test_rows_are_followed_trajectory_delay_s_after_their_times() -> None:
    rig = Rig(trajectory_smoothing_s=0.0, trajectory_delay_s=0.1, command_timeout_s=5.0)
    start = rig.now
    (row,) = joint0(0.0015)  # due at start + 0.05 + 0.1: 0.01 rad/s from HOME
    assert rig.propose([(0.05, row)], stamp=start)
    for _ in range(20):
        t, out = rig.now + DT, rig.tick()
        assert out[0] == pytest.approx(0.0015 * min((t - start) / 0.15, 1.0), abs=1e-9), t - start
    assert not rig.sup.counts


def test_rows_all_due_already_are_approached_at_the_last_row_not_the_first() -> None:
    rig = Rig(command_timeout_s=5.0)
    first, last = joint0(0.5, 0.05)
    assert rig.propose([(0.0, first), (0.005, last)], stamp=rig.now - 0.01)  # both due before arrival
    assert rig.sup.target == last
    rig.tick(100)
    assert rig.robot[0] == pytest.approx(0.05, abs=1e-9)
    assert max(out[0] for _, out in rig.outputs) < 0.05 + 1e-3  # never headed for the first row


def test_a_single_row_due_the_instant_it_arrives_is_approached_like_a_command() -> None:
    trajectory, command = Rig(command_timeout_s=5.0), Rig(command_timeout_s=5.0)
    (row,) = joint0(0.05)
    assert trajectory.propose([(0.0, row)], stamp=None)  # time_from_start 0 after arrival, no delay: due now
    assert command.sup.on_command(NAMES, row, None, command.now)
    for _ in range(30):  # the same approach over target_horizon_s, not a reference that jumped to the row
        assert trajectory.tick() == pytest.approx(command.tick(), abs=1e-9)
    assert not trajectory.sup.reference.active


def test_a_trajectory_during_an_estop_is_refused_and_the_robot_stays_stopped() -> None:
    rig = Rig(command_timeout_s=5.0)
    rig.sup.on_estop(True, rig.now)
    (row,) = joint0(0.05)
    assert not rig.propose([(0.05, row), (0.10, row)], stamp=rig.now)
    assert rig.sup.counts["ignored_estop"] == 1 and rig.sup.target is None
    rig.tick(20)
    assert rig.sup.state == ESTOP and rig.robot == pytest.approx(HOME, abs=1e-12)


def test_a_trajectory_of_exactly_max_points_rows_is_accepted() -> None:
    rig = Rig(command_timeout_s=5.0)
    rows = joint0(*(0.00001 * (k + 1) for k in range(MAX_POINTS)))
    assert rig.propose([(0.001 * (k + 1), row) for k, row in enumerate(rows)], stamp=rig.now)
    assert not rig.sup.counts and rig.sup.reference.active


@pytest.mark.parametrize("first, accepted", [(MAX_POINTS - 600, True), (MAX_POINTS - 600 + 1, False)])
def test_proposals_that_only_append_are_refused_once_the_buffer_would_pass_max_points(first: int,
                                                                                       accepted: bool) -> None:
    """600 rows buffered, then rows after them: up to MAX_POINTS rows in all are kept, one more is refused and held."""
    rig = Rig(command_timeout_s=5.0)
    assert rig.propose([(0.01 * (k + 1), row) for k, row in enumerate(joint0(*[0.001] * 600))], stamp=rig.now)
    rows = joint0(*[0.002] * first)
    assert rig.propose([(7.0 + 0.01 * k, row) for k, row in enumerate(rows)], stamp=rig.now) is accepted
    if accepted:
        assert not rig.sup.counts and len(rig.sup.reference.path) == 1 + MAX_POINTS
    else:
        assert rig.sup.counts == {"rejected_size": 1} and rig.sup.target is None and not rig.sup.reference.active
        assert f"leave {600 + first} rows buffered" in rig.sup.reason


def test_rows_already_passed_do_not_count_and_a_row_at_the_new_first_rows_time_is_replaced_not_kept() -> None:
    """600 rows over 6 s, 3 s later about half are ahead. Rows appended from the last row's time on: the rows still
    ahead but the last (replaced by the new first row) + the new rows may make 1000, not one more."""
    times = [0.01 * (k + 1) for k in range(600)]
    for surplus, accepted in ((0, True), (1, False)):
        rig = Rig(command_timeout_s=5.0)
        stamp = rig.now
        assert rig.propose(list(zip(times, joint0(*[0.001] * 600))), stamp=stamp)
        rig.tick(300)
        base = stamp + CONFIG.trajectory_delay_s
        ahead = sum(1 for t in times[:-1] if base + t > rig.now)  # the last one is replaced
        assert 250 < ahead < 320  # about half
        new = [times[-1] + 0.01 * j for j in range(MAX_POINTS - ahead + surplus)]
        assert rig.propose(list(zip(new, joint0(*[0.002] * len(new)))), stamp=stamp) is accepted


def test_rows_already_passed_or_replaced_do_not_count_toward_the_buffer() -> None:
    """A proposal every 50 ms whose rows replace the buffered ones (vla_node's pattern) is never refused."""
    rig = Rig(command_timeout_s=5.0)
    for k in range(100):
        rows = joint0(*[0.0001 * k] * (MAX_POINTS - 100))
        assert rig.propose([(0.001 * (j + 1), row) for j, row in enumerate(rows)], stamp=rig.now)
        rig.tick(5)
    assert not [kind for kind in rig.sup.counts if kind.startswith("rejected")]
    assert len(rig.sup.reference.path) <= MAX_POINTS + 1


@pytest.mark.parametrize("times, previous", [([0.10, 0.05], "(0.1)"), ([-0.01], "(none)")])
def test_a_bad_row_time_is_refused_naming_the_previous_rows_time(times: list[float], previous: str) -> None:
    with pytest.raises(Rejection, match=re.escape(f"the previous point's {previous}")):
        check_times(times, MAX_POINTS)
