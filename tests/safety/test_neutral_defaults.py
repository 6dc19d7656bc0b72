"""Robot-neutral defaults: a robot other than the Panda starts from its joint names and limits alone, with one
max_relative_target and one out_of_range_tolerance for every joint; the shipped Panda file keeps its per-joint
values; a list of the wrong length is refused in one line naming the field and the length it needs."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from safety_robots import FUZZED, described

from omni_vla_safety.config import SupervisorConfig, config_from_yaml
from omni_vla_safety.errors import explain
from omni_vla_safety.limits import load_enforced_limits
from omni_vla_safety.supervisor import Supervisor

REPO = Path(__file__).resolve().parents[2]
PANDA_PARAMS = REPO / "config" / "safety_supervisor.yaml"
PANDA_LIMITS = REPO / "config" / "joint_limits.yaml"


@pytest.mark.parametrize("key", FUZZED)
def test_a_non_panda_robot_starts_without_restating_per_joint_lists(key: str, tmp_path: Path) -> None:
    robot = described(key, tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"safety_supervisor": {"ros__parameters": {"joint_names": robot.names}}}))
    config = config_from_yaml(params)
    sup = Supervisor(config, robot.limit_sets)
    n = len(robot.names)
    assert n != 8  # none could take the Panda's eight values
    assert sup.limiter.max_step == [0.25] * n
    assert sup.accept_lo == pytest.approx([j.lo - 0.05 for j in robot.oracle_joints])
    assert sup.accept_hi == pytest.approx([j.hi + 0.05 for j in robot.oracle_joints])
    assert all(math.isfinite(s) and s > 0 for s in sup.limiter.max_step)  # a default never switches a window off


def test_the_shipped_panda_file_keeps_its_per_joint_values() -> None:
    config = config_from_yaml(PANDA_PARAMS)
    sup = Supervisor(config, load_enforced_limits(PANDA_LIMITS, config.joint_names))
    assert sup.limiter.max_step == [0.25] * 7 + [0.02]
    tol = [0.05] * 7 + [0.02]
    assert sup.accept_lo == pytest.approx([lo - t for lo, t in zip(sup.limiter.lo, tol)])
    assert sup.accept_hi == pytest.approx([hi + t for hi, t in zip(sup.limiter.hi, tol)])
    assert sup.accept_lo[7] == pytest.approx(-0.02) and sup.accept_hi[0] == pytest.approx(2.8973 + 0.05)


def test_the_defaults_are_one_value_for_every_joint() -> None:
    default = SupervisorConfig()
    assert default.max_relative_target == [0.25] and default.out_of_range_tolerance == [0.05]
    six = SupervisorConfig(joint_names=[f"j{i}" for i in range(6)])
    assert six.max_relative_target == [0.25] and six.out_of_range_tolerance == [0.05]


@pytest.mark.parametrize("field", ["max_relative_target", "out_of_range_tolerance", "shaping_tolerance"])
def test_a_per_joint_list_of_the_wrong_length_is_one_line_naming_the_field_and_the_length(field: str) -> None:
    names = [f"j{i}" for i in range(6)]
    assert getattr(SupervisorConfig(joint_names=names, **{field: [0.1] * 6}), field) == [0.1] * 6
    with pytest.raises(ValidationError) as exc:
        SupervisorConfig(joint_names=names, **{field: [0.1] * 8})
    line = explain(exc.value)
    assert "\n" not in line and f"{field} needs 1 or 6 values" in line and "got 8" in line
