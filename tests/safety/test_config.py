"""The supervisor's parameters: refused values name the parameter, the timeouts' two-period floor, the
parameter-file forms ROS accepts, path resolution."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from omni_vla_safety import config as config_module
from omni_vla_safety.config import SupervisorConfig, config_from_yaml, resolve_path


@pytest.mark.parametrize("kwargs, message", [
    ({"max_relative_target": [math.nan]}, "max_relative_target must be finite"),
    ({"out_of_range_tolerance": [0.1] * 7 + [math.inf]}, "out_of_range_tolerance must be finite"),
    ({"out_of_range_tolerance": [-0.01]}, "out_of_range_tolerance must not be negative"),
    ({"out_of_range_tolerance": [0.1, 0.2]}, "out_of_range_tolerance needs 1 or 8 values"),
    ({"joint_names": ["a", ""], "max_relative_target": [0.1], "out_of_range_tolerance": [0.1]},
     "joint_names must be unique and non-empty"),
    ({"joint_state_timeout_s": 0.0199}, "joint_state_timeout_s 0.0199 is shorter than two supervisor periods"),
    ({"rate_hz": 50.0, "command_timeout_s": 0.039}, "command_timeout_s 0.039 is shorter than two supervisor periods"),
])
def test_bad_parameters_refused_naming_them(kwargs: dict, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        SupervisorConfig(**kwargs)
    assert message in str(exc.value)


def test_edge_values_accepted() -> None:
    cfg = SupervisorConfig(joint_state_timeout_s=0.02, command_timeout_s=0.02, out_of_range_tolerance=[0.0],
                           max_relative_target=[0.0])
    assert cfg.joint_state_timeout_s == 0.02 and cfg.out_of_range_tolerance == [0.0]
    assert SupervisorConfig(rate_hz=50.0, command_timeout_s=0.04).dt == 0.02
    names = ["a", "b"]
    assert SupervisorConfig(joint_names=names, max_relative_target=[0.1, 0.2],
                            out_of_range_tolerance=[0.1, 0.2]).joint_names == names


@pytest.mark.parametrize("key", ["safety_supervisor", "/safety_supervisor", "/**"])
def test_parameter_file_read_from_any_node_key_ros_accepts(tmp_path: Path, key: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"other_node:\n  ros__parameters: {{rate_hz: 10.0}}\n"
                    f"{key}:\n  ros__parameters:\n    rate_hz: 50.0\n")
    assert config_from_yaml(path).rate_hz == 50.0


@pytest.mark.parametrize("text", ["", "- a\n", "other_node:\n  ros__parameters: {rate_hz: 10.0}\n",
                                  "safety_supervisor: {}\n", "safety_supervisor:\n  ros__parameters: 3\n"])
def test_parameter_file_without_the_section_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="no 'safety_supervisor: ros__parameters:' section"):
        config_from_yaml(path)


def test_absolute_and_home_paths_resolved_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "limits.yaml"
    target.write_text("joint_limits: {}\n")
    assert resolve_path(str(target)) == target
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_path("~/limits.yaml") == target
    with pytest.raises(FileNotFoundError) as exc:
        resolve_path(str(tmp_path / "missing.yaml"))
    assert str(tmp_path / "missing.yaml") in str(exc.value)


def test_share_dir_found_under_the_install_prefix_without_ament(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ament_index_python.packages", None)  # import fails: no ament
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert config_module.share_dir() is None
    (tmp_path / "share" / "omni_vla").mkdir(parents=True)
    assert config_module.share_dir() == tmp_path / "share" / "omni_vla"
    (tmp_path / "share" / "omni_vla" / "only_installed.yaml").write_text("x: 1\n")
    assert resolve_path("only_installed.yaml") == tmp_path / "share" / "omni_vla" / "only_installed.yaml"


SLOW = {"command_timeout_s": 4.0, "joint_state_timeout_s": 4.0}  # two periods even at 0.5 Hz


@pytest.mark.parametrize("field, refused, accepted", [
    ("rate_hz", [0.0, -1.0, 1000.5], [0.5, 1000.0]),
    ("command_timeout_s", [10.5], [10.0]),
    ("joint_state_timeout_s", [10.5], [10.0]),
    ("max_future_stamp_s", [-0.5, 1.5], [0.0, 1.0]),
    ("target_horizon_s", [-0.5, 1.5], [0.0, 1.0]),
    ("limit_margin", [-0.1, 0.6], [0.0, 0.5]),
    ("status_period_s", [0.0, -0.5, 60.5], [0.5, 60.0]),
    ("diagnostics_period_s", [0.0, -0.5, 60.5], [0.5, 60.0]),
])
def test_parameter_ranges_refuse_beyond_and_accept_up_to_their_bounds(field: str, refused: list[float],
                                                                     accepted: list[float]) -> None:
    for value in refused:
        with pytest.raises(ValidationError, match=field):
            SupervisorConfig(**{**SLOW, field: value})
    for value in accepted:
        assert getattr(SupervisorConfig(**{**SLOW, field: value}), field) == value


def test_duplicate_joint_names_refused_even_with_per_joint_lists() -> None:
    with pytest.raises(ValidationError, match="joint_names must be unique"):
        SupervisorConfig(joint_names=["a", "b", "a"], max_relative_target=[0.1] * 3,
                         out_of_range_tolerance=[0.1] * 3)


def test_timeout_refusal_states_the_two_period_floor() -> None:
    with pytest.raises(ValidationError, match=r"\(0\.0200 s at rate_hz 100\.0\)"):
        SupervisorConfig(command_timeout_s=0.015)


def test_config_cannot_be_changed_after_validation() -> None:
    cfg = SupervisorConfig()
    with pytest.raises(ValidationError):
        cfg.rate_hz = 0.0  # type: ignore[misc]
    assert cfg.rate_hz == 100.0


def test_a_one_joint_supervisor_accepted_and_an_empty_one_refused() -> None:
    one = SupervisorConfig(joint_names=["gripper"], max_relative_target=[0.01], out_of_range_tolerance=[0.0])
    assert one.joint_names == ["gripper"]
    with pytest.raises(ValidationError, match="joint_names"):
        SupervisorConfig(joint_names=[], max_relative_target=[0.01], out_of_range_tolerance=[0.0])
