"""Gymnasium-style MuJoCo environment: reset(seed) -> obs, step(joint targets) at the control rate.

Physics, task logic (tasks.py) and rendering are separate; the env only wires them. One
renderer per process, created lazily, so spawned workers each own their GL context.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from omni_vla_sim import robot, tasks


class EnvConfig(BaseModel):
    """Simulation settings; the defaults are the ones the dataset and evaluation use."""

    model_config = ConfigDict(extra="forbid")

    image_size: int = Field(128, ge=16, le=1024)
    control_hz: float = Field(20.0, gt=0, le=1000)
    physics_dt: float = Field(0.002, gt=0, le=0.01)
    joint_noise: float = Field(0.05, ge=0, le=0.5)
    render: bool = True
    limits_file: Path | None = None


class PandaTaskEnv:
    """One task of the suite on the shared scene."""

    def __init__(self, task: str, config: EnvConfig | None = None) -> None:
        self.task = tasks.get_task(task)
        self.config = config or EnvConfig()
        self.limits = robot.load_limits(self.config.limits_file)
        xml = robot.panda_xml(self.limits, tasks.OBJECTS_XML, self.config.image_size)
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.model.opt.timestep = self.config.physics_dt
        self.model.vis.quality.offsamples = 0
        self.data = mujoco.MjData(self.model)
        self.n_substeps = max(1, round(1.0 / (self.config.control_hz * self.config.physics_dt)))
        self._qadr = np.array([self.model.joint(j).qposadr[0] for j in robot.JOINT_NAMES])
        self._dadr = np.array([self.model.joint(j).dofadr[0] for j in robot.JOINT_NAMES])
        self._ctrl_lo, self._ctrl_hi = self.model.actuator_ctrlrange.T.copy()
        self._geom = {n: self.model.geom(n).id for n in ("red_cube", "blue_cube", "yellow_ball")}
        self._fingers = (
            set(self._body_geoms("panda_leftfinger")),
            set(self._body_geoms("panda_rightfinger")),
        )
        self._gripper_geoms = self._fingers[0] | self._fingers[1] | set(self._body_geoms("panda_hand"))
        self._grip_site = self.model.site("grip").id
        self._renderer: mujoco.Renderer | None = None
        size = self.config.image_size
        self._images = {cam: np.zeros((size, size, 3), np.uint8) for cam in robot.CAMERAS}
        self.instruction: tasks.Instruction = self.task.instructions[0]
        self.steps = 0
        self.seed: int | None = None

    def _body_geoms(self, body: str) -> list[int]:
        bid = self.model.body(body).id
        return [g for g in range(self.model.ngeom) if self.model.geom_bodyid[g] == bid]

    # ----------------------------------------------------------------- episode
    def reset(self, seed: int, instruction: str | None = None, task: str | None = None) -> dict[str, Any]:
        """Seeded initial state; `instruction` must be one of the task's paraphrases.

        `task` switches to another task of the suite (same scene, so no model rebuild).
        """
        if task is not None:
            self.task = tasks.get_task(task)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
        chosen = self._pick_instruction(instruction, np.random.default_rng([int(seed), 1]))
        rng = np.random.default_rng(int(seed))
        mujoco.mj_resetData(self.model, self.data)
        q0 = np.array(robot.HOME_QPOS)
        q0[:7] += rng.uniform(-1, 1, 7) * self.config.joint_noise
        self.data.qpos[self._qadr] = q0
        self.data.qpos[self.model.joint("panda_finger_joint2").qposadr[0]] = q0[7]
        self.data.ctrl[:] = q0
        self.task.initialize_episode(self.model, self.data, rng)
        mujoco.mj_forward(self.model, self.data)
        for _ in range(20):
            mujoco.mj_step(self.model, self.data)
        self.instruction, self.steps, self.seed = chosen, 0, int(seed)
        return self.observation()

    def _pick_instruction(self, text: str | None, rng: np.random.Generator) -> tasks.Instruction:
        if text is None:
            options = self.task.train_instructions
            return options[int(rng.integers(len(options)))]
        for ins in self.task.instructions:
            if ins.text == text:
                return ins
        raise ValueError(
            f"instruction {text!r} is not one of task {self.task.name!r}'s: "
            f"{[i.text for i in self.task.instructions]}"
        )

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Apply absolute joint-position targets (7 joints + gripper) for one control period."""
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (len(robot.JOINT_NAMES),):
            raise ValueError(f"action must have shape ({len(robot.JOINT_NAMES)},), got {a.shape}")
        if not np.all(np.isfinite(a)):
            bad = [robot.JOINT_NAMES[i] for i in np.flatnonzero(~np.isfinite(a))]
            raise ValueError(f"action has non-finite values for {bad}")
        self.apply(a, self.n_substeps)
        return self.end_tick()

    def apply(self, targets: np.ndarray, nstep: int) -> None:
        """Hold `targets` for `nstep` physics steps (a supervisor running faster than the policy)."""
        self.set_targets(targets)
        self.advance(nstep)

    def set_targets(self, targets: np.ndarray) -> None:
        """New position targets for the actuators, taken by the next physics step (a controller
        applies a command as it arrives, not at the next control period)."""
        self.data.ctrl[:] = np.clip(targets, self._ctrl_lo, self._ctrl_hi)

    def advance(self, nstep: int) -> None:
        """`nstep` physics steps with the current targets; the control period is closed by end_tick."""
        if nstep > 0:
            mujoco.mj_step(self.model, self.data, nstep=nstep)

    def end_tick(self) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Close one control period: count it, judge success, observe."""
        self.steps += 1
        world = self.world_state()
        ok = bool(self.task.success(world))
        truncated = self.steps >= self.task.max_steps and not ok
        return self.observation(), float(ok), ok, truncated, {"success": ok, "world": world}

    # ------------------------------------------------------------------ state
    def joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.qpos[self._qadr].copy(), self.data.qvel[self._dadr].copy()

    def observation(self) -> dict[str, Any]:
        qpos, qvel = self.joint_state()
        # ee_pos: the grip point from forward kinematics (a robot has it from TF), for progress checks.
        obs: dict[str, Any] = {"qpos": qpos, "qvel": qvel, "instruction": self.instruction.text,
                               "ee_pos": self.data.site_xpos[self._grip_site].copy()}
        if self.config.render:
            for camera in robot.CAMERAS:
                obs[camera] = self.render(camera).copy()
        return obs

    def render(self, camera: str) -> np.ndarray:
        """RGB frame into this env's reused buffer (copy it to keep it)."""
        if self._renderer is None:
            size = self.config.image_size
            self._renderer = mujoco.Renderer(self.model, size, size)
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        self._renderer.update_scene(self.data, camera=camera)
        return self._renderer.render(out=self._images[camera])

    def body_pos(self, name: str) -> np.ndarray:
        return self.data.xpos[self.model.body(name).id].copy()

    def world_state(self) -> tasks.WorldState:
        touching, pairs = False, set()
        for c in self.data.contact[: self.data.ncon]:
            g1, g2 = int(c.geom1), int(c.geom2)
            for gripper_geom, other in ((g1, g2), (g2, g1)):
                if gripper_geom in self._gripper_geoms and other == self._geom["yellow_ball"]:
                    touching = True
                for side, finger in enumerate(self._fingers):
                    if gripper_geom in finger:
                        pairs.add((side, other))
        holding = frozenset(
            n for n, g in self._geom.items() if (0, g) in pairs and (1, g) in pairs
        )
        return tasks.WorldState(
            red=self.body_pos("red_cube"),
            blue=self.body_pos("blue_cube"),
            ball=self.body_pos("yellow_ball"),
            pad=self.data.mocap_pos[self.model.body("green_pad").mocapid[0]].copy(),
            grip=self.data.site_xpos[self._grip_site].copy(),
            gripper_opening=float(self.data.qpos[self._qadr[7]]),
            touching_ball=touching,
            holding=holding,
        )

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
