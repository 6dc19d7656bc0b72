"""The one scene every task shares: its objects, a seeded layout, and the privileged state tasks read.

Tasks differ only in what they ask of this scene (sim/tasks.py), so the objects are defined once, here.
"""
from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

CUBE_HALF = 0.02
BALL_RADIUS = 0.025
PAD_RADIUS = 0.06
OBJECTS = ("red_cube", "blue_cube", "yellow_ball", "green_pad")
RESTING_Z = {"red_cube": CUBE_HALF, "blue_cube": CUBE_HALF, "yellow_ball": BALL_RADIUS}  # free bodies on the table
PAD_Z = 0.001

OBJECTS_XML = f"""
<body name="red_cube" pos="0.5 0.1 {CUBE_HALF}"><freejoint name="red_cube"/>
  <geom name="red_cube" class="object" type="box" size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" mass="0.05" rgba="0.85 0.1 0.1 1"/></body>
<body name="blue_cube" pos="0.5 -0.1 {CUBE_HALF}"><freejoint name="blue_cube"/>
  <geom name="blue_cube" class="object" type="box" size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" mass="0.05" rgba="0.1 0.2 0.85 1"/></body>
<body name="yellow_ball" pos="0.6 0 {BALL_RADIUS}"><freejoint name="yellow_ball"/>
  <geom name="yellow_ball" class="object" type="sphere" size="{BALL_RADIUS}" mass="0.05" rgba="0.95 0.85 0.1 1"
        friction="1.5 0.05 0.01"/></body>
<body name="green_pad" pos="0.4 0 {PAD_Z}" mocap="true">
  <geom name="green_pad" type="cylinder" size="{PAD_RADIUS} {PAD_Z}" contype="0" conaffinity="0" rgba="0.1 0.75 0.2 1"/></body>
"""


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


def place_objects(model: mujoco.MjModel, data: mujoco.MjData, layout: dict[str, np.ndarray]) -> None:
    """Write a layout into the state: free bodies rest on the table, the pad (mocap) lies flat on it."""
    for name, (x, y, yaw) in layout.items():
        if name not in RESTING_Z:
            data.mocap_pos[model.body(name).mocapid[0]] = (x, y, PAD_Z)
            continue
        adr = model.joint(name).qposadr[0]
        data.qpos[adr:adr + 7] = (x, y, RESTING_Z[name], np.cos(yaw / 2), 0, 0, np.sin(yaw / 2))


_FIELD_OF = {"red_cube": "red", "blue_cube": "blue", "yellow_ball": "ball", "green_pad": "pad"}


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

    def position(self, obj: str) -> np.ndarray:
        """xyz of a scene object by name, so a task can name its objects once."""
        return getattr(self, _FIELD_OF[obj])
