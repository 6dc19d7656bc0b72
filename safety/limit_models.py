"""The limit models, in ros2_control's joint_limits format, validated fail-closed.

ros2_control keeps hard limits (`JointLimits`: has_*/max_*) and soft limits
(`SoftJointLimits`: soft_lower_limit/soft_upper_limit, k_position, k_velocity) apart;
we do the same and pair them in `JointLimitSet`. A limit that is switched on must have
a finite value: a missing or NaN number silently meaning "unlimited" is how robots
get hurt, so it is refused with the joint and the field named. `JointSource` is one joint
as a description states it (fields and where each came from), before validation.
Both readers build on this module: limits (YAML, files, overlays) and limits_sources (URDF, MJCF).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

_RATE_FIELDS = ("velocity", "acceleration", "deceleration", "jerk", "effort")
SOFT_KEYS = ("has_soft_limits", "soft_lower_limit", "soft_upper_limit", "k_position", "k_velocity")


class LimitsError(ValueError):
    """A limits source is unreadable or inconsistent; the message names the joint and field."""


class JointLimits(BaseModel):
    """One joint's hard limits; field names follow ros2_control joint_limits (has_* / max_*)."""

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
    angle_wraparound: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> "JointLimits":
        if self.has_position_limits:
            for name in ("min_position", "max_position"):
                if not math.isfinite(getattr(self, name)):
                    raise ValueError(f"{name} must be a finite number when has_position_limits is true, "
                                     f"got {getattr(self, name)}")
            if not self.min_position < self.max_position:
                raise ValueError(f"min_position {self.min_position} must be below max_position {self.max_position}")
        for name in _RATE_FIELDS:
            value = getattr(self, f"max_{name}")
            if getattr(self, f"has_{name}_limits") and not (math.isfinite(value) and value > 0):
                raise ValueError(f"max_{name} must be a positive finite number when has_{name}_limits is true, "
                                 f"got {value}")
        return self


class SoftJointLimits(BaseModel):
    """ros2_control SoftJointLimits. k_position <= 0 means no spring, only the soft position bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_position: float
    max_position: float
    k_position: float = 0.0
    k_velocity: float = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> "SoftJointLimits":
        for name, value in (("soft_lower_limit", self.min_position), ("soft_upper_limit", self.max_position),
                            ("k_position", self.k_position), ("k_velocity", self.k_velocity)):
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        for name, value in (("k_position", self.k_position), ("k_velocity", self.k_velocity)):
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if not self.min_position < self.max_position:
            raise ValueError(f"soft_lower_limit {self.min_position} must be below "
                             f"soft_upper_limit {self.max_position}")
        return self


class JointLimitSet(BaseModel):
    """Hard and optional soft limits of one joint; soft limits must lie within the hard ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hard: JointLimits
    soft: SoftJointLimits | None = None

    @model_validator(mode="after")
    def _soft_inside_hard(self) -> "JointLimitSet":
        if self.soft is not None and self.hard.has_position_limits:
            if self.soft.min_position < self.hard.min_position:
                raise ValueError(f"soft_lower_limit {self.soft.min_position} is outside the hard limit "
                                 f"min_position {self.hard.min_position}")
            if self.soft.max_position > self.hard.max_position:
                raise ValueError(f"soft_upper_limit {self.soft.max_position} is outside the hard limit "
                                 f"max_position {self.hard.max_position}")
        return self

    @property
    def position_range(self) -> tuple[float, float]:
        """The range commands are kept in: soft limits where configured, else the hard ones."""
        lo = self.hard.min_position if self.hard.has_position_limits else float("-inf")
        hi = self.hard.max_position if self.hard.has_position_limits else float("inf")
        if self.soft is not None:
            lo, hi = max(lo, self.soft.min_position), min(hi, self.soft.max_position)
        return lo, hi


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
        return "; ".join(parts)
    return str(exc)


def limit_set_from_fields(joint: str, fields: Mapping[str, Any] | None, source: str) -> JointLimitSet:
    """Build one joint's limits from a ros2_control joint_limits mapping (hard and soft keys mixed)."""
    fields = dict(fields or {})
    soft_fields = {k: fields.pop(k) for k in SOFT_KEYS if k in fields}
    has_soft = soft_fields.pop("has_soft_limits", None)
    if has_soft is None:
        has_soft = "soft_lower_limit" in soft_fields or "soft_upper_limit" in soft_fields
    try:
        for kind, keys in (("position", ("min_position", "max_position")),
                           *((k, (f"max_{k}",)) for k in _RATE_FIELDS)):
            given = [key for key in keys if key in fields]
            if given and f"has_{kind}_limits" not in fields:  # ros2_control would ignore it: say so, do not guess
                raise ValueError(f"{given[0]} is given without has_{kind}_limits: set has_{kind}_limits: true to "
                                 "enforce it, or false to leave it off")
        hard = JointLimits(**fields)
        soft = None
        if has_soft:
            for key in ("soft_lower_limit", "soft_upper_limit"):
                if key not in soft_fields:
                    raise ValueError(f"{key} is missing while soft limits are enabled")
            soft = SoftJointLimits(min_position=soft_fields["soft_lower_limit"],
                                   max_position=soft_fields["soft_upper_limit"],
                                   k_position=soft_fields.get("k_position", 0.0),
                                   k_velocity=soft_fields.get("k_velocity", 0.0))
        return JointLimitSet(hard=hard, soft=soft)
    except (ValidationError, ValueError, TypeError) as exc:
        raise LimitsError(f"{source}: joint '{joint}': {_error_text(exc)}") from exc


def _field_group(key: str) -> str:
    """The limit a joint_limits field belongs to: position, velocity, ..., soft."""
    if key in SOFT_KEYS:
        return "soft"
    if key in ("min_position", "max_position", "angle_wraparound"):
        return "position"
    if key.startswith("has_") and key.endswith("_limits"):
        return key[4:-7]
    return key[4:] if key.startswith("max_") else key


@dataclass
class JointSource:
    """One joint as its source states it: joint_limits fields and where each limit came from."""

    fields: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    kind: str = ""
    follows: str = ""
    note: str = ""

    def set(self, key: str, value: Any, group: str, where: str) -> None:
        self.fields[key] = value
        self.origin[group] = where

    def set_many(self, values: Mapping[str, Any], group: str, where: str) -> None:
        self.fields.update(values)
        self.origin[group] = where
