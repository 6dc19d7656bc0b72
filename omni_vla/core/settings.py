"""Validated settings of the assembled loop and of vla_node: every default is stated here, once.

`LoopSettings` is what the ROS-free loop is (rate, chunk splicing, observation age, sampling); the node,
the evaluation suite and the loop benchmark all build their loop from it (omni_vla.assembly). Its defaults are
the neutral ones of the loop used as a library (a fixed rate, replace at once, no shaping); `VlaNodeConfig`
states what vla_node runs unless told otherwise. config/vla_node.yaml restates none of them (a test says so): it
holds the deployment's own values, and the evaluation suite reads it, so its figures are the robot's.
`WorkerSettings` is how the inference worker process is supervised; `VlaNodeConfig` adds the bundle,
backend and ROS wiring. ROS parameters are flat ("topics.joint_states"), so `from_ros_parameters`
rebuilds the nesting before validating.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from omni_vla import JOINT_NAMES
from omni_vla.backends import RobotBackend
from omni_vla.cameras import parse_camera_topics
from omni_vla.core.chunking import Strategy
from omni_vla.core.cpu_list import parse_cpu_list


# Read at each use while the loop runs, so a set_parameters takes effect at the next tick or message;
# the other settings build something once (queue sizes, the worker, the scheduler, subscriptions).
LIVE_LOOP_SETTINGS = frozenset({"max_obs_age_s", "max_future_stamp_s", "average_old_weight"})


class LoopSettings(BaseModel):
    """How the fixed-rate loop turns observations and action chunks into one command per tick."""

    model_config = ConfigDict(extra="forbid")

    rate_hz: float = Field(
        20.0, ge=0, le=1000, description="control rate (ticks per second); 0: the bundle's control_rate_hz"
    )
    strategy: Strategy = Field(
        "naive", description="how a new chunk is spliced into the queue (naive: best on validation at the node's delay)"
    )
    execution_horizon: int = Field(
        12, ge=0,
        description="s: actions executed from each chunk before the next is requested (d <= s <= H - d); "
                    "0: the bundle's execute_steps",
    )
    max_obs_age_s: float = Field(
        0.5, gt=0, description="camera/joint data older than this (by header.stamp) -> no command, STALE"
    )
    max_future_stamp_s: float = Field(
        0.05, ge=0, le=10,
        description="a header.stamp further ahead of this node's clock (clock skew) is not used: arrival time instead",
    )
    average_old_weight: float = Field(0.3, ge=0, le=1, description="weight of the old chunk on the overlap ('average')")
    splice_blend_ticks: int = Field(
        0, ge=0, le=64, description="'naive': crossfade a new chunk's first rows from the queue it replaces over this "
        "many ticks (0: replace at once)",
    )
    command_accel_fraction: float = Field(
        0.0, ge=0, le=1, description="the rows sent keep to this fraction of the robot's velocity and acceleration "
        "limits (its joint limits file), so the supervisor never clamps ordinary motion; 0: the plan's rows as they "
        "are",
    )
    command_max_lead: list[str] = Field(
        default_factory=list, description="'joint=bound' entries (m or rad): the row sent stays within the bound of "
        "that joint's measured position while shaping (a gripper closing on an object; keep it under the "
        "supervisor's max_relative_target for that joint)",
    )
    latency_window: int = Field(32, ge=1, le=4096, description="recent inference latencies kept for the p95 delay")
    noise_scale: float = Field(
        0.0, ge=0.0, le=1.0, description="flow sampling temperature: initial noise N(0, s^2); 0 = deterministic chunks"
    )
    joint_names: list[str] = Field(
        default_factory=lambda: list(JOINT_NAMES), min_length=1,
        description="the policy's joints in its action order (checked against the bundle at configure)",
    )

    @field_validator("joint_names")
    @classmethod
    def _unique_names(cls, names: list[str]) -> list[str]:
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"joint_names has duplicates: {dupes}")
        if any(not n for n in names):
            raise ValueError("joint_names has an empty name")
        return names

    @property
    def period_s(self) -> float:
        return 1.0 / self.rate_hz

    def for_policy(self, control_rate_hz: float | None, execute_steps: int | None) -> "LoopSettings":
        """These settings with each 0 ("the bundle's") replaced by the policy's own value; refused if it has none."""
        update: dict[str, float | int] = {}
        for key, value, what in (("rate_hz", control_rate_hz, "control_rate_hz"),
                                 ("execution_horizon", execute_steps, "execute_steps")):
            if getattr(self, key) == 0:
                if not value:
                    raise ValueError(f"{key} is 0 (the bundle's) but the bundle states no {what}: set {key}")
                if not value > 0:
                    raise ValueError(f"{key} {value} must be > 0 (the bundle's {what})")
                update[key] = value
        if not update:
            return self
        try:  # validated like the settings' own values (a bundle's 5 kHz or inf is refused, not run)
            return type(self).model_validate({**self.model_dump(), **update})
        except ValidationError as exc:
            err = exc.errors()[0]
            key = str(err["loc"][0])
            raise ValueError(f"{key} is 0 (the bundle's) and the bundle's value {update[key]!r} is refused: "
                             f"{err['msg']}") from None


class WorkerSettings(BaseModel):
    """How the inference worker process is watched and restarted."""

    model_config = ConfigDict(extra="forbid")

    inference_timeout_s: float = Field(
        1.0, gt=0, description="a request unanswered this long means a hung worker (killed, restarted with backoff); "
        "raised at start-up to 3x the warm-up chunk's seconds, so a real-size VLA needs no setting of its own",
    )
    startup_timeout_s: float = Field(60.0, gt=0, description="worker load budget, and again its warm-up's")
    restart_backoff_s: float = Field(0.5, gt=0, description="first worker restart delay, doubled per failure")
    restart_backoff_max_s: float = Field(10.0, gt=0, description="cap of the restart delay")
    worker_cpus: str = Field(
        "", description="CPUs the inference worker runs on, as taskset writes them ('1', '2-5'); empty: any. "
        "A multi-second policy on few cores: give it cores the loop and supervisor do not need",
    )
    worker_nice: int = Field(
        0, ge=0, le=19, description="added to the inference worker's nice value: the loop, supervisor and drivers "
        "get the CPU first when they compete with a long inference",
    )

    @field_validator("worker_cpus")
    @classmethod
    def _cpu_list(cls, text: str) -> str:
        parse_cpu_list(text)
        return text


class TopicsConfig(BaseModel):
    """Topic names (all remappable); defaults are the topics in docs/robot.md."""

    model_config = ConfigDict(extra="forbid")

    cameras: list[str] = Field(
        default_factory=lambda: ["front=/camera/front/image_raw", "wrist=/camera/wrist/image_raw"], min_length=1,
        description="'name=topic' per camera (sensor_msgs/Image); every camera the bundle names needs one",
    )
    joint_states: str = Field("/joint_states", description="measured joint positions (sensor_msgs/JointState)")
    instruction: str = Field("/omni_vla/instruction", description="task instruction (std_msgs/String, latched)")
    proposed_command: str = Field(
        "/omni_vla/proposed_command", description="proposed joint command to the supervisor (JointTrajectory)"
    )
    diagnostics: str = Field("/diagnostics", description="diagnostic_msgs/DiagnosticArray output")
    replan_request: str = Field("/omni_vla/replan", description="std_msgs/String (the reason): ask the cloud for a plan")
    request_plan_service: str = Field("/omni_vla/request_plan", description="std_srvs/Trigger: the same, as a service")

    @field_validator("cameras")
    @classmethod
    def _camera_entries(cls, entries: list[str]) -> list[str]:
        parse_camera_topics(entries)
        return entries

    def camera_topics(self) -> dict[str, str]:
        """camera name -> topic."""
        return parse_camera_topics(self.cameras)


class VlaNodeConfig(LoopSettings, WorkerSettings):
    """vla_node parameters: the loop's and the worker's settings plus bundle, backend and ROS wiring."""

    bundle_dir: Path = Field(..., description="exported policy bundle directory")
    rate_hz: float = Field(
        0.0, ge=0, le=1000, description="control rate (ticks per second); 0: the bundle's control_rate_hz"
    )
    execution_horizon: int = Field(
        0, ge=0, description="s: actions executed from each chunk before the next is requested (d <= s <= H - d); "
        "0: the bundle's execute_steps. Lower it when inference takes longer than the rest of the chunk",
    )
    splice_blend_ticks: int = Field(
        3, ge=0, le=64, description="'naive': crossfade a new chunk's first rows from the queue it replaces over this "
        "many ticks (0: at once); 3 chosen on validation seeds (docs/decisions)",
    )
    command_accel_fraction: float = Field(
        0.9, ge=0, le=1, description="the rows sent keep to this fraction of the robot's velocity and acceleration "
        "limits (joint_limits_file), under the supervisor's limit_margin, so it does not clamp ordinary motion; "
        "0: the plan's rows as they are",
    )
    backend: RobotBackend = Field("mnn", description="inference runtime for the bundle")
    threads: int = Field(1, ge=1, le=64, description="runtime threads (leave a core to the loop)")
    topics: TopicsConfig = Field(default_factory=TopicsConfig)
    compressed_images: bool = Field(False, description="subscribe <image topic>/compressed (sensor_msgs/CompressedImage)")
    autostart: bool = Field(True, description="configure + activate at start (false: wait for a lifecycle manager)")
    diagnostics_period_s: float = Field(1.0, gt=0, le=3600, description="period of the /diagnostics status")
    realtime_priority: int = Field(
        50, ge=0, le=99, description="SCHED_FIFO priority of the loop thread (ros2_control's 50; 0: normal "
        "scheduling). Without rtprio (limits.conf) or root, diagnostics say so and the loop runs unprioritised",
    )
    openpi_config: str = Field("", description="OpenPI re-planning YAML (config/openpi.yaml); empty: no cloud")
    joint_limits_file: str = Field(
        "", description="the robot's joint limits (the supervisor's file): configure refuses a bundle with a joint "
                        "that has no entry there, and command shaping follows them; empty: neither (the supervisor "
                        "still refuses such commands)",
    )
    joint_limits_overlay: str = Field(
        "", description="joint_limits YAML over joint_limits_file (the supervisor's overlay: the velocity and "
                        "acceleration limits a URDF or MJCF lacks); empty: none",
    )
    replan_intervention_kinds: list[str] = Field(
        default_factory=lambda: ["position", "velocity", "max_step"],
        description="supervisor intervention kinds that count toward the re-plan trigger (shaping is routine)",
    )

    @model_validator(mode="after")
    def _bundle_given(self) -> "VlaNodeConfig":
        if not str(self.bundle_dir) or str(self.bundle_dir) == ".":
            raise ValueError("bundle_dir is empty: set it to an exported bundle directory")
        return self

    def loop(self) -> LoopSettings:
        """The ROS-free part: what the assembled loop is."""
        return LoopSettings(**{k: getattr(self, k) for k in LoopSettings.model_fields})

    def worker(self) -> WorkerSettings:
        return WorkerSettings(**{k: getattr(self, k) for k in WorkerSettings.model_fields})

    @classmethod
    def from_ros_parameters(cls, flat: dict[str, Any]) -> "VlaNodeConfig":
        """Validate flat ROS parameters ("topics.joint_states": ...) into the nested model."""
        nested: dict[str, Any] = {}
        for key, value in flat.items():
            head, _, tail = key.partition(".")
            if tail:
                nested.setdefault(head, {})[tail] = value
            else:
                nested[key] = value
        return cls.model_validate(nested)


def flat_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """Nested parameters -> flat ROS names ("topics.joint_states"), paths as strings, lists kept."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                out[f"{key}.{sub}"] = v
        else:
            out[key] = str(value) if isinstance(value, Path) else value
    return out


def flatten(model: BaseModel) -> dict[str, Any]:
    """Model -> flat ROS parameter dict."""
    return flat_parameters(model.model_dump())


def load_node_yaml(path: str | Path, node_name: str = "vla_node") -> dict[str, Any]:
    """The `ros__parameters` mapping of a standard ROS 2 parameter file, flattened."""
    data = yaml.safe_load(Path(path).read_text())
    try:
        params = data[node_name]["ros__parameters"]
    except (KeyError, TypeError):
        raise ValueError(f"{path}: no '{node_name}: ros__parameters:' section") from None
    return flat_parameters(params)


def node_settings(path: str | Path) -> VlaNodeConfig:
    """vla_node's validated settings from its parameter file: what the robot runs, for eval and bench too."""
    return VlaNodeConfig.from_ros_parameters(load_node_yaml(path))
