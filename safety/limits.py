"""Joint limits in ros2_control's joint_limits parameter format, validated fail-closed."""
from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, model_validator


class JointLimits(BaseModel):
    """One joint's limits; field names follow ros2_control joint_limits (has_* / max_*)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    has_position_limits: bool = False
    min_position: float = float("-inf")
    max_position: float = float("inf")
    has_velocity_limits: bool = False
    max_velocity: float = float("inf")
    has_acceleration_limits: bool = False
    max_acceleration: float = float("inf")
    has_deceleration_limits: bool = False
    max_deceleration: float = float("inf")
    has_jerk_limits: bool = False
    max_jerk: float = float("inf")
    has_effort_limits: bool = False
    max_effort: float = float("inf")

    @model_validator(mode="after")
    def _consistent(self) -> "JointLimits":
        if self.has_position_limits and not self.min_position < self.max_position:
            raise ValueError(f"min_position {self.min_position} must be below max_position {self.max_position}")
        for name in ("velocity", "acceleration", "deceleration", "jerk", "effort"):
            if getattr(self, f"has_{name}_limits") and not getattr(self, f"max_{name}") > 0:
                raise ValueError(f"max_{name} must be positive, got {getattr(self, f'max_{name}')}")
        return self


def load_joint_limits(path: str | Path) -> dict[str, JointLimits]:
    """Read a joint_limits YAML file (top-level key `joint_limits`), joint name -> limits."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("joint_limits"), dict):
        raise ValueError(f"{path}: expected a mapping with top-level key 'joint_limits'")
    limits: dict[str, JointLimits] = {}
    for joint, fields in data["joint_limits"].items():
        try:
            limits[joint] = JointLimits(**(fields or {}))
        except Exception as exc:  # pydantic error text names the field
            raise ValueError(f"{path}: joint '{joint}': {exc}") from exc
    return limits
