"""Language-conditioned tasks sharing one scene: only the instruction tells them apart.

Each task is a class in the style of dm_control's composer.Task: it owns its episode (the scene's
initialisation for a seed, its paraphrased instructions with one held out of training, its success
predicate on privileged state, its step budget at the control rate, the scripted expert's plan and
which object it grasps or places), so no other module branches on a task's name. `TASKS` maps the
names to the tasks; `get_task` refuses an unknown name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import mujoco
import numpy as np

from omni_vla_sim.scene import (
    BALL_RADIUS, CUBE_HALF, OBJECTS, OBJECTS_XML, PAD_RADIUS, WorldState, place_objects, sample_layout,
)
from omni_vla_sim.waypoints import CLOSED, Waypoint, body_yaw, grasp_yaw, pick, put_down

if TYPE_CHECKING:
    from omni_vla_sim.env import PandaTaskEnv

__all__ = [
    "BALL_RADIUS", "CUBE_HALF", "EVAL_SEED_BASE", "OBJECTS", "OBJECTS_XML", "PAD_RADIUS", "TASKS", "Instruction",
    "PickRed", "PlaceBlueOnGreen", "PlaceTask", "StackRedOnBlue", "Task", "TouchYellow", "WorldState",
    "build_registry", "get_task", "sample_layout", "success",
]

EVAL_SEED_BASE = 1_000_000  # demonstrations use seeds below this
PARAPHRASES = 3


@dataclass(frozen=True)
class Instruction:
    text: str
    held_out: bool = False


class Task(ABC):
    """One task of the suite; stateless, so one instance serves every env and episode."""

    name: ClassVar[str]
    instructions: ClassVar[tuple[Instruction, ...]]
    max_steps: ClassVar[int]
    grasped_object: ClassVar[str | None] = None  # what the fingers close on; None: a missed grasp cannot happen
    placed_object: ClassVar[str | None] = None  # carried and put down: only then can an off-centre grasp be corrected

    @property
    def train_instructions(self) -> tuple[Instruction, ...]:
        return tuple(i for i in self.instructions if not i.held_out)

    @property
    def held_out_instruction(self) -> Instruction:
        return next(i for i in self.instructions if i.held_out)

    def initialize_episode(self, model: mujoco.MjModel, data: mujoco.MjData, rng: np.random.Generator) -> None:
        """Lay the shared scene out from the episode's generator (after the arm has drawn its noise)."""
        place_objects(model, data, sample_layout(rng))

    @abstractmethod
    def success(self, w: WorldState) -> bool:
        """Whether the task is done, judged on privileged state."""

    @abstractmethod
    def expert_plan(self, env: PandaTaskEnv, grasp_offset: float = 0.0) -> list[Waypoint]:
        """The scripted expert's waypoints from the current object poses.

        `grasp_offset` (m along the fingers) shifts the grasp of a placed object; tasks that place nothing ignore it.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PickRed(Task):
    name = "pick_red"
    instructions = (
        Instruction("pick up the red cube"),
        Instruction("lift the red block"),
        Instruction("grab the red cube and raise it", held_out=True),
    )
    max_steps = 120
    grasped_object = "red_cube"
    LIFTED_Z = 0.10

    def success(self, w: WorldState) -> bool:
        return bool(w.red[2] > self.LIFTED_Z and "red_cube" in w.holding)

    def expert_plan(self, env: PandaTaskEnv, grasp_offset: float = 0.0) -> list[Waypoint]:
        return pick(env.world_state().red, grasp_yaw(body_yaw(env, "red_cube")))


class PlaceTask(Task):
    """Pick `placed_object` up and put it down at `destination`, aiming the object (not the grip) there."""

    placed_object: ClassVar[str]

    @abstractmethod
    def destination(self, env: PandaTaskEnv, w: WorldState, yaw: float) -> tuple[np.ndarray, float]:
        """Where the carried object's centre goes and the fingers' yaw there (`yaw`: the grasp's)."""

    def expert_plan(self, env: PandaTaskEnv, grasp_offset: float = 0.0) -> list[Waypoint]:
        w = env.world_state()
        obj = self.placed_object
        yaw = grasp_yaw(body_yaw(env, obj))
        dest, dest_yaw = self.destination(env, w, yaw)
        return pick(w.position(obj), yaw, grasp_offset) + put_down(dest, dest_yaw, obj)


class PlaceBlueOnGreen(PlaceTask):
    name = "place_blue_on_green"
    instructions = (
        Instruction("put the blue cube on the green pad"),
        Instruction("move the blue block onto the green target"),
        Instruction("place the blue cube onto the green circle", held_out=True),
    )
    max_steps = 200
    grasped_object = placed_object = "blue_cube"

    def success(self, w: WorldState) -> bool:
        on_pad = np.linalg.norm(w.blue[:2] - w.pad[:2]) < PAD_RADIUS - 0.01
        return bool(on_pad and w.blue[2] < CUBE_HALF + 0.005 and "blue_cube" not in w.holding)

    def destination(self, env: PandaTaskEnv, w: WorldState, yaw: float) -> tuple[np.ndarray, float]:
        return w.pad + [0, 0, CUBE_HALF], yaw


class StackRedOnBlue(PlaceTask):
    name = "stack_red_on_blue"
    instructions = (
        Instruction("stack the red cube on the blue cube"),
        Instruction("put the red block on top of the blue block"),
        Instruction("place the red cube onto the blue one", held_out=True),
    )
    max_steps = 200
    grasped_object = placed_object = "red_cube"

    def success(self, w: WorldState) -> bool:
        dz = w.red[2] - w.blue[2]
        aligned = np.linalg.norm(w.red[:2] - w.blue[:2]) < 0.02
        return bool(aligned and abs(dz - 2 * CUBE_HALF) < 0.008 and "red_cube" not in w.holding)

    def destination(self, env: PandaTaskEnv, w: WorldState, yaw: float) -> tuple[np.ndarray, float]:
        """On top of the blue cube, turned like it, so the faces line up."""
        return w.blue + [0, 0, 2 * CUBE_HALF], grasp_yaw(body_yaw(env, "blue_cube"))


class TouchYellow(Task):
    name = "touch_yellow"
    instructions = (
        Instruction("touch the yellow ball"),
        Instruction("tap the yellow sphere"),
        Instruction("reach out and touch the yellow ball", held_out=True),
    )
    max_steps = 100

    def success(self, w: WorldState) -> bool:
        return w.touching_ball

    def expert_plan(self, env: PandaTaskEnv, grasp_offset: float = 0.0) -> list[Waypoint]:
        """Closed fingers over the ball's top, then down onto it."""
        top = env.world_state().ball + [0, 0, BALL_RADIUS]
        return [
            Waypoint(top + [0, 0, 0.10], 0.0, CLOSED),
            Waypoint(top - [0, 0, 0.01], 0.0, CLOSED, hold=10, tol=0.03),
        ]


def build_registry(tasks: Iterable[Task]) -> dict[str, Task]:
    """Name -> task, refusing what would break training or evaluation: duplicate names, a task without
    `PARAPHRASES` paraphrases of which exactly one is held out, or a phrase two tasks share (the
    instruction is the only thing that tells the tasks apart)."""
    registry: dict[str, Task] = {}
    seen: dict[str, str] = {}
    for task in tasks:
        if task.name in registry:
            raise ValueError(f"task {task.name!r} registered twice")
        held = sum(i.held_out for i in task.instructions)
        if len(task.instructions) != PARAPHRASES or held != 1:
            raise ValueError(f"task {task.name!r} has {len(task.instructions)} instructions, {held} held out; "
                             f"needs {PARAPHRASES}, one held out")
        for ins in task.instructions:
            if ins.text in seen:
                raise ValueError(f"instruction {ins.text!r} of {task.name!r} is also {seen[ins.text]!r}'s")
            seen[ins.text] = task.name
        registry[task.name] = task
    return registry


TASKS: dict[str, Task] = build_registry((PickRed(), PlaceBlueOnGreen(), StackRedOnBlue(), TouchYellow()))


def get_task(name: str) -> Task:
    """The task called `name`; unknown names are refused with the known ones listed."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name]


def success(task: str, w: WorldState) -> bool:
    """Success of the task called `task` on privileged state."""
    return get_task(task).success(w)
