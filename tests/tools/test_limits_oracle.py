"""The limits oracle (omni_vla/tools/limits_oracle.py) at its edges: the boundaries of the position range
and of the velocity step, what is counted (commands, not joints), the degenerate inputs (no command, one command),
the rounding of the reported fraction and which joint entries count as limited. Two made-up joints at 10 Hz, so
every limit is a round number: a in [-1, 1] at 2 rad/s (0.2 per command), b in [-0.5, 0.5] at 1 rad/s (0.1)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from omni_vla.tools.limits_oracle import check_commands, read_limits

RATE = 10.0
LIMITS = """joint_limits:
  a: {has_position_limits: true, min_position: -1.0, max_position: 1.0, has_velocity_limits: true, max_velocity: 2.0}
  b: {has_position_limits: true, min_position: -0.5, max_position: 0.5, has_velocity_limits: true, max_velocity: 1.0}
"""
NOTHING = {"commands": 0, "outside_position_limits": 0, "over_velocity_steps": 0, "max_step_fraction": 0.0}


@pytest.fixture()
def limits(tmp_path: Path) -> dict[str, np.ndarray]:
    (tmp_path / "limits.yaml").write_text(LIMITS)
    return read_limits(tmp_path / "limits.yaml", ["a", "b"])


def test_limits_are_returned_in_the_order_asked_for_not_the_files(tmp_path: Path) -> None:
    (tmp_path / "limits.yaml").write_text(LIMITS)
    got = read_limits(tmp_path / "limits.yaml", ["b", "a"])
    assert {k: v.tolist() for k, v in got.items()} == {"lower": [-0.5, -1.0], "upper": [0.5, 1.0],
                                                        "velocity": [1.0, 2.0]}


@pytest.mark.parametrize("entry", [
    "  a: {has_position_limits: false, min_position: -1, max_position: 1, has_velocity_limits: true, max_velocity: 2}",
    "  a: {min_position: -1, max_position: 1, has_velocity_limits: true, max_velocity: 2}",
    "  a: {}",
    "  other: {has_position_limits: true, min_position: -1, max_position: 1, has_velocity_limits: true, "
    "max_velocity: 2}",
])
def test_a_joint_without_position_limits_or_missing_from_the_file_is_an_error(tmp_path: Path, entry: str) -> None:
    (tmp_path / "l.yaml").write_text(f"joint_limits:\n{entry}\n")
    with pytest.raises(ValueError, match="joint 'a' has no position or velocity limits"):
        read_limits(tmp_path / "l.yaml", ["a"])


@pytest.mark.parametrize("text", ["", "other: 1\n"])
def test_a_file_without_a_joint_limits_table_is_an_error_naming_the_joint(tmp_path: Path, text: str) -> None:
    (tmp_path / "l.yaml").write_text(text)
    with pytest.raises(ValueError, match="joint 'a' has no position or velocity limits"):
        read_limits(tmp_path / "l.yaml", ["a"])


def test_a_command_at_either_limit_or_within_the_tolerance_of_it_is_inside(limits: dict[str, np.ndarray]) -> None:
    rows = np.stack([limits["lower"], limits["upper"], limits["lower"] - 1e-9, limits["upper"] + 1e-9])
    assert check_commands(rows, limits, RATE)["outside_position_limits"] == 0


@pytest.mark.parametrize("row, outside", [([-1.001, 0.0], 1), ([0.0, -0.501], 1), ([1.001, 0.0], 1),
                                          ([0.0, 0.501], 1), ([0.0, 0.0], 0)])
def test_a_command_past_either_limit_of_any_joint_is_outside(limits: dict[str, np.ndarray], row: list[float],
                                                             outside: int) -> None:
    assert check_commands(np.array([row]), limits, RATE)["outside_position_limits"] == outside


def test_commands_are_counted_not_joints(limits: dict[str, np.ndarray]) -> None:
    # positions: one command with both joints out, then two with joint a out (2 joints, 3 commands outside);
    # steps: b over on all four, a also on the third (2 joints, 4 steps over)
    rows = np.array([[1.5, 0.7], [1.4, 0.0], [1.3, 0.3], [0.0, 0.0], [0.1, -0.2]])
    got = check_commands(rows, limits, RATE)
    assert (got["outside_position_limits"], got["over_velocity_steps"]) == (3, 4)


def test_a_step_half_again_over_the_velocity_limit_is_counted(limits: dict[str, np.ndarray]) -> None:
    got = check_commands(np.array([[0.0, 0.0], [0.3, 0.0]]), limits, RATE)  # 0.3 where 0.2 is allowed
    assert got["over_velocity_steps"] == 1 and got["max_step_fraction"] == pytest.approx(1.5)


def test_a_single_command_is_checked_for_its_position_and_has_no_step(limits: dict[str, np.ndarray]) -> None:
    assert check_commands(np.array([[1.5, 0.0]]), limits, RATE) == {
        "commands": 1, "outside_position_limits": 1, "over_velocity_steps": 0, "max_step_fraction": 0.0}


@pytest.mark.parametrize("commands", [np.empty((0, 2)), np.empty((0,)), np.array([]).reshape(-1, 2)])
def test_no_commands_report_zero_of_everything(limits: dict[str, np.ndarray], commands: np.ndarray) -> None:
    assert check_commands(commands, limits, RATE) == NOTHING


def test_the_largest_step_fraction_is_reported_to_four_decimals(limits: dict[str, np.ndarray]) -> None:
    got = check_commands(np.array([[0.0, 0.0], [0.0246912, 0.0]]), limits, RATE)  # 0.0246912 / 0.2 = 0.123456
    assert got["max_step_fraction"] == 0.1235


def test_a_step_within_the_one_in_a_million_slack_over_the_velocity_limit_is_not_counted(
        limits: dict[str, np.ndarray]) -> None:
    got = check_commands(np.array([[0.0, 0.0], [0.2000002, 0.0]]), limits, RATE)  # fraction exactly 1 + 1e-6
    assert got["over_velocity_steps"] == 0 and got["max_step_fraction"] == 1.0


@pytest.mark.parametrize("commands", [np.array([0.0, 2.0]), np.full((1, 3, 2), 2.0)])
def test_an_array_not_shaped_commands_by_joints_is_reported_as_no_commands_checked(
        limits: dict[str, np.ndarray], commands: np.ndarray) -> None:
    assert check_commands(commands, limits, RATE) == NOTHING


def test_commands_to_no_joint_are_counted_and_none_is_outside() -> None:
    none = {"lower": np.empty(0), "upper": np.empty(0), "velocity": np.empty(0)}
    assert check_commands(np.empty((3, 0)), none, RATE) == {
        "commands": 3, "outside_position_limits": 0, "over_velocity_steps": 0, "max_step_fraction": 0.0}
