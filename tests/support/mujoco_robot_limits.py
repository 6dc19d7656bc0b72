"""MuJoCo's own compiled limits of the robot descriptions under tests/data/robots (shipped in PyPI wheels): the
reference the supervisor's URDF/MJCF parsing is checked against, and where the fuzzing oracle's robots take
their position ranges from (tests/safety/safety_robots.py)."""
from __future__ import annotations

import math
from pathlib import Path

import mujoco

REPO = Path(__file__).resolve().parents[2]
ROBOTS = REPO / "tests" / "data" / "robots"
DESCRIPTIONS = {
    "aloha_vx300s": "aloha_vx300s/bimanual_viperx_transfer_cube.xml",
    "kitchen_franka": "kitchen_franka/kitchen_assets/franka_kitchen_robot.xml",
    "panda_2f85": "panda_2f85/panda.xml",
    "iiwa": "robosuite_iiwa/robot.xml",
    "ur5e": "robosuite_ur5e/robot.xml",
    "kinova3": "robosuite_kinova3/robot.xml",
    "panda_urdf": "robosuite_panda_urdf/panda_arm_hand.urdf",
    "sawyer_urdf": "robosuite_sawyer_urdf/sawyer_arm.urdf",
}
HINGE_SLIDE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))


def compile_without_meshes(path: Path) -> mujoco.MjModel:
    """MuJoCo's model of `path` with mesh geoms turned into spheres (meshes are not shipped)."""
    spec = mujoco.MjSpec.from_file(str(path))
    for geom in spec.geoms:
        if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
            geom.type, geom.size, geom.meshname = mujoco.mjtGeom.mjGEOM_SPHERE, [0.01, 0, 0], ""
    for mesh in list(spec.meshes):
        spec.delete(mesh)
    for texture in list(spec.textures):
        if texture.file:
            spec.delete(texture)
    return spec.compile()


def _is_position_servo(model: mujoco.MjModel, a: int) -> bool:
    gain, bias = model.actuator_gainprm[a], model.actuator_biasprm[a]
    return (model.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_AFFINE
            and model.actuator_gaintype[a] == mujoco.mjtGain.mjGAIN_FIXED
            and gain[0] > 0 and bias[0] == 0 and bias[1] == -gain[0])


def _is_motor(model: mujoco.MjModel, a: int) -> bool:
    return (model.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_NONE and model.actuator_gainprm[a][0] == 1
            and model.actuator_dyntype[a] == mujoco.mjtDyn.mjDYN_NONE)


def mujoco_limits(model: mujoco.MjModel) -> dict[str, tuple[float, float, float]]:
    """joint -> (min, max, effort) as MuJoCo compiled them; inf where MuJoCo has no limit."""
    out = {}
    for j in range(model.njnt):
        if int(model.jnt_type[j]) not in HINGE_SLIDE:
            continue
        lo, hi = model.jnt_range[j] if model.jnt_limited[j] else (-math.inf, math.inf)
        effort = max(abs(model.jnt_actfrcrange[j])) if model.jnt_actfrclimited[j] else math.inf
        for a in range(model.nu):
            if model.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT or model.actuator_trnid[a][0] != j:
                continue
            gear = model.actuator_gear[a][0]
            if model.actuator_ctrllimited[a] and _is_position_servo(model, a):
                c_lo, c_hi = sorted(model.actuator_ctrlrange[a] / gear)
                lo, hi = max(lo, c_lo), min(hi, c_hi)
            if model.actuator_ctrllimited[a] and _is_motor(model, a):
                effort = min(effort, max(abs(model.actuator_ctrlrange[a])) * abs(gear))
            if model.actuator_forcelimited[a]:
                effort = min(effort, max(abs(model.actuator_forcerange[a])))
        out[mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j)] = (lo, hi, effort)
    return out
