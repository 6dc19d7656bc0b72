"""Limits sources: ros2_control joint_limits YAML (flat and nested), URDF, MJCF; fail-closed validation.

Also soft-limit validation, malformed files, provenance of soft limits, overlays over soft limits, and the
enforcement verdicts.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from omni_vla_safety.limits import (
    JointSource, LimitsError, enforcement_problem, limit_set_from_fields, load_joint_limits, load_limit_sets,
    merge_overlay, missing_limits, parse_joint_limits_yaml, require_joints, yaml_sources,
)

REPO = Path(__file__).resolve().parents[2]
PANDA = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]


def test_project_joint_limits_file_has_every_panda_joint_with_finite_limits() -> None:
    limits = load_joint_limits(REPO / "config" / "joint_limits.yaml")
    assert set(PANDA) <= set(limits)
    j4 = limits["panda_joint4"]
    assert (j4.min_position, j4.max_position, j4.max_velocity) == (-3.0718, -0.0698, 2.175)
    assert limits["panda_finger_joint1"].has_jerk_limits is False


def test_nested_ros_parameters_form_equals_flat_form() -> None:
    flat = "joint_limits:\n  j1: {has_velocity_limits: true, max_velocity: 1.5}\n"
    nested = ("controller_manager:\n  ros__parameters:\n    joint_limits:\n"
              "      j1: {has_velocity_limits: true, max_velocity: 1.5}\n")
    assert parse_joint_limits_yaml(flat) == parse_joint_limits_yaml(nested)
    assert parse_joint_limits_yaml(nested)["j1"].hard.max_velocity == 1.5


def test_ros2_control_soft_limits_parsed_from_yaml() -> None:
    text = """
JointLimitsRosparamTestNode:
  ros__parameters:
    joint_limits:
      foo_joint:
        has_position_limits: true
        min_position: 0.0
        max_position: 1.0
        angle_wraparound: true
        has_soft_limits: true
        k_position: 10.0
        k_velocity: 20.0
        soft_lower_limit: 0.1
        soft_upper_limit: 0.9
"""
    spec = parse_joint_limits_yaml(text)["foo_joint"]
    assert spec.soft is not None
    assert (spec.soft.min_position, spec.soft.max_position, spec.soft.k_position, spec.soft.k_velocity) == (
        0.1, 0.9, 10.0, 20.0)
    assert spec.position_range == (0.1, 0.9)


def test_soft_limit_outside_hard_refused_naming_joint() -> None:
    text = ("joint_limits:\n  elbow:\n    has_position_limits: true\n    min_position: -1.0\n"
            "    max_position: 1.0\n    soft_lower_limit: -1.2\n    soft_upper_limit: 0.9\n")
    with pytest.raises(LimitsError, match=r"joint 'elbow'.*soft_lower_limit -1\.2 is outside.*min_position"):
        parse_joint_limits_yaml(text)


@pytest.mark.parametrize("fields, field", [
    ("{has_velocity_limits: true, max_velocity: -2.0}", "max_velocity"),
    ("{has_acceleration_limits: true}", "max_acceleration"),
    ("{has_jerk_limits: true, max_jerk: .nan}", "max_jerk"),
    ("{has_position_limits: true, min_position: 1.0, max_position: -1.0}", "min_position"),
    ("{has_position_limits: true, max_position: 1.0}", "min_position"),
    ("{has_soft_limits: true, soft_lower_limit: 0.0}", "soft_upper_limit"),
    ("{max_speed: 3.0}", "max_speed"),
])
def test_inconsistent_limit_refused_naming_joint_and_field(fields: str, field: str) -> None:
    with pytest.raises(LimitsError) as info:
        parse_joint_limits_yaml(f"joint_limits:\n  wrist: {fields}\n", "limits.yaml")
    assert "joint 'wrist'" in str(info.value) and field in str(info.value) and "limits.yaml" in str(info.value)


@pytest.mark.parametrize("fields, named, flag", [
    ("{max_deceleration: 3.0}", "max_deceleration", "has_deceleration_limits"),
    ("{max_jerk: 5000.0}", "max_jerk", "has_jerk_limits"),
    ("{max_velocity: 2.0}", "max_velocity", "has_velocity_limits"),
    ("{max_acceleration: 2.0}", "max_acceleration", "has_acceleration_limits"),
    ("{max_effort: 2.0}", "max_effort", "has_effort_limits"),
    ("{min_position: -1.0, max_position: 1.0}", "min_position", "has_position_limits"),
    ("{max_position: 1.0}", "max_position", "has_position_limits"),
])
def test_a_limit_stated_without_its_has_flag_is_refused_not_ignored(fields: str, named: str, flag: str) -> None:
    """ros2_control ignores a max_* whose has_* is absent: a user who wrote one meant it, so say so."""
    with pytest.raises(LimitsError, match=f"joint 'wrist': {named} is given without {flag}: set {flag}: true"):
        parse_joint_limits_yaml(f"joint_limits:\n  wrist: {fields}\n", "limits.yaml")
    off = parse_joint_limits_yaml(f"joint_limits:\n  wrist: {{{flag}: false, {fields[1:-1]}}}\n", "limits.yaml")
    assert not getattr(off["wrist"].hard, flag)


def test_missing_joint_refused_naming_joint() -> None:
    limits = parse_joint_limits_yaml("joint_limits:\n  a: {}\n")
    with pytest.raises(LimitsError, match=r"joint 'b' has no entry.*joint_limits\.b"):
        require_joints(limits, ["a", "b"], "x.yaml")


def test_yaml_without_joint_limits_key_refused() -> None:
    with pytest.raises(LimitsError, match="joint_limits"):
        parse_joint_limits_yaml("something_else: {}\n")


URDF = """<?xml version="1.0"?>
<robot name="arm">
  <link name="base"/><link name="l1"/><link name="l2"/><link name="l3"/>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="l1"/>
    <limit lower="-2.0" upper="2.5" velocity="1.5" effort="40"/>
    <safety_controller soft_lower_limit="-1.9" soft_upper_limit="2.4" k_position="15" k_velocity="10"/>
  </joint>
  <joint name="spin" type="continuous">
    <parent link="l1"/><child link="l2"/>
    <limit velocity="3.0" effort="5"/>
  </joint>
  <joint name="slider" type="prismatic">
    <parent link="l2"/><child link="l3"/>
    <limit lower="0.0" upper="0.3" velocity="0.2" effort="100"/>
  </joint>
  <joint name="weld" type="fixed"><parent link="l3"/><child link="base"/></joint>
</robot>
"""


def test_urdf_limits_parsed(tmp_path: Path) -> None:
    path = tmp_path / "arm.urdf"
    path.write_text(URDF)
    sets = load_limit_sets(path)
    assert set(sets) == {"shoulder", "spin", "slider"}
    shoulder = sets["shoulder"]
    assert (shoulder.hard.min_position, shoulder.hard.max_position) == (-2.0, 2.5)
    assert (shoulder.hard.max_velocity, shoulder.hard.max_effort) == (1.5, 40.0)
    assert shoulder.soft is not None and shoulder.soft.k_position == 15.0
    assert shoulder.position_range == (-1.9, 2.4)
    assert not sets["spin"].hard.has_position_limits and sets["spin"].hard.max_velocity == 3.0
    assert sets["slider"].hard.max_position == 0.3
    assert not shoulder.hard.has_acceleration_limits  # URDF has none


def test_urdf_soft_limit_outside_hard_refused_naming_joint(tmp_path: Path) -> None:
    path = tmp_path / "bad.urdf"
    path.write_text(URDF.replace('soft_upper_limit="2.4"', 'soft_upper_limit="2.6"'))
    with pytest.raises(LimitsError, match=r"joint 'shoulder'.*soft_upper_limit 2\.6"):
        load_limit_sets(path)


MJCF = """<mujoco model="arm">
  <compiler angle="{angle}"/>
  <default>
    <joint limited="true" range="-90 90"/>
    <default class="wrist"><joint range="-45 135"/></default>
  </default>
  <worldbody>
    <body name="b1">
      <joint name="j1" type="hinge"/>
      <geom size="0.05"/>
      <body name="b2" childclass="wrist">
        <joint name="j2"/>
        <geom size="0.05"/>
        <body name="b3">
          <joint name="slide" type="slide" range="0 0.2"/>
          <geom size="0.05"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="j1" ctrlrange="-1.0 1.0" forcerange="-30 30"/>
    <motor joint="j2" ctrlrange="-2 2" gear="10"/>
    <velocity joint="slide" ctrlrange="-0.1 0.1"/>
  </actuator>
</mujoco>
"""


@pytest.mark.parametrize("angle", ["degree", "radian"])
def test_mjcf_limits_match_mujoco_compiler(tmp_path: Path, angle: str) -> None:
    """The stdlib parser must read ranges as MuJoCo itself compiles them (degrees, defaults, classes)."""
    mujoco = pytest.importorskip("mujoco")
    xml = MJCF.replace("{angle}", angle)
    if angle == "radian":
        xml = xml.replace('range="-90 90"', 'range="-1.5 1.5"').replace('range="-45 135"', 'range="-0.5 2.0"')
    path = tmp_path / "arm.xml"
    path.write_text(xml)
    sets = load_limit_sets(path)
    model = mujoco.MjModel.from_xml_path(str(path))
    for name in ("j1", "j2", "slide"):
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        lo, hi = model.jnt_range[jid]
        if name == "j1":  # position servo ctrlrange narrows the range (ctrlrange is never angle-converted)
            lo, hi = max(lo, model.actuator_ctrlrange[0][0]), min(hi, model.actuator_ctrlrange[0][1])
        hard = sets[name].hard
        assert hard.has_position_limits
        assert math.isclose(hard.min_position, lo, abs_tol=1e-9) and math.isclose(hard.max_position, hi, abs_tol=1e-9)
    assert sets["j1"].hard.max_effort == 30.0
    assert sets["j2"].hard.max_effort == 20.0  # motor: |ctrlrange| * gear
    assert sets["slide"].hard.max_velocity == 0.1


def test_mjcf_actuator_on_unknown_joint_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.xml"
    path.write_text(MJCF.replace("{angle}", "degree").replace('<motor joint="j2"', '<motor joint="j9"'))
    with pytest.raises(LimitsError, match="unknown joint 'j9'"):
        load_limit_sets(path)


ARM = {"has_position_limits": True, "min_position": -1.0, "max_position": 1.0,
       "has_velocity_limits": True, "max_velocity": 2.0,
       "has_acceleration_limits": True, "max_acceleration": 3.0}


@pytest.mark.parametrize("soft, message", [
    ({"soft_lower_limit": float("nan"), "soft_upper_limit": 0.5}, "soft_lower_limit must be finite"),
    ({"soft_lower_limit": -0.5, "soft_upper_limit": float("inf")}, "soft_upper_limit must be finite"),
    ({"soft_lower_limit": -0.5, "soft_upper_limit": 0.5, "k_position": float("inf")}, "k_position must be finite"),
    ({"soft_lower_limit": -0.5, "soft_upper_limit": 0.5, "k_position": -1.0}, "k_position must not be negative"),
    ({"soft_lower_limit": -0.5, "soft_upper_limit": 0.5, "k_velocity": -1.0}, "k_velocity must not be negative"),
    ({"soft_lower_limit": 0.5, "soft_upper_limit": 0.5}, "soft_lower_limit 0.5 must be below soft_upper_limit 0.5"),
    ({"soft_lower_limit": -0.5, "soft_upper_limit": 1.5}, "soft_upper_limit 1.5 is outside the hard limit"),
])
def test_bad_soft_limits_refused_naming_the_field(soft: dict, message: str) -> None:
    with pytest.raises(LimitsError, match="joint 'j'") as exc:
        limit_set_from_fields("j", {**ARM, **soft}, "limits.yaml")
    assert message in str(exc.value)


def test_soft_limits_at_the_hard_limits_and_zero_gains_accepted() -> None:
    spec = limit_set_from_fields("j", {**ARM, "soft_lower_limit": -1.0, "soft_upper_limit": 1.0,
                                       "k_position": 0.0, "k_velocity": 0.0}, "limits.yaml")
    assert spec.soft is not None and spec.position_range == (-1.0, 1.0)
    assert limit_set_from_fields("j", {**ARM, "has_soft_limits": False, "soft_lower_limit": -0.5,
                                       "soft_upper_limit": 0.5}, "x").soft is None  # switched off


@pytest.mark.parametrize("text, message", [
    ("joint_limits: [a, b\n", "not valid YAML"),
    ("- joint_limits\n", "expected a mapping with key 'joint_limits'"),
    ("node: {ros__parameters: {other: 1}}\n", "expected a mapping with key 'joint_limits'"),
    ("a: {ros__parameters: {joint_limits: {j: {}}}}\nb: {ros__parameters: {joint_limits: {k: {}}}}\n",
     "several nodes define joint_limits (a, b); keep one"),
    ("joint_limits:\n  j: 3\n", "joint 'j': expected a mapping of limit fields, got 3"),
])
def test_malformed_joint_limits_yaml_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(LimitsError) as exc:
        parse_joint_limits_yaml(text, "limits.yaml")
    assert str(exc.value).startswith("limits.yaml: ") and message in str(exc.value)


def test_joint_without_fields_has_no_limits() -> None:
    spec = parse_joint_limits_yaml("joint_limits:\n  j:\n")["j"]
    assert missing_limits(spec) == ["has_position_limits", "has_velocity_limits", "has_acceleration_limits"]
    assert missing_limits(limit_set_from_fields("j", ARM, "x")) == []
    no_velocity = {k: v for k, v in ARM.items() if "velocity" not in k}
    assert missing_limits(limit_set_from_fields("j", no_velocity, "x")) == ["has_velocity_limits"]


def test_every_limit_traced_to_its_yaml_line_soft_limits_included() -> None:
    text = ("joint_limits:\n"
            "  j:\n"
            "    has_position_limits: true\n"
            "    min_position: -1.0\n"
            "    max_position: 1.0\n"
            "    has_velocity_limits: true\n"
            "    max_velocity: 2.0\n"
            "    soft_lower_limit: -0.5\n"
            "    soft_upper_limit: 0.5\n"
            "    angle_wraparound: false\n"
            "    max_jerk: 100.0\n")
    js = yaml_sources(text, "/robots/arm/limits.yaml")["j"]
    assert js.origin == {
        "position": "limits.yaml:10 joint_limits.j.angle_wraparound",
        "velocity": "limits.yaml:7 joint_limits.j.max_velocity",
        "soft": "limits.yaml:9 joint_limits.j.soft_upper_limit",
        "jerk": "limits.yaml:11 joint_limits.j.max_jerk",
    }
    assert js.kind == "yaml" and js.fields["soft_lower_limit"] == -0.5


def test_overlay_over_limits_with_soft_limits_keeps_them(tmp_path: Path) -> None:
    base = {"j": limit_set_from_fields("j", {**ARM, "soft_lower_limit": -0.5, "soft_upper_limit": 0.5,
                                             "k_position": 10.0, "k_velocity": 1.0}, "base")}
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("joint_limits:\n  j:\n    max_velocity: 1.0\n  k:\n    has_velocity_limits: true\n"
                       "    max_velocity: 4.0\n")
    merged = merge_overlay(base, overlay)
    assert merged["j"].hard.max_velocity == 1.0 and merged["j"].hard.max_acceleration == 3.0
    soft = merged["j"].soft
    assert soft is not None and (soft.min_position, soft.max_position, soft.k_position, soft.k_velocity) == (
        -0.5, 0.5, 10.0, 1.0)
    assert merged["k"].hard.max_velocity == 4.0 and merged["k"].soft is None
    assert merge_overlay({"j": limit_set_from_fields("j", ARM, "base")}, overlay)["j"].soft is None


def test_overlay_refusing_bad_values_names_the_overlay(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("joint_limits:\n  j:\n    max_velocity: -1.0\n")
    with pytest.raises(LimitsError, match=r"overlay\.yaml over base limits: joint 'j'.*max_velocity"):
        merge_overlay({"j": limit_set_from_fields("j", ARM, "base")}, overlay)


def test_enforcement_verdicts_name_the_joint_and_what_is_missing() -> None:
    full = limit_set_from_fields("j", ARM, "x")
    assert enforcement_problem("j", JointSource(dict(ARM)), full) == ""
    assert enforcement_problem("j", None, None) == "joint 'j' has no entry"
    assert enforcement_problem("j", JointSource(dict(ARM)), None) == "joint 'j' has no entry"
    assert enforcement_problem("j", None, full) == "joint 'j' has no entry"
    follower = JointSource(dict(ARM), follows="leader", note="mimic of leader")
    assert enforcement_problem("j", follower, full) == (
        "joint 'j' follows 'leader' (mimic of leader); command 'leader' and drop this joint from joint_names")
    no_vel = limit_set_from_fields("j", {k: v for k, v in ARM.items() if "velocity" not in k}, "x")
    assert enforcement_problem("j", JointSource(), no_vel) == (
        "joint 'j' is missing velocity limit (has_velocity_limits)")
    no_pos_acc = limit_set_from_fields("j", {"has_velocity_limits": True, "max_velocity": 1.0,
                                             "angle_wraparound": True}, "x")
    assert enforcement_problem("j", JointSource(), no_pos_acc) == (
        "joint 'j' is missing position and acceleration limits (continuous joint) "
        "(has_position_limits, has_acceleration_limits)")
    nothing = limit_set_from_fields("j", {}, "x")
    assert enforcement_problem("j", JointSource(), nothing) == (
        "joint 'j' is missing position, velocity and acceleration limits "
        "(has_position_limits, has_velocity_limits, has_acceleration_limits)")


def test_validated_limits_cannot_be_changed_afterwards() -> None:
    spec = limit_set_from_fields("j", {**ARM, "soft_lower_limit": -0.5, "soft_upper_limit": 0.5}, "x")
    with pytest.raises(Exception):
        spec.hard.max_velocity = 100.0  # type: ignore[misc]
    with pytest.raises(Exception):
        spec.soft = None  # type: ignore[misc]
    with pytest.raises(Exception):
        spec.soft.k_position = 5.0  # type: ignore[misc, union-attr]
    assert spec.hard.max_velocity == 2.0 and spec.soft is not None


@pytest.mark.parametrize("value", [0.0, -0.5])
def test_zero_or_negative_rate_limit_refused(value: float) -> None:
    with pytest.raises(LimitsError, match="max_velocity must be a positive finite number"):
        limit_set_from_fields("j", {**ARM, "max_velocity": value}, "x")


def test_soft_limits_without_gains_have_no_spring() -> None:
    from omni_vla_safety.limits import SoftJointLimits

    spec = limit_set_from_fields("j", {**ARM, "soft_lower_limit": -0.5, "soft_upper_limit": 0.5}, "x")
    assert spec.soft is not None and (spec.soft.k_position, spec.soft.k_velocity) == (0.0, 0.0)
    assert (SoftJointLimits(min_position=-0.5, max_position=0.5).k_position,
            SoftJointLimits(min_position=-0.5, max_position=0.5).k_velocity) == (0.0, 0.0)


def test_equal_soft_limits_refused_whatever_the_float_objects() -> None:
    with pytest.raises(LimitsError, match="must be below"):
        limit_set_from_fields("j", {**ARM, "soft_lower_limit": float("0.5"), "soft_upper_limit": float("0.5")}, "x")
    with pytest.raises(LimitsError, match="soft_lower_limit 0.6 must be below soft_upper_limit 0.4"):
        limit_set_from_fields("j", {**ARM, "soft_lower_limit": 0.6, "soft_upper_limit": 0.4}, "x")


@pytest.mark.parametrize("key", ["soft_lower_limit", "soft_upper_limit"])
def test_half_specified_soft_limits_refused(key: str) -> None:
    with pytest.raises(LimitsError, match="is missing while soft limits are enabled"):
        limit_set_from_fields("j", {**ARM, key: 0.5 if key == "soft_upper_limit" else -0.5}, "x")


def test_invalid_yaml_limits_file_refused_as_limits_error(tmp_path: Path) -> None:
    from omni_vla_safety.limits import load_sources

    path = tmp_path / "limits.yaml"
    path.write_text("joint_limits: [a, b\n")
    with pytest.raises(LimitsError, match="not valid YAML"):
        load_sources(path)


def test_provenance_found_under_a_node_followed_by_other_keys() -> None:
    text = ("controller_manager:\n"
            "  ros__parameters:\n"
            "    joint_limits:\n"
            "      j:\n"
            "        has_velocity_limits: true\n"
            "        max_velocity: 2.0\n"
            "update_rate: 100\n")
    assert yaml_sources(text, "l.yaml")["j"].origin["velocity"] == "l.yaml:6 joint_limits.j.max_velocity"


def test_empty_position_range_refused_whatever_the_float_objects() -> None:
    with pytest.raises(LimitsError, match="min_position 0.5 must be below max_position 0.5"):
        limit_set_from_fields("j", {**ARM, "min_position": float("0.5"), "max_position": float("0.5")}, "x")


def test_enforced_limits_refusal_tells_how_to_complete_a_missing_limit(tmp_path: Path) -> None:
    from omni_vla_safety.limits import load_enforced_limits

    path = tmp_path / "limits.yaml"
    path.write_text("joint_limits:\n  j:\n    has_velocity_limits: true\n    max_velocity: 1.0\n")
    with pytest.raises(LimitsError) as exc:
        load_enforced_limits(path, ["j"])
    assert str(exc.value) == (
        f"{path}: joint 'j' is missing position and acceleration limits (has_position_limits, "
        "has_acceleration_limits); supply it in a joint_limits overlay (the supervisor enforces position, "
        "velocity and acceleration limits)")
