"""Scripted experts on privileged state: Cartesian waypoints solved by damped-least-squares IK.

Targets are rate-limited to a fraction of each joint's velocity limit and clipped inside the
position limits, so demonstrations never command what the supervisor would refuse.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from omni_vla_sim import tasks
from omni_vla_sim.env import PandaTaskEnv
from omni_vla_sim.waypoints import APPROACH_Z, CLOSED, OPEN, Waypoint, body_yaw, grasp_yaw

__all__ = ["APPROACH_Z", "CLOSED", "OPEN", "DlsIk", "ScriptedExpert", "Waypoint", "make_plan", "run_episode"]

_grasp_yaw, _yaw_of = grasp_yaw, body_yaw  # the names the expert's tests know them by

SPEED = 0.25  # m/s of the grip site along a segment
VEL_FRACTION = 0.8  # of each joint's velocity limit
POS_MARGIN = 0.05  # rad kept from each position limit
Q_REST = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])


class DlsIk:
    """Position + orientation IK on a scratch copy of the model (never touches the env state)."""

    def __init__(self, env: PandaTaskEnv, damping: float = 0.05) -> None:
        self.model, self.data = env.model, mujoco.MjData(env.model)
        self.qadr = env._qadr[:7]
        self.dadr = env._dadr[:7]
        self.site = env._grip_site
        self.damping = damping
        self.jacp = np.zeros((3, self.model.nv))
        self.jacr = np.zeros((3, self.model.nv))

    def solve(self, q: np.ndarray, pos: np.ndarray, yaw: float, iters: int = 30) -> np.ndarray:
        target_rot = _down_rotation(yaw)
        q = q.copy()
        for _ in range(iters):
            self.data.qpos[self.qadr] = q
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_comPos(self.model, self.data)
            cur = self.data.site_xpos[self.site]
            rot = self.data.site_xmat[self.site].reshape(3, 3)
            err = np.concatenate([pos - cur, _rotation_error(rot, target_rot)])
            if np.linalg.norm(err[:3]) < 1e-4 and np.linalg.norm(err[3:]) < 1e-3:
                break
            mujoco.mj_jacSite(self.model, self.data, self.jacp, self.jacr, self.site)
            jac = np.vstack([self.jacp[:, self.dadr], self.jacr[:, self.dadr]])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + self.damping**2 * np.eye(6), err)
            null = np.eye(7) - np.linalg.pinv(jac) @ jac
            dq += null @ (0.1 * (Q_REST - q))
            q = q + np.clip(dq, -0.3, 0.3)
        return q


def _down_rotation(yaw: float) -> np.ndarray:
    """Grip frame pointing at the table (z down), fingers closing along rotated y."""
    c, s = np.cos(yaw), np.sin(yaw)
    rz = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    flip = np.array([[1, 0, 0], [0, -1, 0], [0, 0, -1]])
    return rz @ flip


def _rotation_error(cur: np.ndarray, target: np.ndarray) -> np.ndarray:
    r = target @ cur.T
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, r.flatten())
    vel = np.zeros(3)
    mujoco.mju_quat2Vel(vel, quat, 1.0)
    return vel


@dataclass
class ScriptedExpert:
    """Follows the task's waypoint plan; `act(env)` returns the next absolute joint target."""

    env: PandaTaskEnv
    plan: list[Waypoint] = field(default_factory=list)
    grasp_offset: float = 0.0  # m along the fingers (where a closing grip cannot centre the cube); 0 = centred
    _q_cmd: np.ndarray | None = None
    _target: np.ndarray | None = None
    _held: int = 0
    _carry_offset: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def __post_init__(self) -> None:
        self.ik = DlsIk(self.env)
        names = [f"panda_joint{i}" for i in range(1, 8)]
        lim = [self.env.limits[n] for n in names]
        self.q_lo = np.array([l.min_position for l in lim]) + POS_MARGIN
        self.q_hi = np.array([l.max_position for l in lim]) - POS_MARGIN
        self.v_max = np.array([l.max_velocity for l in lim]) * VEL_FRACTION
        g = self.env.limits["panda_finger_joint1"]
        self.g_step = g.max_velocity * VEL_FRACTION / self.env.config.control_hz
        self.dt = 1.0 / self.env.config.control_hz

    def reset(self) -> None:
        self.plan = make_plan(self.env, self.grasp_offset)
        self._q_cmd = self.env.joint_state()[0]
        self._target = self.env.world_state().grip
        self._held = 0
        self._carry_offset = np.zeros(3)

    def act(self) -> np.ndarray:
        if self._q_cmd is None:
            self.reset()
        assert self._q_cmd is not None and self._target is not None
        wp = self.plan[0] if self.plan else None
        w = self.env.world_state()
        grip = w.grip
        if wp is not None:
            goal = self._goal(wp, w)
            delta = goal - self._target
            dist = np.linalg.norm(delta)
            step = SPEED * self.dt
            self._target = goal.copy() if dist <= step else self._target + delta / dist * step
            reached = dist <= step and np.linalg.norm(grip - goal) < wp.tol
            gripper_done = abs(self._q_cmd[7] - wp.gripper) < 1e-9
            if reached and gripper_done:
                self._held += 1
                if self._held > wp.hold:
                    self.plan.pop(0)
                    self._held = 0
            yaw, gripper = wp.yaw, wp.gripper
        else:
            yaw, gripper = self._last_yaw, self._q_cmd[7]
        self._last_yaw = yaw
        q_des = self.ik.solve(self._q_cmd[:7], self._target, yaw)
        q_des = np.clip(q_des, self.q_lo, self.q_hi)
        dq = np.clip(q_des - self._q_cmd[:7], -self.v_max * self.dt, self.v_max * self.dt)
        self._q_cmd[:7] += dq
        self._q_cmd[7] += np.clip(gripper - self._q_cmd[7], -self.g_step, self.g_step)
        return self._q_cmd.copy()

    def _goal(self, wp: Waypoint, w: tasks.WorldState) -> np.ndarray:
        """Where the grip goes for `wp`: shifted by how far off-centre the carried object sits in it.

        The offset is tracked while the object is held and kept once it is released, so the grip does
        not jump sideways as the fingers open. The expert's own grasps are centred (offset ~0); a policy
        that drove before a recovery hand-over may have grasped 1-2 cm off, which the placement corrects.
        """
        if wp.carried is None:
            return wp.pos
        if wp.carried in w.holding:
            self._carry_offset[:2] = w.grip[:2] - self.env.body_pos(wp.carried)[:2]
        return wp.pos + self._carry_offset


def make_plan(env: PandaTaskEnv, grasp_offset: float = 0.0) -> list[Waypoint]:
    """Waypoints for the env's task from the current object poses (`grasp_offset`: placing tasks only)."""
    return env.task.expert_plan(env, grasp_offset)


def run_episode(env: PandaTaskEnv, seed: int, instruction: str | None = None, record: bool = False,
                grasp_offset: float = 0.0):
    """Roll the expert out; returns (success, steps, records) where records are (obs, action).

    With a `grasp_offset` only the part after the grasp is recorded (from the tick the fingers have
    closed on the object): a correction demonstration shows how to place a cube held off-centre
    without teaching the policy to grasp off-centre.
    """
    obs = env.reset(seed, instruction)
    expert = ScriptedExpert(env, grasp_offset=grasp_offset)
    expert.reset()
    obj = env.task.placed_object
    if grasp_offset and obj is None:
        raise ValueError(f"grasp_offset: {env.task.name!r} places nothing; an off-centre grasp has nothing to correct")
    recording = record and not grasp_offset
    records = []
    for _ in range(env.task.max_steps):
        action = expert.act()
        if record and not recording:
            recording = action[7] == CLOSED and obj in env.world_state().holding
        if recording:
            records.append((obs, action))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return terminated, env.steps, records
    return False, env.steps, records
