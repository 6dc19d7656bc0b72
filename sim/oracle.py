"""The privileged scripted expert as a cloud policy: an upper bound for what re-planning can add.

The request carries the simulator's full state under "privileged/sim_state" (see `sim_state`);
the oracle copies it into a private PandaTaskEnv (no rendering), lets the ScriptedExpert plan from
there and rolls it forward H control steps in that copy. The H joint targets it commanded are the
plan. Only the evaluation suite can send such a request: a real robot has no sim state.

The expert plans its waypoints from the state it is given, so each request would restart the task
from the first waypoint (and open a closing gripper). `resume_plan` therefore estimates from the
privileged state how far the task has got (over the object, at grasp height, holding it, over
the destination) and drops the waypoints already done, so re-planning every few ticks behaves
like one continuous expert run.
"""
from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from omni_vla_sim import tasks
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.experts import APPROACH_Z, CLOSED, ScriptedExpert, Waypoint

PRIVILEGED_KEY = "privileged/sim_state"
STATE_ARRAYS = ("qpos", "qvel", "act", "ctrl", "mocap_pos", "mocap_quat")
PICK_WAYPOINTS = 3  # approach, descend, close: see omni_vla_sim.waypoints.pick
XY_TOL = 0.01  # m: "over" a target


def sim_state(env: Any) -> dict[str, Any]:
    """The privileged payload for an oracle request, from a PandaTaskEnv (copies)."""
    d = env.data
    out: dict[str, Any] = {"task": env.task.name, "seed": -1 if env.seed is None else int(env.seed),
                           "time": float(d.time)}
    for name in STATE_ARRAYS:
        out[name] = np.array(getattr(d, name), dtype=np.float64)
    return out


class ExpertOraclePolicy:
    """infer(obs) -> {"actions": float64 [H, 8]} from the scripted expert on the given sim state."""

    def __init__(self, horizon: int = 16, privileged_key: str = PRIVILEGED_KEY, control_hz: float = 20.0) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon = horizon
        self.privileged_key = privileged_key
        self.control_hz = control_hz
        self._env: Any = None
        self.metadata = {"policy": "expert_oracle", "action_horizon": horizon, "action_dim": 8,
                         "privileged_key": privileged_key, "control_hz": control_hz}

    def _environment(self, task: str) -> Any:
        if self._env is None:
            self._env = PandaTaskEnv(task, EnvConfig(render=False, control_hz=self.control_hz))
        self._env.reset(0, task=task)  # same scene for every task: switches task, no model rebuild
        return self._env

    def _load_state(self, env: Any, state: dict) -> None:
        d = env.data
        for name in STATE_ARRAYS:
            target = getattr(d, name)
            value = np.asarray(state.get(name), dtype=np.float64) if name in state else None
            if value is None:
                raise ValueError(f"{self.privileged_key} has no {name!r} (needs {STATE_ARRAYS})")
            if value.shape != target.shape:
                raise ValueError(f"{self.privileged_key}[{name!r}] has shape {value.shape}, this model needs {target.shape}")
            if not np.isfinite(value).all():
                raise ValueError(f"{self.privileged_key}[{name!r}] has non-finite values")
            target[...] = value
        d.time = float(state.get("time", 0.0))
        mujoco.mj_forward(env.model, d)

    def reset(self) -> None:
        """Stateless between requests: every request carries the whole simulator state."""

    def infer(self, obs: dict) -> dict:
        state = obs.get(self.privileged_key)
        if not isinstance(state, dict):
            raise ValueError(f"the expert oracle needs {self.privileged_key!r} (a dict from oracle.sim_state) in the request")
        task = state.get("task")
        if not isinstance(task, str):
            raise ValueError(f"{self.privileged_key}['task'] must be a task name, got {task!r}")
        env = self._environment(task)
        self._load_state(env, state)
        expert = ScriptedExpert(env)
        expert.reset()
        expert.plan = resume_plan(env, expert.plan)
        actions = np.zeros((self.horizon, 8), np.float64)
        for i in range(self.horizon):
            actions[i] = expert.act()
            env.step(actions[i])
        return {"actions": actions}


def _xy(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a[:2] - b[:2]))


def resume_plan(env: Any, plan: list) -> list:
    """`plan` (fresh from make_plan) without the waypoints the state shows are already done."""
    w = env.world_state()
    grip = w.grip
    obj = env.task.grasped_object
    if obj is None:  # a reach: over the target, then down onto it
        above = plan[0].pos
        return plan[1:] if _xy(grip, above) < 2 * XY_TOL and grip[2] < above[2] + XY_TOL else plan
    if obj not in w.holding:
        approach, grasp = plan[0].pos, plan[1].pos
        if _xy(grip, grasp) < XY_TOL:
            if grip[2] - grasp[2] < XY_TOL:
                return plan[2:]  # at grasp height: close
            if grip[2] < approach[2] + XY_TOL:
                return plan[1:]  # over the object: descend
        return plan
    rest = plan[PICK_WAYPOINTS:]  # holding: lift, then (place/stack) approach, descend, release, retreat
    obj_pos = env.body_pos(obj)
    lift_z = tasks.CUBE_HALF + APPROACH_Z + 0.03
    rest[0] = Waypoint(np.array([grip[0], grip[1], lift_z]), rest[0].yaw, CLOSED, tol=0.02)
    if len(rest) == 1:
        return rest
    dest_above, dest_down = rest[1].pos, rest[2].pos
    if _xy(obj_pos, dest_down) < XY_TOL and grip[2] < dest_above[2] + XY_TOL:
        return rest[2:]  # over the destination: go down and release
    if grip[2] > lift_z - 0.02:
        return rest[1:]  # carried high enough: head for the destination
    return rest
