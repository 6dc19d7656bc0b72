"""What the tracked rows must do where the mutation run over safety/trajectory.py and
CommandLimiter.track found no test (results/safety/mutation_trajectory.md). Fake clock, perfect robot."""
from __future__ import annotations

import pytest
from limits_yaml import limits_yaml
from test_supervisor_trajectory import DT, HOME, NAMES, Rig, joint0

from omni_vla_safety.limiter import CommandLimiter
from omni_vla_safety.limits import parse_joint_limits_yaml


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
