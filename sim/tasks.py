"""Language-conditioned tasks sharing one scene: only the instruction tells them apart.

Each task: paraphrased instructions (one held out of training), a seeded initial-state
sampler, a success predicate on privileged state, and a step budget at the control rate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CUBE_HALF = 0.02
BALL_RADIUS = 0.025
PAD_RADIUS = 0.06
EVAL_SEED_BASE = 1_000_000  # demonstrations use seeds below this
OBJECTS = ("red_cube", "blue_cube", "yellow_ball", "green_pad")

OBJECTS_XML = f"""
<body name="red_cube" pos="0.5 0.1 {CUBE_HALF}"><freejoint name="red_cube"/>
  <geom name="red_cube" class="object" type="box" size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" mass="0.05" rgba="0.85 0.1 0.1 1"/></body>
<body name="blue_cube" pos="0.5 -0.1 {CUBE_HALF}"><freejoint name="blue_cube"/>
  <geom name="blue_cube" class="object" type="box" size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" mass="0.05" rgba="0.1 0.2 0.85 1"/></body>
<body name="yellow_ball" pos="0.6 0 {BALL_RADIUS}"><freejoint name="yellow_ball"/>
  <geom name="yellow_ball" class="object" type="sphere" size="{BALL_RADIUS}" mass="0.05" rgba="0.95 0.85 0.1 1"
        friction="1.5 0.05 0.01"/></body>
<body name="green_pad" pos="0.4 0 0.001" mocap="true">
  <geom name="green_pad" type="cylinder" size="{PAD_RADIUS} 0.001" contype="0" conaffinity="0" rgba="0.1 0.75 0.2 1"/></body>
"""


@dataclass(frozen=True)
class Instruction:
    text: str
    held_out: bool = False


@dataclass(frozen=True)
class Task:
    name: str
    instructions: tuple[Instruction, ...]
    max_steps: int

    @property
    def train_instructions(self) -> tuple[Instruction, ...]:
        return tuple(i for i in self.instructions if not i.held_out)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("pick_red", (
            Instruction("pick up the red cube"),
            Instruction("lift the red block"),
            Instruction("grab the red cube and raise it", held_out=True),
        ), max_steps=120),
        Task("place_blue_on_green", (
            Instruction("put the blue cube on the green pad"),
            Instruction("move the blue block onto the green target"),
            Instruction("place the blue cube onto the green circle", held_out=True),
        ), max_steps=200),
        Task("stack_red_on_blue", (
            Instruction("stack the red cube on the blue cube"),
            Instruction("put the red block on top of the blue block"),
            Instruction("place the red cube onto the blue one", held_out=True),
        ), max_steps=200),
        Task("touch_yellow", (
            Instruction("touch the yellow ball"),
            Instruction("tap the yellow sphere"),
            Instruction("reach out and touch the yellow ball", held_out=True),
        ), max_steps=100),
    )
}


def get_task(name: str) -> Task:
    """The task called `name`; unknown names are refused with the known ones listed."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name]


def sample_layout(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Object xy positions and yaw on the table, at least 10 cm apart, all in reach."""
    positions: list[np.ndarray] = []
    while len(positions) < len(OBJECTS):
        p = np.array([rng.uniform(0.40, 0.65), rng.uniform(-0.22, 0.22)])
        if all(np.linalg.norm(p - q) > 0.12 for q in positions):
            positions.append(p)
    yaws = rng.uniform(-np.pi / 6, np.pi / 6, size=2)
    return {
        "red_cube": np.array([*positions[0], yaws[0]]),
        "blue_cube": np.array([*positions[1], yaws[1]]),
        "yellow_ball": np.array([*positions[2], 0.0]),
        "green_pad": np.array([*positions[3], 0.0]),
    }


@dataclass(frozen=True)
class WorldState:
    """Privileged state the success predicates and experts read."""

    red: np.ndarray  # xyz
    blue: np.ndarray
    ball: np.ndarray
    pad: np.ndarray
    grip: np.ndarray  # grip-site xyz
    gripper_opening: float
    touching_ball: bool
    holding: frozenset[str]  # objects squeezed by both fingers


def success(task: str, w: WorldState) -> bool:
    """Task success on privileged state."""
    if task == "pick_red":
        return bool(w.red[2] > 0.10 and "red_cube" in w.holding)
    if task == "place_blue_on_green":
        on_pad = np.linalg.norm(w.blue[:2] - w.pad[:2]) < PAD_RADIUS - 0.01
        return bool(on_pad and w.blue[2] < CUBE_HALF + 0.005 and "blue_cube" not in w.holding)
    if task == "stack_red_on_blue":
        dz = w.red[2] - w.blue[2]
        aligned = np.linalg.norm(w.red[:2] - w.blue[:2]) < 0.02
        return bool(aligned and abs(dz - 2 * CUBE_HALF) < 0.008 and "red_cube" not in w.holding)
    if task == "touch_yellow":
        return w.touching_ball
    raise ValueError(f"unknown task {task!r}")
