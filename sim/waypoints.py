"""The scripted expert's plan vocabulary: grip-site waypoints and the moves the tasks' plans are made of.

Tasks (sim/tasks.py) write their plans in these terms and the expert (sim/experts.py) follows them, so
neither needs to know the other's internals.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from omni_vla_sim.env import PandaTaskEnv

OPEN, CLOSED = 0.04, 0.0
APPROACH_Z = 0.12


@dataclass
class Waypoint:
    pos: np.ndarray  # grip-site target, world frame
    yaw: float  # rotation of the fingers about world z
    gripper: float
    hold: int = 0  # extra control steps to wait once reached
    tol: float = 0.008
    carried: str | None = None  # object whose xy (not the grip's) must arrive: an off-centre grasp is corrected


def grasp_yaw(object_yaw: float) -> float:
    """Cube faces repeat every 90 degrees: pick the grasp yaw closest to the neutral one."""
    return (object_yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4


def body_yaw(env: PandaTaskEnv, body: str) -> float:
    """Rotation of a body about world z (objects stay upright on the table)."""
    quat = env.data.xquat[env.model.body(body).id]
    return float(2 * np.arctan2(quat[3], quat[0]))


def pick(pos: np.ndarray, yaw: float, offset: float = 0.0) -> list[Waypoint]:
    """Approach, descend, close, lift; `offset` moves the grasp along the fingers (grip-frame x)."""
    above = pos + [0, 0, APPROACH_Z]
    grasp = pos + [offset * np.cos(yaw), offset * np.sin(yaw), 0.005]
    return [
        Waypoint(above, yaw, OPEN),
        Waypoint(grasp, yaw, OPEN, tol=0.006),
        Waypoint(grasp, yaw, CLOSED, hold=4, tol=0.02),
        Waypoint(above + [0, 0, 0.03], yaw, CLOSED, tol=0.02),
    ]


def put_down(dest: np.ndarray, yaw: float, carried: str) -> list[Waypoint]:
    """Carry `carried` over `dest` (its centre there), lower, release, retreat; aimed by the object, not the grip."""
    return [
        Waypoint(dest + [0, 0, APPROACH_Z], yaw, CLOSED, tol=0.02, carried=carried),
        Waypoint(dest + [0, 0, 0.012], yaw, CLOSED, tol=0.01, carried=carried),
        Waypoint(dest + [0, 0, 0.012], yaw, OPEN, hold=3, tol=0.03, carried=carried),
        Waypoint(dest + [0, 0, APPROACH_Z], yaw, OPEN, hold=40, tol=0.03, carried=carried),
    ]
