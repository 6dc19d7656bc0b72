"""The simulated Panda matches the shared limits file and Franka's published kinematics."""
from __future__ import annotations

import mujoco
import numpy as np
import pytest

from omni_vla_sim import robot
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from servo_ripple import ripple_bound

# Franka's modified DH parameters (a, d, alpha) for joints 1..7 and the flange.
DH = [(0, 0.333, 0), (0, 0, -np.pi / 2), (0, 0.316, np.pi / 2), (0.0825, 0, np.pi / 2),
      (-0.0825, 0.384, -np.pi / 2), (0, 0, np.pi / 2), (0.088, 0, np.pi / 2)]
FLANGE = (0, 0.107, 0)


def _mdh(a: float, d: float, alpha: float, theta: float) -> np.ndarray:
    ca, sa, ct, st = np.cos(alpha), np.sin(alpha), np.cos(theta), np.sin(theta)
    return np.array([[ct, -st, 0, a], [st * ca, ct * ca, -sa, -d * sa], [st * sa, ct * sa, ca, d * ca], [0, 0, 0, 1]])


def _flange(q: np.ndarray) -> np.ndarray:
    t = np.eye(4)
    for (a, d, alpha), theta in zip(DH, q):
        t = t @ _mdh(a, d, alpha, theta)
    return t @ _mdh(*FLANGE, 0.0)


@pytest.fixture(scope="module")
def env() -> PandaTaskEnv:
    return PandaTaskEnv("pick_red", EnvConfig(render=False))


def test_mjcf_joint_and_actuator_ranges_agree_with_limits_file(env: PandaTaskEnv) -> None:
    limits = robot.load_limits()
    for i, name in enumerate(robot.JOINT_NAMES):
        lim = limits[name]
        jrange = env.model.joint(name).range
        act = env.model.actuator(i)
        assert env.model.actuator_trntype[i] == mujoco.mjtTrn.mjTRN_JOINT and act.trnid[0] == env.model.joint(name).id
        np.testing.assert_allclose(jrange, [lim.min_position, lim.max_position])
        np.testing.assert_allclose(act.ctrlrange, [lim.min_position, lim.max_position])
        np.testing.assert_allclose(act.forcerange, [-lim.max_effort, lim.max_effort])
        assert lim.has_velocity_limits and lim.has_acceleration_limits and lim.has_effort_limits


def test_arm_velocity_acceleration_and_jerk_limits_are_the_published_panda_values() -> None:
    limits = robot.load_limits()
    vel = [limits[f"panda_joint{i}"].max_velocity for i in range(1, 8)]
    acc = [limits[f"panda_joint{i}"].max_acceleration for i in range(1, 8)]
    jerk = [limits[f"panda_joint{i}"].max_jerk for i in range(1, 8)]
    np.testing.assert_allclose(vel, [2.175] * 4 + [2.61] * 3)
    np.testing.assert_allclose(acc, [15, 7.5, 10, 12.5, 15, 20, 20])
    np.testing.assert_allclose(jerk, [7500, 3750, 5000, 6250, 7500, 10000, 10000])


@pytest.mark.parametrize("seed", range(5))
def test_forward_kinematics_match_franka_dh_parameters(env: PandaTaskEnv, seed: int) -> None:
    rng = np.random.default_rng(seed)
    limits = robot.load_limits()
    q = np.array([rng.uniform(limits[j].min_position, limits[j].max_position) for j in robot.ARM_JOINTS])
    data = mujoco.MjData(env.model)
    data.qpos[env._qadr[:7]] = q
    mujoco.mj_kinematics(env.model, data)
    expected = _flange(q)
    hand = env.model.body("panda_hand").id
    np.testing.assert_allclose(data.xpos[hand], expected[:3, 3], atol=1e-6)
    # The hand is the flange rotated -45 degrees about z, as on the real robot.
    rz = _mdh(0, 0, 0, -np.pi / 4)[:3, :3]
    np.testing.assert_allclose(data.xmat[hand].reshape(3, 3), expected[:3, :3] @ rz, atol=1e-6)


def test_limits_file_missing_a_joint_is_refused(tmp_path) -> None:
    text = robot.DEFAULT_LIMITS_FILE.read_text()
    cut = text[: text.index("  panda_finger_joint1:")]
    bad = tmp_path / "limits.yaml"
    bad.write_text(cut)
    with pytest.raises(ValueError, match="panda_finger_joint1"):
        robot.load_limits(bad)


def _follow_late(env: PandaTaskEnv, joint: int, late: int) -> tuple[float, float]:
    """Commands at 90% of the joint's velocity limit, one per 100 Hz period but applied `late` at once (the last of
    each group; the gripper's travel holds 17 periods, so at 10 and 12 late it is one jump from rest, as when the sim
    resumes after a stall); the servo sampled every physics step. Returns the largest reported velocity and the
    largest over one period of positions, each over the commands' velocity."""
    env.reset(seed=1)
    name = robot.JOINT_NAMES[joint]
    lim = robot.load_limits()[name]
    target = env.joint_state()[0]
    target[joint] = lim.min_position + 0.1 * (lim.max_position - lim.min_position)
    env.set_targets(target)
    env.advance(300)
    speed = 0.9 * lim.max_velocity
    steps = round(0.01 / env.config.physics_dt)
    periods = min(60, int(0.8 * (lim.max_position - lim.min_position) / (speed * 0.01)))
    reported, positions = [], []
    for k in range(periods):
        target[joint] += speed * 0.01
        if (k + 1) % late == 0:
            env.set_targets(target)
        for _ in range(steps):
            env.advance(1)
            q, v = env.joint_state()
            reported.append(abs(v[joint]))
            positions.append(q[joint])
    pos = np.array(positions)
    over_period = np.abs(pos[steps:] - pos[:-steps]) / 0.01
    return max(reported) / speed, float(over_period.max()) / speed


@pytest.mark.parametrize("late", [1, 2, 3, 4, 6, 10, 12])
@pytest.mark.parametrize("joint", [0, 3, 5, 7], ids=["joint1", "joint4", "joint6", "gripper"])
def test_the_servo_outruns_commands_that_reach_it_late_by_no_more_than_the_ripple_bound(
        env: PandaTaskEnv, joint: int, late: int) -> None:
    reported, over_period = _follow_late(env, joint, late)
    assert reported <= ripple_bound(late) and over_period <= ripple_bound(late), (reported, over_period)
    if late >= 4:  # the catching up is real: judged against the stream's velocity alone, a late stream would fail
        assert max(reported, over_period) > 1.05, (reported, over_period)
