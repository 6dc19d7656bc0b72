"""What Supervisor.on_trajectory must do where the mutation run over it and validation.check_times
found no test (results/safety/mutation_trajectory.md). Fake clock, perfect robot."""
from __future__ import annotations

import re

import pytest
from test_supervisor_trajectory import DT, HOME, NAMES, Rig, joint0

from omni_vla_safety.supervisor import ESTOP, MAX_POINTS
from omni_vla_safety.validation import Rejection, check_times


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


@pytest.mark.parametrize("times, previous", [([0.10, 0.05], "(0.1)"), ([-0.01], "(none)")])
def test_a_bad_row_time_is_refused_naming_the_previous_rows_time(times: list[float], previous: str) -> None:
    with pytest.raises(Rejection, match=re.escape(f"the previous point's {previous}")):
        check_times(times, MAX_POINTS)
