"""Policy bundle: manifest schema and integrity checks (torch-free); the runtimes' shared part is runtime/base.py.

A bundle directory holds one artifact per stage and backend (prefix.pte, flow_step.mnn, ...), the
instruction-embedding table and manifest.json. The flow head is three stages that runtime/flow.py
chains: flow_init (once), flow_step (N times, the step index one-hot), flow_finish (once). Loading refuses, with a message naming the problem,
a bundle whose format, library versions, artifact hashes/sizes or tensor shapes do not match, so
nothing can fail later inside the control loop.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from omni_vla.backends import LIBRARY_OF, ArtifactFormat
from omni_vla.cameras import REFERENCE_CAMERAS, CameraInput

BUNDLE_FORMAT = "omni_vla.bundle/2"
MANIFEST_NAME = "manifest.json"
STAGES = ("prefix", "flow_init", "flow_step", "flow_finish")


class BundleError(RuntimeError):
    """The bundle cannot be used as is; the message says what is wrong and where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorSpec(_Strict):
    name: str
    shape: tuple[int, ...]
    dtype: Literal["float32", "int32"]


class ArtifactSpec(_Strict):
    file: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=1)
    # What the artifact computes in; its inputs and outputs stay the stage's TensorSpec dtypes either way.
    compute_dtype: Literal["float32", "float16"] = "float32"
    # ExecuTorch only: the delegate the program was lowered to (None: XNNPACK); OpenVINO's is configured on load.
    delegate: Literal["openvino"] | None = None


class StageSpec(_Strict):
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    artifacts: dict[ArtifactFormat, ArtifactSpec]
    graph: str = "reference"  # how the exported graph was built from the checkpoint's modules (e.g. a folded form)


class NormalizationSpec(_Strict):
    """Dataset statistics (also baked into the graphs as buffers); action stats are in `action_mode` space."""

    action_mode: Literal["delta", "absolute"]
    state_mean: list[float]
    state_std: list[float]
    action_mean: list[float]
    action_std: list[float]


class InstructionSpec(_Strict):
    encoder: str = "sentence-transformers/all-MiniLM-L6-v2"
    pooling: Literal["mean"] = "mean"
    l2_normalized: bool = True
    max_tokens: int = 32
    table: ArtifactSpec  # embeddings.npz: texts (str), embeddings float32 [n, embedding_dim]


class TrainingInfo(_Strict):
    seed: int
    dataset_sha256: str
    checkpoint_sha256: str
    steps: int
    final_loss: float | None = None
    config: dict


class BundleManifest(_Strict):
    format: Literal["omni_vla.bundle/2"]
    policy: str = "omni_vla_reference_flow_vla"
    joint_names: list[str]
    control_rate_hz: float = Field(gt=0)
    horizon: int = Field(ge=1)
    action_dim: int = Field(ge=1)
    num_steps: int = Field(ge=1)
    max_prefix: int = Field(ge=0)
    image_size: int = Field(ge=8)
    embedding_dim: int = Field(ge=1)
    execute_steps: int | None = Field(
        None, ge=1, description="actions executed per chunk the policy was validated at (the loop's default)"
    )
    normalization: NormalizationSpec
    instruction: InstructionSpec
    stages: dict[str, StageSpec]
    versions: dict[str, str]
    training: TrainingInfo
    torch_checkpoint: ArtifactSpec | None = None  # policy.pt: weights for eager PyTorch (parity, bench, re-export)

    @property
    def kind(self) -> Literal["flow"]:
        """Format 2 has one kind and no `kind` field; stated here so every manifest names its kind."""
        return "flow"

    @property
    def cameras(self) -> tuple[CameraInput, ...]:
        """The reference layout's two square cameras (format 2 has no camera list: its graph is front, wrist)."""
        return tuple(CameraInput(name, self.image_size, self.image_size) for name in REFERENCE_CAMERAS)

    def compute_dtype(self, backend: str) -> str:
        """What `backend`'s artifacts compute in ("mixed" if the stages differ): reports must say it."""
        found = {s.artifacts[backend].compute_dtype for s in self.stages.values() if backend in s.artifacts}
        return found.pop() if len(found) == 1 else "mixed"

    @model_validator(mode="after")
    def _consistent(self) -> "BundleManifest":
        d, h, s, e = self.action_dim, self.horizon, self.image_size, self.embedding_dim
        if len(self.joint_names) != d:
            raise ValueError(f"{len(self.joint_names)} joint_names for action_dim {d}")
        if self.max_prefix >= h:
            raise ValueError(f"max_prefix {self.max_prefix} must be < horizon {h}")
        if self.execute_steps is not None and self.execute_steps > h:
            raise ValueError(f"execute_steps {self.execute_steps} must be <= horizon {h}")
        n = self.normalization
        for k in ("state_mean", "state_std", "action_mean", "action_std"):
            if len(getattr(n, k)) != d:
                raise ValueError(f"normalization.{k} has {len(getattr(n, k))} values, expected {d}")
        if min(n.state_std + n.action_std) <= 0:
            raise ValueError("normalization std must be > 0")
        if set(self.stages) != set(STAGES):
            raise ValueError(f"stages {sorted(self.stages)}, expected {list(STAGES)}")
        x = (h, d)
        want = {
            "prefix": {"front": (1, 3, s, s), "wrist": (1, 3, s, s), "state": (1, d), "instruction": (1, e)},
            "flow_init": {"state": (1, d), "noise": (1, h, d), "prefix": (1, h, d), "prefix_mask": (1, h, 1)},
            "flow_step": {"x": x, "prefix_mask": (1, h, 1), "step": (1, self.num_steps)},
            "flow_finish": {"x": x, "state": (1, d), "prefix": (1, h, d), "prefix_mask": (1, h, 1)},
        }
        for stage, shapes in want.items():
            got = {t.name: t.shape for t in self.stages[stage].inputs}
            for name, shape in shapes.items():
                if got.get(name) != shape:
                    raise ValueError(f"stage {stage} input {name}: shape {got.get(name)}, expected {shape}")
        init, step = self.stages["flow_init"], self.stages["flow_step"]
        if [t.name for t in step.inputs[:3]] != ["x", "prefix_mask", "step"]:
            raise ValueError(f"flow_step inputs must start with x, prefix_mask, step; got {[t.name for t in step.inputs[:3]]}")
        if not init.outputs or (init.outputs[0].name, init.outputs[0].shape) != ("x", x):
            raise ValueError(f"flow_init's first output must be x {x}")
        made = {t.name: t.shape for t in init.outputs[1:]}
        for t in step.inputs[3:]:  # per-inference constants (context keys/values) come from flow_init
            if made.get(t.name) != t.shape:
                raise ValueError(f"flow_step input {t.name} {t.shape}: flow_init outputs {made.get(t.name)}")
        if [o.shape for o in step.outputs] != [x]:
            raise ValueError(f"flow_step output must be one {x} tensor, got {[o.shape for o in step.outputs]}")
        out = self.stages["flow_finish"].outputs
        if len(out) != 1 or out[0].shape != (1, h, d):
            raise ValueError(f"flow_finish output must be one [1,{h},{d}] tensor, got {[o.shape for o in out]}")
        ctx = self.stages["prefix"].outputs
        if len(ctx) != 1 or {t.name: t.shape for t in init.inputs}.get(ctx[0].name) != ctx[0].shape:
            raise ValueError("prefix output must be one tensor that flow_init takes by the same name and shape")
        return self


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def artifact_spec(bundle_dir: str | Path, file: str, compute_dtype: str = "float32") -> ArtifactSpec:
    p = Path(bundle_dir) / file
    return ArtifactSpec(file=file, sha256=sha256_file(p), size_bytes=p.stat().st_size, compute_dtype=compute_dtype)


def write_json_atomic(path: str | Path, obj: dict) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_manifest(bundle_dir: str | Path, manifest: BundleManifest) -> Path:
    path = Path(bundle_dir) / MANIFEST_NAME
    write_json_atomic(path, manifest.model_dump(mode="json"))
    return path


M = TypeVar("M", bound=BaseModel)


def read_json(path: Path) -> object:
    """The parsed JSON of a manifest; a missing or unparsable file is refused naming it."""
    if not path.is_file():
        raise BundleError(f"{path}: no manifest (is {path.parent} a bundle directory?)")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"{path}: not valid JSON ({e})") from e


def validate_json(path: Path, raw: object, model: type[M], fmt: str) -> M:
    """Validate parsed JSON read from `path`; a wrong format version is named before schema errors."""
    got = raw.get("format") if isinstance(raw, dict) else None
    if got != fmt:
        raise BundleError(f"{path}: format {got!r}, this runtime reads {fmt!r}; re-export the bundle")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise BundleError(f"{path}: invalid manifest: {e}") from e


def read_json_model(path: Path, model: type[M], fmt: str) -> M:
    """Parse and validate a JSON manifest."""
    return validate_json(path, read_json(path), model, fmt)


def read_manifest(bundle_dir: str | Path) -> BundleManifest:
    return read_json_model(Path(bundle_dir) / MANIFEST_NAME, BundleManifest, BUNDLE_FORMAT)


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def verify_artifact(bundle_dir: str | Path, spec: ArtifactSpec) -> Path:
    """Existence, size (names truncation) and sha256 of one artifact."""
    p = Path(bundle_dir) / spec.file
    if not p.is_file():
        raise BundleError(f"artifact {p} is missing")
    size = p.stat().st_size
    if size != spec.size_bytes:
        raise BundleError(f"artifact {p} is {size} bytes, manifest says {spec.size_bytes} (truncated or replaced)")
    digest = sha256_file(p)
    if digest != spec.sha256:
        raise BundleError(f"artifact {p} sha256 {digest[:16]}... does not match manifest {spec.sha256[:16]}... (corrupt or replaced)")
    return p


def check_version(manifest_versions: dict[str, str], dist: str, strict: bool = True) -> None:
    want, have = manifest_versions.get(dist), installed_version(dist)
    if strict and want != have:
        raise BundleError(f"bundle was exported with {dist} {want}, installed is {have}; re-export the bundle with this {dist}")


def load_bundle(bundle_dir: str | Path, backend: ArtifactFormat, check_versions: bool = True,
                manifest: BundleManifest | None = None) -> tuple[BundleManifest, dict[str, Path]]:
    """Validated manifest (read here unless the caller has read it) and the verified artifact path of each stage
    for `backend`."""
    bundle_dir = Path(bundle_dir)
    manifest = read_manifest(bundle_dir) if manifest is None else manifest
    check_version(manifest.versions, LIBRARY_OF[backend], strict=check_versions)
    paths: dict[str, Path] = {}
    for stage in STAGES:
        spec = manifest.stages[stage].artifacts.get(backend)
        if spec is None:
            raise BundleError(f"{bundle_dir}: stage {stage} has no {backend} artifact")
        paths[stage] = verify_artifact(bundle_dir, spec)
    verify_artifact(bundle_dir, manifest.instruction.table)
    return manifest, paths
