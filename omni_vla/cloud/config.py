"""Validated settings for the OpenPI re-planning client (config/openpi.yaml).

Secrets never live in the YAML: the API key is read from the environment variable named by
`client.api_key_env` at start-up.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from omni_vla.policy import KeyMap

Protocol = Literal["openpi", "vllm-omni"]
Scalar = Union[str, int, float, bool]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClientConfig(_Strict):
    """Where and how to connect; every wait is bounded."""

    uri: str = Field("ws://127.0.0.1:8000", description="ws:// or wss:// URI (vLLM-Omni: .../v1/realtime/robot/openpi)")
    protocol: Protocol = Field("openpi", description="openpi: errors close the connection; vllm-omni: they do not")
    api_key_env: str = Field("", description="environment variable holding the key for 'Authorization: Api-Key'")
    verify_tls: bool = Field(True, description="verify the server certificate on wss:// (never turn off on a robot)")
    ca_file: Path | None = Field(None, description="extra CA bundle for wss:// (self-hosted servers)")
    proxy: str | None = Field(None, description="proxy URI; None connects directly (ignores *_PROXY variables)")
    max_message_bytes: int = Field(1 << 20, ge=1024, le=1 << 28, description="larger frames are refused (close 1009)")
    open_timeout_s: float = Field(5.0, gt=0, le=120)
    request_timeout_s: float = Field(3.0, gt=0, le=120, description="no reply by then: drop the connection")
    ping_interval_s: float | None = Field(10.0, gt=0, description="keepalive ping period (None: off)")
    ping_timeout_s: float | None = Field(10.0, gt=0)
    backoff_initial_s: float = Field(0.25, gt=0, le=60)
    backoff_max_s: float = Field(5.0, gt=0, le=600)

    @field_validator("uri")
    @classmethod
    def _ws_uri(cls, uri: str) -> str:
        if not uri.startswith(("ws://", "wss://")):
            raise ValueError(f"uri must start with ws:// or wss://, got {uri!r}")
        return uri

    @model_validator(mode="after")
    def _backoff_order(self) -> "ClientConfig":
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(f"backoff_max_s {self.backoff_max_s} < backoff_initial_s {self.backoff_initial_s}")
        return self

    def api_key(self) -> str | None:
        """The key from the environment, or None; a named but unset variable is an error."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(f"api_key_env={self.api_key_env!r} is set but that environment variable is empty")
        return key


class TriggerConfig(_Strict):
    """When to ask the cloud for a plan; the local policy runs meanwhile."""

    cadence_s: float = Field(0.0, ge=0, description="ask every this many seconds (0: off)")
    stall_window_s: float = Field(1.5, ge=0, description="no joint progress over this window is a stall (0: off)")
    stall_joint_tol_rad: float = Field(0.01, gt=0, description="max-min of every arm joint below this: no progress")
    stall_gripper_tol_m: float = Field(0.002, gt=0, description="max-min of the gripper opening below this")
    stall_ee_tol_m: float = Field(
        0.0, ge=0, description="when observations carry 'ee_pos' (xyz, m): end-effector travel over the window "
        "below this (and a still gripper) is a stall, instead of the joint test (0: joints only)")
    intervention_count: int = Field(3, ge=0, description="this many supervisor interventions ... (0: off)")
    intervention_window_s: float = Field(2.0, gt=0, description="... within this window trigger a plan")
    on_instruction_change: bool = True
    min_interval_s: float = Field(1.0, ge=0, description="automatic triggers wait this long after a request")


class ReplanConfig(_Strict):
    """Everything the re-planner needs; `enabled: false` keeps the robot fully local."""

    enabled: bool = False
    client: ClientConfig = Field(default_factory=ClientConfig)
    keys: KeyMap = Field(default_factory=KeyMap)
    triggers: TriggerConfig = Field(default_factory=TriggerConfig)
    rate_hz: float = Field(20.0, gt=0, le=1000, description="control rate: one plan row per tick")
    action_dim: int = Field(8, ge=1, le=64)
    max_horizon: int = Field(64, ge=1, le=4096, description="longer plans are refused")
    min_steps: int = Field(2, ge=1, description="fewer rows left after time alignment: discard")
    max_plan_age_s: float = Field(1.0, gt=0, le=60, description="older than this (from the observation): discard")
    image_size: int = Field(0, ge=0, le=1024, description="resize camera frames to this square size (0: as is)")
    network: Literal["process", "thread"] = Field(
        "process", description="where the websocket client runs: its own process (robots: keeps msgpack and "
        "framing off the control loop's GIL) or a thread (simulated-time evaluation)")
    extra_fields: dict[str, Scalar] = Field(
        default_factory=dict, description="static request fields, e.g. session_id or embodiment for vLLM-Omni"
    )

    @property
    def period_s(self) -> float:
        return 1.0 / self.rate_hz

    @model_validator(mode="after")
    def _no_key_clash(self) -> "ReplanConfig":
        clash = set(self.extra_fields) & set(self.keys.all())
        if clash:
            raise ValueError(f"extra_fields would overwrite observation keys {sorted(clash)}")
        return self


def load_replan_config(path: str | Path) -> ReplanConfig:
    """Read config/openpi.yaml (a top-level `openpi:` mapping) into a validated ReplanConfig."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("openpi"), dict):
        raise ValueError(f"{path}: expected a top-level 'openpi:' mapping")
    return ReplanConfig.model_validate(data["openpi"])
