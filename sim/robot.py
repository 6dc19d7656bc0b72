"""Franka Panda MJCF built from primitive geoms, with limits from the shared joint_limits file.

Kinematics follow Franka's published (modified DH) parameters; nothing is downloaded.
"""
from __future__ import annotations

from pathlib import Path

from omni_vla_safety.limits import JointLimits, load_joint_limits

ARM_JOINTS: tuple[str, ...] = tuple(f"panda_joint{i}" for i in range(1, 8))
GRIPPER_JOINT = "panda_finger_joint1"
JOINT_NAMES: tuple[str, ...] = ARM_JOINTS + (GRIPPER_JOINT,)
# The cameras the scene renders (panda_xml: "wrist" on the hand, "front" on the table), by the names policies use.
CAMERAS: tuple[str, ...] = ("front", "wrist")
HOME_QPOS: tuple[float, ...] = (0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04)
DEFAULT_LIMITS_FILE = Path(__file__).resolve().parent.parent / "config" / "joint_limits.yaml"

# (body pos, body quat) of link i in link i-1, Franka's modified DH frames.
_LINK_FRAMES = (
    ("0 0 0.333", "1 0 0 0"),
    ("0 0 0", "1 -1 0 0"),
    ("0 -0.316 0", "1 1 0 0"),
    ("0.0825 0 0", "1 1 0 0"),
    ("-0.0825 0.384 0", "1 -1 0 0"),
    ("0 0 0", "1 1 0 0"),
    ("0.088 0 0", "1 1 0 0"),
)
# Primitive link shapes (capsule fromto in the link's own frame) and masses (kg).
_LINK_GEOMS = (
    ("0 0 -0.19 0 0 0", 0.06, 4.0),
    ("0 0 -0.06 0 0 0.06", 0.06, 0.65),
    ("0 0 -0.12 0 0 0", 0.055, 3.2),
    ("0 0 -0.05 0 0 0.05", 0.055, 3.6),
    ("0 0 -0.22 0 0 0", 0.05, 1.2),
    ("0 0 -0.02 0.088 0 -0.02", 0.045, 1.5),
    ("0 0 -0.02 0 0 0.07", 0.04, 0.5),
)
_KP = (4500, 4500, 3500, 3500, 2000, 2000, 2000)
_KV = (450, 450, 350, 350, 200, 200, 200)


def load_limits(path: str | Path | None = None) -> dict[str, JointLimits]:
    """Limits for every robot joint; refuses a file that misses one."""
    limits = load_joint_limits(path or DEFAULT_LIMITS_FILE)
    missing = [j for j in JOINT_NAMES if j not in limits]
    if missing:
        raise ValueError(f"joint limits file {path or DEFAULT_LIMITS_FILE} misses joints {missing}")
    return limits


def _arm_xml(limits: dict[str, JointLimits]) -> str:
    close = ""
    xml = ""
    for i, ((pos, quat), (fromto, radius, mass)) in enumerate(zip(_LINK_FRAMES, _LINK_GEOMS), start=1):
        lim = limits[f"panda_joint{i}"]
        xml += (
            f'<body name="panda_link{i}" pos="{pos}" quat="{quat}" gravcomp="1">'
            f'<joint name="panda_joint{i}" range="{lim.min_position} {lim.max_position}" '
            f'actuatorfrcrange="{-lim.max_effort} {lim.max_effort}"/>'
            f'<geom class="link" fromto="{fromto}" size="{radius}" mass="{mass}"/>'
        )
        close += "</body>"
    grip = limits[GRIPPER_JOINT]
    hand = (
        '<body name="panda_hand" pos="0 0 0.107" quat="0.9238795 0 0 -0.3826834" gravcomp="1">'
        '<geom class="hand" type="box" size="0.02 0.1 0.025" pos="0 0 0.03" mass="0.6"/>'
        '<geom class="link" type="cylinder" size="0.04 0.01" pos="0 0 0.0" mass="0.1"/>'
        '<site name="grip" pos="0 0 0.1034" size="0.005" rgba="1 0 0 0.5"/>'
        '<camera name="wrist" pos="0.07 0 0.02" quat="0 1 0 0" fovy="75"/>'
        '<body name="panda_leftfinger" pos="0 0 0.0584" gravcomp="1">'
        f'<joint name="{GRIPPER_JOINT}" type="slide" axis="0 1 0" range="{grip.min_position} {grip.max_position}" '
        f'actuatorfrcrange="{-grip.max_effort} {grip.max_effort}" damping="10"/>'
        '<geom class="finger" size="0.009 0.006 0.027" pos="0 0.006 0.027"/>'
        '</body>'
        '<body name="panda_rightfinger" pos="0 0 0.0584" gravcomp="1">'
        f'<joint name="panda_finger_joint2" type="slide" axis="0 -1 0" range="{grip.min_position} {grip.max_position}" damping="10"/>'
        '<geom class="finger" size="0.009 0.006 0.027" pos="0 -0.006 0.027"/>'
        '</body>'
        '</body>'
    )
    return xml + hand + close


def _actuators_xml(limits: dict[str, JointLimits]) -> str:
    xml = ""
    for i, (kp, kv) in enumerate(zip(_KP, _KV), start=1):
        lim = limits[f"panda_joint{i}"]
        xml += (
            f'<position name="act_joint{i}" joint="panda_joint{i}" kp="{kp}" kv="{kv}" '
            f'ctrlrange="{lim.min_position} {lim.max_position}" forcerange="{-lim.max_effort} {lim.max_effort}"/>'
        )
    grip = limits[GRIPPER_JOINT]
    xml += (
        f'<position name="act_gripper" joint="{GRIPPER_JOINT}" kp="1500" kv="40" '
        f'ctrlrange="{grip.min_position} {grip.max_position}" forcerange="{-grip.max_effort} {grip.max_effort}"/>'
    )
    return xml


def panda_xml(limits: dict[str, JointLimits], objects_xml: str, image_size: int) -> str:
    """The whole scene: table, arm, gripper, cameras, plus the task objects given by sim/tasks."""
    offsize = max(image_size, 256)
    return f"""
<mujoco model="omni_vla_panda">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.002" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual>
    <global offwidth="{offsize}" offheight="{offsize}"/>
    <quality offsamples="0" shadowsize="0"/>
    <headlight ambient="0.5 0.5 0.5" diffuse="0.5 0.5 0.5"/>
  </visual>
  <default>
    <joint armature="0.1" damping="1"/>
    <default class="link"><geom type="capsule" contype="0" conaffinity="0" rgba="0.92 0.92 0.95 1"/></default>
    <default class="hand"><geom contype="1" conaffinity="1" rgba="0.25 0.25 0.28 1"/></default>
    <default class="finger"><geom type="box" contype="1" conaffinity="1" condim="4" friction="2 0.05 0.001"
        solref="0.004 1" rgba="0.3 0.3 0.33 1" mass="0.05"/></default>
    <default class="object"><geom contype="1" conaffinity="1" condim="4" friction="1.5 0.02 0.0005" solref="0.004 1"/></default>
  </default>
  <asset>
    <texture name="grid" type="2d" builtin="checker" width="64" height="64" rgb1="0.55 0.45 0.35" rgb2="0.5 0.4 0.3"/>
    <material name="table" texture="grid" texrepeat="6 6"/>
  </asset>
  <worldbody>
    <light pos="0.5 0 1.5" dir="0 0 -1" directional="true" castshadow="false"/>
    <geom name="table" type="box" pos="0.45 0 -0.02" size="0.6 0.6 0.02" material="table" contype="1" conaffinity="1"/>
    <camera name="front" pos="1.3 0 0.8" xyaxes="0 1 0 -0.6 0 0.9" fovy="58"/>
    <body name="panda_link0">
      <geom class="link" type="cylinder" size="0.08 0.05" pos="0 0 0.05" mass="4"/>
      {_arm_xml(limits)}
    </body>
    {objects_xml}
  </worldbody>
  <equality>
    <joint joint1="{GRIPPER_JOINT}" joint2="panda_finger_joint2" polycoef="0 1 0 0 0" solref="0.005 1"/>
  </equality>
  <actuator>{_actuators_xml(limits)}</actuator>
</mujoco>
"""
