"""The one policy interface: what every source of action chunks looks like from outside.

Shaped after openpi-client's BasePolicy so a policy here and a policy behind an OpenPI server are
interchangeable: `infer(obs)` takes one observation dict and returns {"actions": [H, D], ...};
`reset()` starts a new episode; `metadata` describes the policy (at least "action_horizon" and
"action_dim"). Implemented by the local runtime (omni_vla.inference.policy.BundlePolicy), the cloud
client (omni_vla.cloud.policy.CloudPolicy) and the simulator's expert (omni_vla_sim.oracle).
The fixed-rate loop does not call `infer` per tick: it runs a runtime asynchronously through an
inference client (omni_vla.inference) and splices chunks; this interface is for serving,
re-planning and evaluation, where one call per chunk is the unit.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from omni_vla.cameras import check_camera_name

REQUIRED_METADATA = ("action_horizon", "action_dim")


class KeyMap(BaseModel):
    """Observation keys for each input (openpi's LIBERO/DROID-style names by default); cameras by name."""

    model_config = ConfigDict(extra="forbid")

    images: dict[str, str] = Field(
        default_factory=lambda: {"front": "observation/image", "wrist": "observation/wrist_image"}, min_length=1,
        description="camera name (the policy's, the loop's) -> request key",
    )
    state: str = Field("observation/state", min_length=1)
    prompt: str = Field("prompt", min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> "KeyMap":
        for name in self.images:
            check_camera_name(name)
        keys = self.all()
        if len(set(keys)) != len(keys) or not all(keys):
            raise ValueError(f"request keys must be distinct and non-empty, got {keys}")
        return self

    def all(self) -> list[str]:
        """Every request key: the images', the state's and the prompt's."""
        return [*self.images.values(), self.state, self.prompt]


@runtime_checkable
class Policy(Protocol):
    """A source of action chunks."""

    metadata: dict[str, Any]

    def infer(self, obs: dict) -> dict:
        """One observation -> {"actions": float array [H, D], ...}."""

    def reset(self) -> None:
        """Forget episode state (a new episode starts)."""


def check_metadata(policy: Policy) -> dict[str, Any]:
    """The policy's metadata, refused when it does not say its chunk shape."""
    missing = [key for key in REQUIRED_METADATA if key not in policy.metadata]
    if missing:
        raise ValueError(f"policy metadata lacks {missing}; has {sorted(policy.metadata)}")
    return policy.metadata
