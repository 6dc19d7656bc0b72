"""An independent check of the commands a robot received against its joint-limits file.

Written apart from safety/ (it imports nothing of it and reads the ros2_control joint_limits YAML itself), so a
benchmark can say whether what reached the robot stayed inside the limits without trusting the supervisor's own
counters: every position inside [min_position, max_position], every step between consecutive commands within
max_velocity / command rate.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import yaml


def read_limits(path: Path, joints: Sequence[str]) -> dict[str, np.ndarray]:
    """lower, upper, max_velocity per joint, in `joints` order; a joint without a limit is an error."""
    table = (yaml.safe_load(Path(path).read_text()) or {}).get("joint_limits", {})
    out = {"lower": [], "upper": [], "velocity": []}
    for j in joints:
        spec = table.get(j)
        if not spec or not spec.get("has_position_limits") or not spec.get("has_velocity_limits"):
            raise ValueError(f"{path}: joint {j!r} has no position or velocity limits")
        out["lower"].append(float(spec["min_position"]))
        out["upper"].append(float(spec["max_position"]))
        out["velocity"].append(float(spec["max_velocity"]))
    return {k: np.asarray(v) for k, v in out.items()}


def check_commands(commands: np.ndarray, limits: dict[str, np.ndarray], rate_hz: float,
                   tolerance: float = 1e-9) -> dict[str, float | int]:
    """commands [N, D] in arrival order -> counts of positions outside the range and of steps over the velocity."""
    if commands.ndim != 2 or commands.shape[0] == 0:
        return {"commands": 0, "outside_position_limits": 0, "over_velocity_steps": 0, "max_step_fraction": 0.0}
    outside = (commands < limits["lower"] - tolerance) | (commands > limits["upper"] + tolerance)
    steps = np.abs(np.diff(commands, axis=0))
    fraction = steps / (limits["velocity"] / rate_hz)
    return {"commands": int(commands.shape[0]), "outside_position_limits": int(outside.any(axis=1).sum()),
            "over_velocity_steps": int((fraction > 1.0 + 1e-6).any(axis=1).sum()),
            "max_step_fraction": round(float(fraction.max()) if fraction.size else 0.0, 4)}
