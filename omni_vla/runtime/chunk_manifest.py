"""Bundle format 3, kind "chunk": a single-pass chunk predictor (ACT-like) described by its manifest alone.

A robot integrator reads everything the loop needs from here, not from the exporter's code: named cameras
(resolution, channel order, value range), the state vector (joint names, units), the action chunk (length,
joint names, absolute or delta, which joint is the gripper), the normalisation the runtime applies on each side
of the graph, the control rate, and each artifact's hash. docs/bundle_format.md is the prose of this schema.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from omni_vla.backends import ArtifactFormat
from omni_vla.cameras import check_camera_name
from omni_vla.runtime.bundle import ArtifactSpec, TensorSpec

CHUNK_FORMAT = "omni_vla.bundle/3"
CHUNK_STAGE = "policy"
Unit = Literal["rad", "m"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CameraSpec(_Strict):
    name: str = Field(description="matched to a topic by name in the node's parameters (cameras.py check_camera_name)")
    height: int = Field(ge=8)
    width: int = Field(ge=8)
    channel_order: Literal["rgb"] = "rgb"
    value_range: Literal["unit"] = Field("unit", description="float32 in [0, 1] before normalisation")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return check_camera_name(name)


class StateSpec(_Strict):
    joint_names: list[str] = Field(min_length=1)
    units: list[Unit]


class ActionSpec(_Strict):
    joint_names: list[str] = Field(min_length=1)
    units: list[Unit]
    space: Literal["absolute", "delta"] = Field(description="joint-position targets, or offsets from the state")
    chunk_length: int = Field(ge=1)
    execute_steps: int = Field(ge=1, description="rows the source policy executed per inference (n_action_steps)")
    gripper: str | None = Field(None, description="the joint in joint_names that is the gripper, if any")


class AffineSpec(_Strict):
    """normalised = (raw - subtract) / divide for inputs; raw = normalised * divide + subtract for the action."""

    subtract: list[float] = Field(min_length=1)
    divide: list[float] = Field(min_length=1)


class InstructionInputSpec(_Strict):
    """For a policy without a language model (ACT): the instruction selects its conditioning vector by exact text,
    fed as the `environment_state` input. An instruction not in the table is refused, never guessed."""

    input: Literal["environment_state"] = "environment_state"
    names: list[str] = Field(min_length=1, description="what each element of the vector means (e.g. task names)")
    table: dict[str, list[float]] = Field(min_length=1, description="instruction text -> vector")


class ChunkStageSpec(_Strict):
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    artifacts: dict[ArtifactFormat, ArtifactSpec]
    flops: int | None = Field(None, ge=0, description="floating-point operations of one call, counted on the float "
                              "model at export (for per-stage GFLOP/s); absent in bundles exported before it")


class Format3Manifest(_Strict):
    """What a format-3 manifest states whatever its kind: the policy, the robot side and the rate."""

    format: Literal["omni_vla.bundle/3"]
    policy: str = Field(description="architecture, e.g. lerobot_act, lerobot_smolvla")
    source: dict = Field(description="where the weights came from (checkpoint, hashes, configuration)")
    control_rate_hz: float = Field(gt=0)
    cameras: list[CameraSpec] = Field(min_length=1)
    state: StateSpec
    action: ActionSpec
    versions: dict[str, str]

    @property
    def joint_names(self) -> list[str]:
        """The action's joints, in order (as a format-2 manifest names them)."""
        return list(self.action.joint_names)

    def _check_robot_side(self) -> None:
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError(f"camera names must be unique, got {names}")
        for spec, what in ((self.state, "state"), (self.action, "action")):
            if len(spec.units) != len(spec.joint_names):
                raise ValueError(f"{what}: {len(spec.units)} units for {len(spec.joint_names)} joints")
        if list(self.state.joint_names) != list(self.action.joint_names):
            raise ValueError(f"state.joint_names {list(self.state.joint_names)} must be action.joint_names "
                             f"{list(self.action.joint_names)}: the loop feeds the measured positions of the action's "
                             "joints, in that order")
        if self.action.gripper is not None and self.action.gripper not in self.action.joint_names:
            raise ValueError(f"action.gripper {self.action.gripper!r} is not one of action.joint_names")
        if self.action.execute_steps > self.action.chunk_length:
            raise ValueError(f"action.execute_steps {self.action.execute_steps} > chunk_length {self.action.chunk_length}")


def check_affine(key: str, aff: AffineSpec, size: int) -> None:
    """One value (broadcast) or one per element, and every divisor positive."""
    for field in ("subtract", "divide"):
        n = len(getattr(aff, field))
        if n not in (1, size):
            raise ValueError(f"normalization.{key}.{field} has {n} values, expected 1 or {size}")
    if min(aff.divide) <= 0:
        raise ValueError(f"normalization.{key}.divide must be > 0")


class ChunkManifest(Format3Manifest):
    kind: Literal["chunk"]
    instruction_input: InstructionInputSpec | None = None
    normalization: dict[str, AffineSpec] = Field(
        description="one per camera name, 'state', 'action' (and 'environment_state' with an instruction_input)")
    stages: dict[str, ChunkStageSpec]

    @model_validator(mode="after")
    def _consistent(self) -> "ChunkManifest":
        self._check_robot_side()
        names = [c.name for c in self.cameras]
        cond = self.instruction_input
        want_norm = {*names, "state", "action"} | ({cond.input} if cond else set())
        if set(self.normalization) != want_norm:
            raise ValueError(f"normalization keys {sorted(self.normalization)}, expected {sorted(want_norm)}")
        sizes = {**{c.name: 3 for c in self.cameras}, "state": len(self.state.joint_names),
                 "action": len(self.action.joint_names)}
        if cond is not None:
            sizes[cond.input] = len(cond.names)
            bad = {t: len(v) for t, v in cond.table.items() if len(v) != len(cond.names)}
            if bad:
                raise ValueError(f"instruction_input.table vectors must have {len(cond.names)} values, got {bad}")
        for key, aff in self.normalization.items():
            check_affine(key, aff, sizes[key])
        if set(self.stages) != {CHUNK_STAGE}:
            raise ValueError(f"stages {sorted(self.stages)}, expected ['{CHUNK_STAGE}']")
        stage = self.stages[CHUNK_STAGE]
        want = [(c.name, (1, 3, c.height, c.width)) for c in self.cameras]
        want.append(("state", (1, len(self.state.joint_names))))
        if cond is not None:
            want.append((cond.input, (1, len(cond.names))))
        got = [(t.name, t.shape) for t in stage.inputs]
        if got != want:
            raise ValueError(f"stage {CHUNK_STAGE} inputs {got}, expected {want} (cameras in order, state, conditioning)")
        out = (1, self.action.chunk_length, len(self.action.joint_names))
        if [t.shape for t in stage.outputs] != [out]:
            raise ValueError(f"stage {CHUNK_STAGE} outputs {[t.shape for t in stage.outputs]}, expected [{out}]")
        return self
