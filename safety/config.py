"""Supervisor parameters (ROS parameters with defaults in config/safety_supervisor.yaml), validated."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NODE_NAME = "safety_supervisor"
PACKAGE = "omni_vla"
DEFAULT_JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
MAX_TIMEOUT_S = 10.0  # the longest command or joint-state timeout: beyond it a stale stream is no longer a stall


class SupervisorConfig(BaseModel):
    """Every topic and number of the supervisor. Times in seconds, rates in Hz."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    joint_names: list[str] = Field(
        default_factory=lambda: list(DEFAULT_JOINTS), min_length=1,
        description="joints the supervisor enforces, in command order (JointState is matched by name)")
    joint_limits_file: str = Field(
        "config/joint_limits.yaml",
        description="ros2_control joint_limits YAML, URDF or MJCF; relative: cwd, then the package share")
    joint_limits_overlay: str = Field(
        "", description="joint_limits YAML whose fields complete or override the limits file ('' = none)")
    # 100 Hz: five limiter steps per 20 Hz proposal, fine enough for a controlled stop at the Panda's
    # decelerations (7.5 rad/s^2 * 10 ms = 0.075 rad/s per step) and cheap (bench: tens of us per step).
    rate_hz: float = Field(100.0, gt=0.0, le=1000.0, description="command rate of the limiter (Hz)")
    command_timeout_s: float = Field(
        0.2, gt=0.0, le=MAX_TIMEOUT_S, description="no proposal for this long: controlled stop, then hold (s)")
    joint_state_timeout_s: float = Field(
        0.1, gt=0.0, le=MAX_TIMEOUT_S, description="no joint state for this long: controlled stop, then hold (s)")
    max_future_stamp_s: float = Field(
        0.05, ge=0.0, le=1.0, description="proposals stamped further ahead than this are refused (s)")
    target_horizon_s: float = Field(
        0.05, ge=0.0, le=1.0,
        description="reach each proposal over this horizon, the proposal period (s); 0 = within one tick")
    trajectory_delay_s: float = Field(
        0.0, ge=0.0, le=1.0,
        description="follow proposal rows this long after their times (s): a jitter buffer for a stream whose "
                    "next proposal may arrive after the last row is due (that row is then held until it does)")
    trajectory_smoothing_s: float = Field(
        0.05, ge=0.0, le=1.0,
        description="average the interpolated rows over this window (s), so a change of velocity between rows "
                    "is spread over it rather than one period; 0 or one period = linear interpolation only")
    shaping_tolerance: list[float] = Field(
        default_factory=lambda: [0.01], min_length=1,
        description="largest lag behind the position asked for (rad, m) at which a velocity, acceleration, "
                    "deceleration, jerk or range-braking limit counts as routine shaping, not a clamp; one value "
                    "or one per joint")
    # One value for every joint, so any robot starts without restating a list per joint (LeRobot's
    # max_relative_target reads the same way). In each joint's unit: metres for a prismatic joint, where a
    # gripper's travel of a few cm wants its own value (a per-joint list).
    max_relative_target: list[float] = Field(
        default_factory=lambda: [0.25], min_length=1,
        description="max distance of a command from the measured position (rad, m): one value for every "
                    "joint (default 0.25) or one per joint; <= 0 switches it off for that joint")
    out_of_range: Literal["refuse", "saturate"] = Field(
        "refuse", description="a proposal beyond the position range by more than out_of_range_tolerance: "
                              "refuse it and hold (refuse), or clamp it into the range (saturate)")
    out_of_range_tolerance: list[float] = Field(
        default_factory=lambda: [0.05], min_length=1,
        description="how far beyond the position range a proposal may reach before it is refused (rad, m): "
                    "one value for every joint (default 0.05) or one per joint; within it the target is "
                    "clamped into the range")
    limit_margin: float = Field(
        0.05, ge=0.0, le=0.5,
        description="fraction kept below the velocity, acceleration, deceleration and jerk limits, so a "
                    "servo that overshoots its command stays inside the real limit")
    uniform_scaling: bool = Field(
        False, description="scale all joints by one factor to keep the direction of motion "
                           "(per joint when infeasible)")
    proposed_command_topic: str = Field("/omni_vla/proposed_command", description="proposals in (JointTrajectory)")
    joint_states_topic: str = Field("/joint_states", description="measured joint states in (JointState)")
    command_topic: str = Field("/forward_position_controller/commands",
                               description="limited position commands out (Float64MultiArray)")
    output: Literal["forward_position", "joint_trajectory"] = Field(
        "forward_position",
        description="command output: Float64MultiArray for a forward position controller (command_topic), or "
                    "JointTrajectory with joint names, one point per period, for a joint_trajectory_controller "
                    "(trajectory_topic)")
    trajectory_topic: str = Field("/joint_trajectory_controller/joint_trajectory",
                                  description="limited commands out when output is joint_trajectory")
    gripper_output: Literal["none", "forward_position", "joint_trajectory"] = Field(
        "none",
        description="none: the gripper joint stays in the arm output; otherwise it goes alone to gripper_topic "
                    "(Float64MultiArray or JointTrajectory) for its own controller, the arm output without it")
    gripper_joint: str = Field("panda_finger_joint1", description="the joint sent on its own when gripper_output is set")
    gripper_topic: str = Field("/gripper_controller/commands", description="gripper commands out")
    estop_topic: str = Field("/omni_vla/estop", description="e-stop in (Bool): true latches a stop")
    reset_estop_service: str = Field("/omni_vla/reset_estop", description="clears a released e-stop (Trigger)")
    resync_command_service: str = Field(
        "/omni_vla/resync_command",
        description="moves a stopped robot's command to its measured pose, within the limits (Trigger)")
    diagnostics_topic: str = Field("/diagnostics", description="diagnostic_msgs/DiagnosticArray out")
    status_topic: str = Field("/omni_vla/safety_status", description="compact JSON status out (String)")
    status_period_s: float = Field(0.1, gt=0.0, le=60.0, description="status topic period (s)")
    diagnostics_period_s: float = Field(1.0, gt=0.0, le=60.0, description="diagnostics period (s)")

    @field_validator("joint_names")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"joint_names must be unique and non-empty, got {names}")
        return names

    @model_validator(mode="after")
    def _consistent(self) -> "SupervisorConfig":
        n = len(self.joint_names)
        for name in ("max_relative_target", "out_of_range_tolerance", "shaping_tolerance"):
            values = getattr(self, name)
            if len(values) not in (1, n):
                raise ValueError(f"{name} needs 1 or {n} values (one for every joint, or one per joint of "
                                 f"joint_names), got {len(values)}")
            if not all(math.isfinite(v) for v in values):
                raise ValueError(f"{name} must be finite, got {values}")
        for name in ("out_of_range_tolerance", "shaping_tolerance"):
            if any(v < 0 for v in getattr(self, name)):
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.gripper_output != "none" and self.gripper_joint not in self.joint_names:
            raise ValueError(f"gripper_joint '{self.gripper_joint}' is not one of joint_names {self.joint_names}")
        if self.gripper_output != "none" and len(self.joint_names) < 2:
            raise ValueError("gripper_output needs at least one arm joint besides the gripper joint")
        period = 1.0 / self.rate_hz
        for name in ("command_timeout_s", "joint_state_timeout_s"):
            if getattr(self, name) < 2 * period:
                raise ValueError(f"{name} {getattr(self, name)} is shorter than two supervisor periods "
                                 f"({2 * period:.4f} s at rate_hz {self.rate_hz})")
        return self

    @property
    def dt(self) -> float:
        """Command period the limiter integrates with."""
        return 1.0 / self.rate_hz


def config_from_yaml(path: str | Path) -> SupervisorConfig:
    """Read `safety_supervisor: ros__parameters:` (or `/**:`) from a ROS parameter file."""
    data: Any = yaml.safe_load(Path(path).read_text()) or {}
    for key in (NODE_NAME, f"/{NODE_NAME}", "/**"):
        params = (data.get(key) or {}).get("ros__parameters") if isinstance(data, dict) else None
        if isinstance(params, dict):
            return SupervisorConfig(**params)
    raise ValueError(f"{path}: no '{NODE_NAME}: ros__parameters:' section")


def share_dir() -> Path | None:
    """The package's installed share directory, if ament knows it (or the install prefix has it)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory  # optional: only in a sourced ROS install

        try:
            return Path(get_package_share_directory(PACKAGE))
        except (PackageNotFoundError, OSError):  # OSError: AMENT_PREFIX_PATH unset (no sourced workspace)
            pass
    except ImportError:
        pass
    candidate = Path(sys.prefix) / "share" / PACKAGE
    return candidate if candidate.is_dir() else None


def resolve_path(name: str) -> Path:
    """Absolute as given; else relative to the cwd, the package share dir, then the source checkout."""
    path = Path(os.path.expanduser(name))
    if path.is_absolute():
        candidates = [path]
    else:
        share = share_dir()
        candidates = [Path.cwd() / path] + ([share / path] if share else [])
        candidates.append(Path(__file__).resolve().parent.parent / path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{name}: not found (looked in {', '.join(str(c) for c in candidates)})")
