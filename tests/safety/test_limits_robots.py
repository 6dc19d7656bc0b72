"""Limits of real robot descriptions (shipped in PyPI wheels) equal MuJoCo's own compiled model.

The supervisor parses URDF/MJCF with the stdlib only; here MuJoCo is the reference: every
hinge/slide joint's range (narrowed by a position servo's ctrlrange/gear) and effort must
match what `mujoco` compiles, name by name.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import mujoco
import pytest
from mujoco_robot_limits import DESCRIPTIONS, ROBOTS, compile_without_meshes, mujoco_limits

from omni_vla_safety.limits import LimitsError, load_enforced_limits, load_limit_sets, load_sources
from omni_vla_safety.limits_table import main as limits_main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("robot", sorted(DESCRIPTIONS))
def test_real_description_limits_equal_mujoco_compiled_model(robot: str) -> None:
    path = ROBOTS / DESCRIPTIONS[robot]
    expected = mujoco_limits(compile_without_meshes(path))
    sets = load_limit_sets(path)
    assert set(sets) == set(expected)
    for joint, (lo, hi, effort) in expected.items():
        hard = sets[joint].hard
        assert hard.has_position_limits == math.isfinite(lo), joint
        if hard.has_position_limits:
            assert abs(hard.min_position - lo) < 1e-9 and abs(hard.max_position - hi) < 1e-9, joint
        assert hard.max_effort == pytest.approx(effort, abs=1e-9), joint


def test_joint_limits_of_the_dof_counts_we_claim() -> None:
    counts = {robot: sum(not js.follows for js in load_sources(ROBOTS / rel).values())
              for robot, rel in DESCRIPTIONS.items()}
    assert counts == {"aloha_vx300s": 16, "kitchen_franka": 9, "panda_2f85": 14, "iiwa": 7, "ur5e": 6,
                      "kinova3": 7, "panda_urdf": 8, "sawyer_urdf": 7}


@pytest.mark.parametrize("robot, joint, message", [
    ("aloha_vx300s", "vx300s_left/waist", "missing velocity and acceleration limits"),
    ("kitchen_franka", "robot:panda0_joint1", "missing velocity and acceleration limits"),
    ("iiwa", "joint_1", "missing velocity and acceleration limits"),
    ("ur5e", "shoulder_pan_joint", "missing velocity and acceleration limits"),
    ("kinova3", "Actuator1", "missing position, velocity and acceleration limits"),
    ("panda_urdf", "panda_joint1", "missing acceleration limit (has_acceleration_limits)"),
    ("sawyer_urdf", "right_j0", "missing acceleration limit (has_acceleration_limits)"),
])
def test_real_description_refused_for_supervisor_naming_joint_and_missing_field(
        robot: str, joint: str, message: str) -> None:
    with pytest.raises(LimitsError) as info:
        load_enforced_limits(ROBOTS / DESCRIPTIONS[robot], [joint])
    text = str(info.value)
    assert "\n" not in text and f"joint '{joint}' is {message}" in text


def test_compiler_radian_in_an_included_file_applies_to_the_whole_model() -> None:
    """aloha's ranges are radians because vx300s_dependencies.xml (an include) says so."""
    sets = load_limit_sets(ROBOTS / DESCRIPTIONS["aloha_vx300s"])
    assert sets["vx300s_left/waist"].hard.max_position == 3.14158
    assert sets["vx300s_right/elbow"].hard.min_position == -1.76278


def _write(tmp: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    return tmp / next(iter(files))


def test_nested_includes_with_compiler_and_defaults_in_included_files_match_mujoco(tmp_path: Path) -> None:
    main = _write(tmp_path, {
        "robot.xml": '<mujoco><include file="parts/settings.xml"/>'
                     '<worldbody><body childclass="arm"><include file="parts/chain.xml"/></body></worldbody>'
                     '<include file="parts/actuators.xml"/></mujoco>',
        "parts/settings.xml": '<mujoco><include file="compiler.xml"/><default><default class="arm">'
                              '<joint range="-1 1"/><position ctrlrange="-0.5 0.5"/></default></default></mujoco>',
        "parts/compiler.xml": '<mujocoinclude><compiler angle="radian"/></mujocoinclude>',
        "parts/chain.xml": '<mujocoinclude><joint name="a"/><geom size="0.1"/>'
                           '<body><joint name="b" range="-2 2"/><geom size="0.1"/></body></mujocoinclude>',
        "parts/actuators.xml": '<mujoco><actuator><position joint="a" class="arm"/>'
                               '<position joint="b"/></actuator></mujoco>',
    })
    sets = load_limit_sets(main)
    expected = mujoco_limits(mujoco.MjModel.from_xml_path(str(main)))
    assert (sets["a"].hard.min_position, sets["a"].hard.max_position) == (-0.5, 0.5) == expected["a"][:2]
    assert (sets["b"].hard.min_position, sets["b"].hard.max_position) == (-2.0, 2.0) == expected["b"][:2]


def test_file_included_twice_or_missing_refused_naming_the_include(tmp_path: Path) -> None:
    twice = _write(tmp_path, {"m.xml": '<mujoco><include file="p.xml"/><include file="p.xml"/></mujoco>',
                              "p.xml": "<mujoco/>"})
    with pytest.raises(LimitsError, match=r"m\.xml:1 <include file='p\.xml'>.*already included"):
        load_limit_sets(twice)
    (tmp_path / "p.xml").unlink()
    with pytest.raises(LimitsError, match=r"cannot read included file"):
        load_limit_sets(twice)


DEFAULTS = """<mujoco>
  <default>
    <joint range="-10 10"/>
    <motor ctrlrange="-1 1"/>
    <default class="upper"><joint range="-90 45"/>
      <default class="wrist"><joint type="slide"/><position ctrlrange="0.1 0.2"/></default>
    </default>
  </default>
  <worldbody>
    <body><joint name="base"/><geom size="0.1"/>
      <body childclass="upper"><joint name="shoulder"/><geom size="0.1"/>
        <frame childclass="wrist"><body><joint name="slider" range="0 0.5"/><geom size="0.1"/>
          <body><joint name="plain" class="main"/><geom size="0.1"/></body>
        </body></frame>
      </body>
    </body>
  </worldbody>
  <actuator><position joint="slider" class="wrist"/><position joint="shoulder" class="upper" kp="5"/></actuator>
</mujoco>"""


def test_default_classes_nested_childclass_and_class_override_match_mujoco(tmp_path: Path) -> None:
    path = _write(tmp_path, {"d.xml": DEFAULTS})
    sets, expected = load_limit_sets(path), mujoco_limits(mujoco.MjModel.from_xml_path(str(path)))
    for joint, (lo, hi, _) in expected.items():
        assert (sets[joint].hard.min_position, sets[joint].hard.max_position) == pytest.approx((lo, hi), abs=1e-12)
    assert sets["shoulder"].hard.max_position == pytest.approx(math.radians(45))
    assert sets["slider"].hard.min_position == 0.1  # wrist class: slide, ctrlrange narrows 0..0.5
    assert sets["shoulder"].hard.min_position == -1.0  # motor default's ctrlrange is shared by <position>
    assert sets["plain"].hard.max_position == pytest.approx(math.radians(10))


@pytest.mark.parametrize("actuator, lo, hi", [
    ('<position joint="j" ctrlrange="-1 1"/>', -1.0, 1.0),  # degrees range, ctrlrange not converted
    ('<position joint="j" ctrlrange="-1 1" gear="2"/>', -0.5, 0.5),
    ('<position joint="j" inheritrange="0.5"/>', -math.pi / 4, math.pi / 4),
    ('<general joint="j" ctrlrange="-0.2 3" biastype="affine" gainprm="7" biasprm="0 -7 -1"/>', -0.2, math.pi / 2),
    ('<general joint="j" ctrlrange="-0.2 3" biastype="affine" gainprm="7" biasprm="0 0 -1"/>',
     -math.pi / 2, math.pi / 2),
    ('<motor joint="j" ctrlrange="-0.2 0.3"/>', -math.pi / 2, math.pi / 2),
])
def test_position_servo_ctrlrange_narrows_the_range_as_mujoco_compiles_it(
        tmp_path: Path, actuator: str, lo: float, hi: float) -> None:
    path = _write(tmp_path, {"n.xml": '<mujoco><worldbody><body><joint name="j" range="-90 90"/><geom size="0.1"/>'
                                      f'</body></worldbody><actuator>{actuator}</actuator></mujoco>'})
    hard = load_limit_sets(path)["j"].hard
    assert (hard.min_position, hard.max_position) == pytest.approx((lo, hi), abs=1e-12)
    assert mujoco_limits(mujoco.MjModel.from_xml_path(str(path)))["j"][:2] == pytest.approx((lo, hi), abs=1e-12)


def test_range_without_limited_refused_when_autolimits_is_false_like_mujoco(tmp_path: Path) -> None:
    path = _write(tmp_path, {"a.xml": '<mujoco><compiler autolimits="false"/><worldbody><body>'
                                      '<joint name="j" range="-1 1"/><geom size="0.1"/></body></worldbody></mujoco>'})
    with pytest.raises(LimitsError, match="joint 'j'.*autolimits"):
        load_limit_sets(path)
    with pytest.raises(ValueError):
        mujoco.MjModel.from_xml_path(str(path))


def test_coupled_finger_reported_as_following_and_not_enforceable() -> None:
    sources = load_sources(ROBOTS / DESCRIPTIONS["panda_2f85"])
    assert sources["right_driver_joint"].follows == "left_driver_joint"
    assert not sources["left_driver_joint"].follows and not sources["joint1"].follows
    with pytest.raises(LimitsError, match="joint 'right_driver_joint' follows 'left_driver_joint'"):
        load_enforced_limits(ROBOTS / DESCRIPTIONS["panda_2f85"], ["right_driver_joint"])


def test_sim_panda_mjcf_matches_mujoco_and_its_passive_finger_follows_the_driven_one(tmp_path: Path) -> None:
    from omni_vla_sim import robot

    path = tmp_path / "panda.xml"
    path.write_text(robot.panda_xml(robot.load_limits(), "", 64))
    sets, expected = load_limit_sets(path), mujoco_limits(mujoco.MjModel.from_xml_path(str(path)))
    for joint, (lo, hi, effort) in expected.items():
        assert (sets[joint].hard.min_position, sets[joint].hard.max_position) == pytest.approx((lo, hi), abs=1e-9)
        assert sets[joint].hard.max_effort == pytest.approx(effort)
    assert load_sources(path)["panda_finger_joint2"].follows == "panda_finger_joint1"
    with pytest.raises(LimitsError, match="joint 'panda_joint1' is missing velocity and acceleration"):
        load_enforced_limits(path, robot.JOINT_NAMES)
    enforced = load_enforced_limits(path, robot.JOINT_NAMES, REPO / "config" / "joint_limits.yaml")
    assert [s.hard.max_velocity for s in enforced][:2] == [2.175, 2.175]


URDF = """<robot name="r">
  <link name="a"/><link name="b"/><link name="c"/><link name="d"/><link name="e"/><link name="f"/>
  <joint name="wheel" type="continuous"><parent link="a"/><child link="b"/><limit velocity="2" effort="5"/></joint>
  <joint name="lift" type="prismatic"><parent link="b"/><child link="c"/>
    <limit lower="0" upper="0.3" velocity="0" effort="0"/></joint>
  <joint name="copy" type="prismatic"><parent link="b"/><child link="d"/>
    <limit lower="0" upper="0.3" velocity="0.1" effort="9"/><mimic joint="lift" multiplier="-1"/></joint>
  <joint name="bolt" type="fixed"><parent link="c"/><child link="e"/></joint>
  <joint name="elbow" type="revolute"><parent link="c"/><child link="f"/>
    <limit lower="-1" upper="1" velocity="1.5" effort="30"/></joint>
</robot>"""
OVERLAY = """joint_limits:
  wheel: {has_position_limits: true, min_position: -3.0, max_position: 3.0,
          has_acceleration_limits: true, max_acceleration: 4.0}
  lift: {has_velocity_limits: true, max_velocity: 0.2, has_acceleration_limits: true, max_acceleration: 1.0}
  elbow: {has_acceleration_limits: true, max_acceleration: 5.0}
"""


def test_urdf_continuous_mimic_fixed_and_zero_velocity(tmp_path: Path) -> None:
    path = _write(tmp_path, {"r.urdf": URDF})
    sources, sets = load_sources(path), load_limit_sets(path)
    assert set(sets) == {"wheel", "lift", "copy", "elbow"}  # fixed skipped
    assert not sets["wheel"].hard.has_position_limits and sets["wheel"].hard.angle_wraparound
    assert not sets["lift"].hard.has_velocity_limits and not sets["lift"].hard.has_effort_limits  # 0 = not given
    assert math.isinf(sets["lift"].hard.max_velocity)
    assert sources["copy"].follows == "lift" and "multiplier -1" in sources["copy"].note
    with pytest.raises(LimitsError, match=r"joint 'wheel' is missing position and acceleration limits "
                                          r"\(continuous joint\)"):
        load_enforced_limits(path, ["wheel"])
    with pytest.raises(LimitsError, match="joint 'lift' is missing velocity and acceleration limits"):
        load_enforced_limits(path, ["lift"])
    with pytest.raises(LimitsError, match="joint 'copy' follows 'lift'"):
        load_enforced_limits(path, ["copy"])


def test_overlay_completes_missing_velocity_acceleration_and_range_then_supervisor_accepts(tmp_path: Path) -> None:
    path = _write(tmp_path, {"r.urdf": URDF, "over.yaml": OVERLAY})
    wheel, lift, elbow = load_enforced_limits(path, ["wheel", "lift", "elbow"], tmp_path / "over.yaml")
    assert (wheel.hard.min_position, wheel.hard.max_position, wheel.hard.max_velocity) == (-3.0, 3.0, 2.0)
    assert (lift.hard.max_velocity, lift.hard.max_acceleration, lift.hard.max_position) == (0.2, 1.0, 0.3)
    assert (elbow.hard.max_velocity, elbow.hard.max_acceleration) == (1.5, 5.0)


def test_cli_prints_table_with_origins_and_exits_2_on_a_missing_limit(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, {"r.urdf": URDF})
    assert limits_main([str(path), "--joints", "elbow,lift"]) == 2
    out = capsys.readouterr().out
    assert "r.urdf:10 <limit lower upper>" in out and "velocity: missing" in out
    assert "joint 'lift' is missing velocity and acceleration limits" in out and "REFUSE" in out


def test_cli_exits_0_when_an_overlay_completes_every_enforced_joint(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, {"r.urdf": URDF, "over.yaml": OVERLAY})
    assert limits_main([str(path), "--overlay", str(tmp_path / "over.yaml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["accepted"] is True
    rows = {r["joint"]: r for r in report["joints"]}
    assert rows["copy"]["enforced"] is False and rows["copy"]["follows"] == "lift"
    assert rows["lift"]["limits"]["velocity"]["value"] == 0.2
    assert rows["lift"]["limits"]["velocity"]["source"].startswith("overlay over.yaml:4 joint_limits.lift.")
    assert rows["lift"]["limits"]["position"]["source"] == "r.urdf:5 <limit lower upper>"


@pytest.mark.parametrize("make", [
    lambda tmp: tmp / "absent.urdf",
    lambda tmp: _write(tmp, {"broken.xml": "<mujoco><worldbody>"}),
    lambda tmp: tmp,
])
def test_cli_bad_path_or_unreadable_file_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          make) -> None:
    assert limits_main([str(make(tmp_path))]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("omni-vla limits: ") and "Traceback" not in captured.err


def test_cli_verb_registered() -> None:
    from omni_vla.tools.cli import VERBS

    assert VERBS["limits"] == ("omni_vla_safety.limits_table", "main")


@pytest.mark.parametrize("first, last, degrees", [("radian", "degree", True), ("degree", "radian", False)])
def test_last_compiler_angle_wins_even_across_includes_like_mujoco(tmp_path: Path, first: str, last: str,
                                                                 degrees: bool) -> None:
    main = _write(tmp_path, {
        "m.xml": f'<mujoco><include file="c.xml"/><worldbody><body><joint name="j" range="-1 1"/>'
                 f'<geom size="0.1"/></body></worldbody><compiler angle="{last}"/></mujoco>',
        "c.xml": f'<mujoco><compiler angle="{first}"/></mujoco>',
    })
    hi = load_limit_sets(main)["j"].hard.max_position
    assert hi == pytest.approx(math.radians(1) if degrees else 1.0)
    assert mujoco_limits(mujoco.MjModel.from_xml_path(str(main)))["j"][1] == pytest.approx(hi, abs=1e-12)


def test_nested_include_resolves_against_the_main_model_directory_first_like_mujoco(tmp_path: Path) -> None:
    body = '<mujoco><worldbody><body><joint name="j" range="{}"/><geom size="0.1"/></body></worldbody></mujoco>'
    main = _write(tmp_path, {"m.xml": '<mujoco><include file="sub/a.xml"/></mujoco>',
                             "sub/a.xml": '<mujoco><include file="b.xml"/></mujoco>',
                             "b.xml": body.format("0 90"), "sub/b.xml": body.format("0 45")})
    expected = mujoco_limits(mujoco.MjModel.from_xml_path(str(main)))["j"][1]
    assert load_limit_sets(main)["j"].hard.max_position == pytest.approx(expected, abs=1e-12)
    (tmp_path / "b.xml").unlink()  # then MuJoCo falls back to the including file's directory
    expected = mujoco_limits(mujoco.MjModel.from_xml_path(str(main)))["j"][1]
    assert load_limit_sets(main)["j"].hard.max_position == pytest.approx(expected, abs=1e-12) \
        == pytest.approx(math.radians(45))
