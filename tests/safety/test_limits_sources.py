"""Limits read from URDF and MJCF (safety/limits_sources.py) at the edges the robot-description tests
(test_limits_robots.py) do not reach: malformed numbers and elements refused by name, default classes spread
over several <default> blocks, servos on joints without a range, effort narrowing, equality couplings."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from omni_vla_safety.limits import LimitsError
from omni_vla_safety.limits_sources import is_position_servo, parse_xml_limits, parse_xml_sources


def urdf(joint: str) -> str:
    return f'<robot name="r"><link name="a"/><link name="b"/>{joint}</robot>'


def mjcf(body: str, actuator: str = "", extra: str = "") -> str:
    return (f'<mujoco>{extra}<worldbody><body>{body}<geom size="0.1"/></body></worldbody>'
            f'<actuator>{actuator}</actuator></mujoco>')


@pytest.mark.parametrize("text, message", [
    (urdf('<joint name="j" type="revolute"><limit lower="abc" upper="1" velocity="1"/></joint>'),
     "joint 'j': lower='abc' is not a number"),
    (urdf('<joint name="j" type="revolute"><limit lower="-1" upper="inf" velocity="1"/></joint>'),
     "joint 'j': upper='inf' is not finite"),
    (urdf('<joint name="j" type="revolute"><limit lower="-1" upper="1" velocity="nan"/></joint>'),
     "joint 'j': velocity='nan' is not finite"),
    (urdf('<joint name="j" type="prismatic"/>'), "joint 'j': a prismatic joint needs a <limit> element"),
    (urdf('<joint name="j" type="revolute"><limit lower="-1" upper="1" velocity="-2"/></joint>'),
     "joint 'j': <limit velocity=-2.0> is negative"),
    (urdf('<joint name="j" type="revolute"><limit lower="-1" upper="1" effort="-2"/></joint>'),
     "joint 'j': <limit effort=-2.0> is negative"),
    (mjcf('<joint name="j" range="10"/>'), "joint 'j': range='10' needs 2 numbers"),
    (mjcf('<joint name="j" range="-10 10"/>', '<position joint="j" ctrlrange="1 -1"/>'),
     "ctrlrange [1.0, -1.0] is empty"),
    (mjcf('<joint name="j" range="-10 10"/>', '<position joint="j" ctrlrange="1 1"/>'),
     "ctrlrange [1.0, 1.0] is empty"),
    (mjcf('<joint name="j" range="-10 10"/>', '<position joint="j" inheritrange="x"/>'),
     "joint 'j': inheritrange='x'"),
    ('<sdf version="1.6"/>', "root element <sdf> is neither <robot> (URDF) nor <mujoco> (MJCF)"),
    ('<robot', "not valid XML"),
])
def test_malformed_robot_description_refused_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(LimitsError) as exc:
        parse_xml_limits(text, str(tmp_path / "robot.xml"))
    assert message in str(exc.value) and "robot.xml" in str(exc.value)


def test_position_servo_outside_the_joint_range_leaves_no_range(tmp_path: Path) -> None:
    with pytest.raises(LimitsError, match=r"joint 'j':.*ctrlrange leaves no range inside the joint range"):
        parse_xml_sources(mjcf('<joint name="j" range="0 10"/>', '<position joint="j" ctrlrange="-1 -0.5"/>',
                               '<compiler angle="radian"/>'), str(tmp_path / "r.xml"))
    with pytest.raises(LimitsError, match="leaves no range"):  # touching at one point is no range either
        parse_xml_sources(mjcf('<joint name="j" range="0 10"/>', '<position joint="j" ctrlrange="-1 0"/>',
                               '<compiler angle="radian"/>'), str(tmp_path / "r.xml"))


def test_include_without_file_attribute_refused(tmp_path: Path) -> None:
    with pytest.raises(LimitsError, match=r"robot\.xml:1 <include>: attribute 'file' is missing"):
        parse_xml_sources('<mujoco><include/></mujoco>', str(tmp_path / "robot.xml"))


def test_urdf_continuous_joint_without_limit_has_no_position_limit_and_velocity_zero_means_not_given() -> None:
    src = parse_xml_sources(urdf('<joint name="c" type="continuous"/>'
                                 '<joint name="w" type="continuous"><limit velocity="3" effort="0"/></joint>'
                                 '<joint name="r" type="revolute"><limit lower="-1" upper="1" velocity="0"/></joint>'
                                 '<joint name="f" type="fixed"/>'), "r.urdf")
    assert set(src) == {"c", "w", "r"}
    assert src["c"].fields == {"angle_wraparound": True} and src["c"].note == "continuous: no position limit"
    assert src["w"].fields == {"angle_wraparound": True, "has_velocity_limits": True, "max_velocity": 3.0}
    assert src["r"].fields == {"has_position_limits": True, "min_position": -1.0, "max_position": 1.0}


def test_urdf_safety_controller_defaults_and_mimic() -> None:
    src = parse_xml_sources(urdf(
        '<joint name="j" type="revolute"><limit lower="-1" upper="1" velocity="1"/>'
        '<safety_controller soft_upper_limit="0.5" k_position="3"/></joint>'
        '<joint name="m" type="revolute"><limit lower="-1" upper="1" velocity="1"/><mimic joint="j"/></joint>'),
        "r.urdf")
    assert {k: src["j"].fields[k] for k in ("soft_lower_limit", "soft_upper_limit", "k_position", "k_velocity")} == {
        "soft_lower_limit": 0.0, "soft_upper_limit": 0.5, "k_position": 3.0, "k_velocity": 0.0}
    assert src["m"].follows == "j" and src["m"].note == "mimic of j (multiplier 1, offset 0): not commanded"


def test_mjcf_hinge_without_range_has_a_note_and_a_slide_without_range_none() -> None:
    src = parse_xml_sources(mjcf('<joint name="h"/><joint name="s" type="slide"/><joint name="b" type="ball"/>'),
                            "/tmp/r.xml")
    assert set(src) == {"h", "s"}
    assert src["h"].note == "hinge without range: no position limit" and src["s"].note == ""
    assert src["h"].fields == {} and src["s"].fields == {}


def test_mjcf_zero_force_ranges_give_no_effort_limit_and_the_smaller_effort_wins() -> None:
    src = parse_xml_sources(mjcf('<joint name="a" range="-1 1" actuatorfrcrange="0 0"/>'
                                 '<joint name="b" range="-1 1" actuatorfrcrange="-5 3"/>'
                                 '<joint name="c" range="-1 1" actuatorfrcrange="-5 5"/>',
                                 '<motor joint="a" forcerange="0 0"/>'
                                 '<motor joint="b" ctrlrange="-1 1" gear="10"/>'
                                 '<motor joint="c" forcerange="-2 2"/>'), "/tmp/r.xml")
    assert "has_effort_limits" not in src["a"].fields
    assert src["b"].fields["max_effort"] == 5.0  # actuatorfrcrange 5 beats ctrlrange*gear 10
    assert src["c"].fields["max_effort"] == 2.0  # forcerange 2 narrows actuatorfrcrange 5
    assert src["c"].origin["effort"].endswith("forcerange>")


def test_mjcf_position_servo_on_a_joint_without_range_gives_the_range() -> None:
    src = parse_xml_sources(mjcf('<joint name="s" type="slide"/>', '<position joint="s" ctrlrange="-0.2 0.4"/>'),
                            "/tmp/r.xml")
    assert (src["s"].fields["min_position"], src["s"].fields["max_position"]) == (-0.2, 0.4)
    assert src["s"].fields["has_position_limits"] is True and "ctrlrange" in src["s"].origin["position"]


def test_mjcf_position_servo_within_the_range_keeps_it_and_says_so() -> None:
    src = parse_xml_sources(mjcf('<joint name="s" type="slide" range="-0.2 0.4"/>',
                                 '<position joint="s" ctrlrange="-1 1"/>'), "/tmp/r.xml")
    assert (src["s"].fields["min_position"], src["s"].fields["max_position"]) == (-0.2, 0.4)
    assert " within " in src["s"].origin["position"] and "narrowed" not in src["s"].origin["position"]


def test_second_top_level_default_block_adds_to_the_main_class() -> None:
    src = parse_xml_sources('<mujoco><compiler angle="radian"/><default><joint range="-1 1"/></default>'
                            '<default><joint type="slide"/></default>'
                            '<worldbody><body><joint name="j"/><geom size="0.1"/></body></worldbody></mujoco>',
                            "/tmp/r.xml")
    assert src["j"].kind == "slide" and (src["j"].fields["min_position"], src["j"].fields["max_position"]) == (-1, 1)


@pytest.mark.parametrize("attrs, servo", [
    ({"biastype": "affine", "gainprm": "7", "biasprm": "0 -7 -1"}, True),
    ({"biastype": "affine", "gainprm": "7 0 0", "biasprm": "0 -7"}, True),
    ({"biastype": "affine", "gainprm": "x", "biasprm": "0 -7"}, False),
    ({"biastype": "affine", "gainprm": "7", "biasprm": "0 -6"}, False),
    ({"biastype": "affine", "gainprm": "7", "biasprm": "1 -7"}, False),
    ({"biastype": "affine", "gainprm": "0", "biasprm": "0 0"}, False),
    ({"biastype": "affine", "gainprm": "-1", "biasprm": "0 1"}, False),
    ({"biastype": "none", "gainprm": "7", "biasprm": "0 -7"}, False),
    ({"biastype": "affine", "gaintype": "user", "gainprm": "7", "biasprm": "0 -7"}, False),
    ({"biastype": "affine", "biasprm": "0 -1"}, True),  # gainprm defaults to 1
    ({"biastype": "affine", "gainprm": "", "biasprm": "0 -1"}, True),
])
def test_position_servo_recognised_like_mujoco(attrs: dict, servo: bool) -> None:
    assert is_position_servo(attrs) is servo


def test_equality_coupling_follower_is_the_unactuated_joint_and_a_constant_lock_is_reported() -> None:
    body = '<joint name="a" range="-1 1"/><joint name="b" range="-1 1"/><joint name="c" range="-1 1"/>'
    both_free = parse_xml_sources(mjcf(body, "", "") .replace(
        "</mujoco>", '<equality><joint joint1="a" joint2="b"/><joint joint1="c"/></equality></mujoco>'), "/tmp/r.xml")
    assert both_free["a"].follows == "b" and not both_free["b"].follows  # joint1 follows when neither is actuated
    assert both_free["c"].follows == "(held constant)" and "a constant" in both_free["c"].note
    a_driven = parse_xml_sources(mjcf(body, '<position joint="a" ctrlrange="-1 1"/>').replace(
        "</mujoco>", '<equality><joint joint1="a" joint2="b"/></equality></mujoco>'), "/tmp/r.xml")
    assert a_driven["b"].follows == "a" and not a_driven["a"].follows
    both_driven = parse_xml_sources(mjcf(body, '<position joint="a" ctrlrange="-1 1"/>'
                                               '<position joint="b" ctrlrange="-1 1"/>').replace(
        "</mujoco>", '<equality><joint joint1="a" joint2="b"/></equality></mujoco>'), "/tmp/r.xml")
    assert not both_driven["a"].follows and not both_driven["b"].follows
    unknown = parse_xml_sources(mjcf(body).replace(
        "</mujoco>", '<equality><joint joint1="zz" joint2="a"/></equality></mujoco>'), "/tmp/r.xml")
    assert not any(js.follows for js in unknown.values())


def test_hinge_ranges_in_degrees_unless_radian_and_slides_never_converted() -> None:
    deg = parse_xml_sources(mjcf('<joint name="h" range="-90 90"/><joint name="s" type="slide" range="-1 2"/>'),
                            "/tmp/r.xml")
    assert deg["h"].fields["max_position"] == pytest.approx(math.pi / 2)
    assert deg["s"].fields["max_position"] == 2.0
    assert deg["h"].origin["position"].endswith(" range deg>") and deg["s"].origin["position"].endswith(" range>")


# --- MJCF actuators and defaults: which actuator is a position servo, what narrows a range or an effort ---

def test_default_general_actuator_makes_a_position_servo_of_the_class() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="0 2"/>', '<general joint="j" ctrlrange="0.5 1"/>',
                                 '<compiler angle="radian"/><default><geom type="capsule"/>'
                                 '<general biastype="affine" gainprm="5" biasprm="0 -5 0"/></default>'), "/tmp/r.xml")
    assert src["j"].kind == "hinge"  # a default <geom type> is no joint type
    assert (src["j"].fields["min_position"], src["j"].fields["max_position"]) == (0.5, 1.0)


def test_default_velocity_servo_gain_does_not_make_a_general_actuator_a_position_servo() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="0 2"/>', '<general joint="j" ctrlrange="-0.1 0.1"/>',
                                 '<compiler angle="radian"/><default><velocity kv="5"/></default>'), "/tmp/r.xml")
    assert (src["j"].fields["min_position"], src["j"].fields["max_position"]) == (0.0, 2.0)


@pytest.mark.parametrize("attrs", [
    {"biastype": "affine", "gaintype": "affine", "gainprm": "7", "biasprm": "0 -7"},
    {"biastype": "affine", "gainprm": "1", "biasprm": "0"},
    {"biastype": "affine", "gainprm": "1", "biasprm": ""},
    {"biastype": "", "gainprm": "7", "biasprm": "0 -7"},
    {"biastype": "affine", "gainprm": "7", "biasprm": "-1 -7"},  # a constant bias offsets the target
    {"biastype": "affine", "gainprm": "7", "biasprm": "0 -10"},
])
def test_affine_gain_or_missing_bias_terms_are_no_position_servo(attrs: dict) -> None:
    assert is_position_servo(attrs) is False


def test_explicit_limited_and_hinge_type_attributes_read_like_their_defaults() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" type="hinge" limited="false" range="-1 1"/>'
                                 '<joint name="h" type="hinge" limited="auto" range="-90 90"/>'), "/tmp/r.xml")
    assert src["j"].fields == {} and src["j"].note == "hinge without range: no position limit"
    assert src["h"].fields["max_position"] == pytest.approx(math.pi / 2)
    assert src["h"].origin["position"].endswith(" range deg>")


def test_compiler_autolimits_false_accepts_a_joint_without_range() -> None:
    src = parse_xml_sources(mjcf('<joint name="j"/>', '', '<compiler autolimits="false"/>'), "/tmp/r.xml")
    assert src["j"].fields == {}


def test_integrated_velocity_cylinder_and_muscle_ctrlranges_limit_neither_position_nor_effort() -> None:
    src = parse_xml_sources(mjcf('<joint name="i" range="0 2"/><joint name="c" range="0 2"/>'
                                 '<joint name="m" range="0 2"/>',
                                 '<intvelocity joint="i" ctrlrange="-0.1 0.1"/>'
                                 '<cylinder joint="c" ctrlrange="-0.1 0.1"/><muscle joint="m" ctrlrange="0 1"/>',
                                 '<compiler angle="radian"/><default><position kp="5"/></default>'), "/tmp/r.xml")
    for joint in "icm":
        assert (src[joint].fields["min_position"], src[joint].fields["max_position"]) == (0.0, 2.0)
        assert "has_effort_limits" not in src[joint].fields


@pytest.mark.parametrize("shortcuts, servo", [
    ('<position kp="5"/>', True),
    ('<position kp="5"/><motor/>', False),  # one actuator default per class: the last shortcut wins, as in MuJoCo
    ('<position kp="5"/><velocity kv="3"/>', False),
])
def test_actuator_shortcuts_in_a_default_class_set_the_general_actuator_like_mujoco(shortcuts: str,
                                                                                     servo: bool) -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="0 2"/>', '<general joint="j" ctrlrange="0.5 1"/>',
                                 f'<compiler angle="radian"/><default>{shortcuts}</default>'), "/tmp/r.xml")
    assert (src["j"].fields["min_position"], src["j"].fields["max_position"]) == ((0.5, 1.0) if servo else (0.0, 2.0))


def test_general_servo_with_explicit_fixed_gain_and_a_six_number_gear() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="0 2"/>',
                                 '<general joint="j" ctrlrange="0.5 1" gear="2 0 0 0 0 0" gaintype="fixed" '
                                 'biastype="affine" gainprm="5" biasprm="0 -5 0"/>', '<compiler angle="radian"/>'),
                            "/tmp/r.xml")
    assert (src["j"].fields["min_position"], src["j"].fields["max_position"]) == (0.25, 0.5)


@pytest.mark.parametrize("actuator, field", [("motor", "has_effort_limits"), ("velocity", "has_velocity_limits")])
def test_non_position_actuator_gets_nothing_from_a_position_default_inheritrange_like_mujoco(
        actuator: str, field: str) -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="0 2"/>', f'<{actuator} joint="j"/>',
                                 '<compiler angle="radian"/><default><position inheritrange="0.5"/></default>'),
                            "/tmp/r.xml")
    assert field not in src["j"].fields


def test_unknown_root_element_refused_even_if_it_sorts_before_mujoco() -> None:
    with pytest.raises(LimitsError, match="neither <robot>"):
        parse_xml_sources('<model/>', "/tmp/r.xml")


def test_effort_equal_to_the_joint_force_range_keeps_the_joint_as_its_origin() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="-1 1" actuatorfrcrange="-2 2"/>',
                                 '<motor joint="j" forcerange="-2 2"/>'), "/tmp/r.xml")
    assert src["j"].fields["max_effort"] == 2.0 and src["j"].origin["effort"].endswith(" actuatorfrcrange>")


@pytest.mark.parametrize("ctrlrange, narrowed", [("-2 0.5", (-1.0, 0.5)), ("-0.5 2", (-0.5, 1.0))])
def test_servo_narrowing_only_one_bound_says_narrowed(ctrlrange: str, narrowed: tuple) -> None:
    src = parse_xml_sources(mjcf('<joint name="s" type="slide" range="-1 1"/>',
                                 f'<position joint="s" ctrlrange="{ctrlrange}"/>'), "/tmp/r.xml")
    assert (src["s"].fields["min_position"], src["s"].fields["max_position"]) == narrowed
    assert " narrowed by " in src["s"].origin["position"]


def test_inheritrange_takes_the_joint_range_about_its_middle_and_only_when_positive() -> None:
    def servo(actuator: str, extra: str = "") -> tuple[float, float]:
        src = parse_xml_sources(mjcf('<joint name="j" range="0 3"/>', actuator, '<compiler angle="radian"/>' + extra),
                                "/tmp/r.xml")
        return src["j"].fields["min_position"], src["j"].fields["max_position"]
    assert servo('<position joint="j" inheritrange="0.5"/>') == (0.75, 2.25)
    assert servo('<position joint="j" ctrlrange="0.2 1" inheritrange="-0.5"/>') == (0.2, 1.0)  # MuJoCo ignores it
    assert servo('<position joint="j" ctrlrange="0.2 1" inheritrange=""/>') == (0.2, 1.0)


def test_velocity_servo_ctrlrange_switches_the_velocity_limit_on() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="-1 1"/>', '<velocity joint="j" ctrlrange="-2 3"/>'),
                            "/tmp/r.xml")
    assert src["j"].fields["has_velocity_limits"] is True and src["j"].fields["max_velocity"] == 2.0


def test_motor_effort_is_the_larger_ctrlrange_bound_times_gear() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" range="-1 1"/><joint name="k" range="-1 1"/>',
                                 '<motor joint="j" ctrlrange="-3 1" gear="2"/><motor joint="k" ctrlrange="-1 3"/>'),
                            "/tmp/r.xml")
    assert (src["j"].fields["max_effort"], src["k"].fields["max_effort"]) == (6.0, 3.0)


def test_actuator_on_a_tendon_does_not_end_the_actuator_list() -> None:
    src = parse_xml_sources(mjcf('<joint name="j" type="slide" range="-1 1"/>',
                                 '<motor tendon="t" ctrlrange="-1 1"/><position joint="j" ctrlrange="0 0.5"/>'),
                            "/tmp/r.xml")
    assert (src["j"].fields["min_position"], src["j"].fields["max_position"]) == (0.0, 0.5)


def test_missing_nested_include_reported_at_the_main_model_directory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "m.xml").write_text('<mujoco><include file="sub/a.xml"/></mujoco>')
    (tmp_path / "sub" / "a.xml").write_text('<mujoco><include file="gone.xml"/></mujoco>')
    with pytest.raises(LimitsError, match="cannot read included file") as exc:
        parse_xml_sources((tmp_path / "m.xml").read_text(), str(tmp_path / "m.xml"))
    assert str(tmp_path / "gone.xml") in str(exc.value) and str(tmp_path / "sub" / "gone.xml") not in str(exc.value)


def test_urdf_velocity_below_one_is_a_limit_and_a_small_negative_one_is_refused() -> None:
    src = parse_xml_sources(urdf('<joint name="j" type="revolute"><limit lower="-1" upper="1" velocity="0.5" '
                                 'effort="0.25"/></joint>'), "r.urdf")
    assert (src["j"].fields["max_velocity"], src["j"].fields["max_effort"]) == (0.5, 0.25)
    with pytest.raises(LimitsError, match=r"<limit velocity=-0.5> is negative"):
        parse_xml_sources(urdf('<joint name="j" type="revolute"><limit lower="-1" upper="1" velocity="-0.5"/>'
                               '</joint>'), "r.urdf")


def test_zero_gear_is_taken_as_one_not_a_division_by_zero() -> None:
    src = parse_xml_sources(mjcf('<joint name="s" type="slide" range="-1 1"/>',
                                 '<position joint="s" ctrlrange="0 0.5" gear="0"/>'), "/tmp/r.xml")
    assert (src["s"].fields["min_position"], src["s"].fields["max_position"]) == (0.0, 0.5)


def test_actuator_force_range_alone_switches_the_effort_limit_on_and_sub_unit_ranges_count() -> None:
    src = parse_xml_sources(mjcf('<joint name="a" range="-1 1"/><joint name="b" range="-1 1" '
                                 'actuatorfrcrange="-0.5 0.25"/><joint name="c" range="-1 1"/>',
                                 '<motor joint="a" forcerange="-2 2"/><motor joint="c" forcerange="-0.5 0.5"/>'),
                            "/tmp/r.xml")
    assert src["a"].fields["has_effort_limits"] is True and src["a"].fields["max_effort"] == 2.0
    assert src["b"].fields["has_effort_limits"] is True and src["b"].fields["max_effort"] == 0.5
    assert src["c"].fields["has_effort_limits"] is True and src["c"].fields["max_effort"] == 0.5


# --- limits_table: the `omni-vla limits` CLI's JSON rows, table and help ---

TABLE_URDF = """<robot name="r"><link name="l0"/><link name="l1"/><link name="l2"/><link name="l3"/>
  <joint name="a" type="revolute"><parent link="l0"/><child link="l1"/>
    <limit lower="-1" upper="1" velocity="0.1234567" effort="3"/>
    <safety_controller soft_lower_limit="-0.5" soft_upper_limit="0.5" k_position="1"/></joint>
  <joint name="w" type="continuous"><parent link="l1"/><child link="l2"/><limit velocity="2"/></joint>
  <joint name="m" type="revolute"><parent link="l1"/><child link="l3"/><limit lower="-1" upper="1" velocity="1"/>
    <mimic joint="a"/></joint>
</robot>"""
TABLE_OVERLAY = "joint_limits:\n  a: {has_acceleration_limits: true, max_acceleration: 4.0}\n"


def _limits_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    from omni_vla_safety.limits_table import main as limits_main

    (tmp_path / "r.urdf").write_text(TABLE_URDF)
    (tmp_path / "over.yaml").write_text(TABLE_OVERLAY)
    code = limits_main([str(tmp_path / "r.urdf"), "--overlay", str(tmp_path / "over.yaml"), *extra])
    return code, capsys.readouterr().out


def test_cli_json_rows_give_each_limit_its_own_value_kind_note_soft_range_and_missing_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    code, out = _limits_cli(tmp_path, capsys, "--json")
    report = json.loads(out)
    rows = {r["joint"]: r for r in report["joints"]}
    assert code == 2 and report["accepted"] is False  # the continuous joint has no position limit
    a, w, m = rows["a"], rows["w"], rows["m"]
    assert {g: c["value"] for g, c in a["limits"].items()} == {
        "position": [-1.0, 1.0], "velocity": 0.1234567, "acceleration": 4.0, "effort": 3.0, "soft": [-0.5, 0.5]}
    assert (a["kind"], a["enforced"], a["missing"], a["problem"]) == ("revolute", True, [], "")
    assert "soft" not in w["limits"] and "soft" not in m["limits"]
    assert (w["kind"], w["note"], w["missing"]) == ("continuous", "continuous: no position limit",
                                                   ["position", "acceleration"])
    assert w["limits"]["position"] == {"value": None, "source": "missing"}  # its <joint type=continuous> is no limit
    assert (m["enforced"], m["follows"], m["missing"], m["problem"]) == (False, "a", [], "")


def test_cli_table_aligns_columns_marks_enforcement_rounds_values_and_prints_notes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _limits_cli(tmp_path, capsys)
    assert code == 2
    assert "\njoint  kind       enf position " in out
    assert "\na      revolute   yes [-1, 1]                0.123457 " in out
    assert "\nm      revolute   no  [-1, 1] " in out
    assert "\n    note: continuous: no position limit\n" in out and "    note: \n" not in out


def test_cli_help_describes_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    from omni_vla_safety.limits_table import main as limits_main

    with pytest.raises(SystemExit) as exc:
        limits_main(["--help"])
    assert exc.value.code == 0 and "what the supervisor would enforce" in " ".join(capsys.readouterr().out.split())
