"""Bundle kinds and the backends that load them: the one table every manifest reader and `open_runtime` dispatch on.

A bundle's kind is read once, here, from its manifest.json (`read_any_manifest`); the caller gets the validated
manifest of that kind and hands it to the runtime, which does not read the file again. The robot backends' modules
are named here and imported only when asked for (ExecuTorch's imports torch, MNN's prints at import); a backend
outside the robot runtime (eager PyTorch, in omni_vla_policies) registers itself as an entry point instead, so
nothing here names a module above this layer.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Callable, Union

from pydantic import BaseModel

from omni_vla.backends import BACKEND_ENTRY_POINTS, LOOP_BACKENDS, ROBOT_BACKENDS, BundleKind
from omni_vla.runtime.base import PolicyRuntime
from omni_vla.runtime.bundle import BUNDLE_FORMAT, MANIFEST_NAME, BundleError, BundleManifest, read_json, validate_json
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT, ChunkManifest
from omni_vla.runtime.vla_manifest import VLAManifest

AnyManifest = Union[BundleManifest, ChunkManifest, VLAManifest]
"""Every kind's manifest names its `kind`, `policy`, `joint_names`, `cameras` and `control_rate_hz`."""


@dataclass(frozen=True)
class KindSpec:
    format: str
    manifest: type[BaseModel]
    declares_kind: bool  # format 3 states its kind in the manifest; format 2 has one kind and no such field


KINDS: dict[str, KindSpec] = {  # keys: omni_vla.backends.BUNDLE_KINDS (a test says so)
    "flow": KindSpec(BUNDLE_FORMAT, BundleManifest, declares_kind=False),
    "chunk": KindSpec(CHUNK_FORMAT, ChunkManifest, declares_kind=True),
    "vla": KindSpec(CHUNK_FORMAT, VLAManifest, declares_kind=True),
}


@dataclass(frozen=True)
class RobotBackendSpec:
    module: str  # imported by name when asked for: load_program, load_chunk_program and the flow runtime class
    flow_runtime: str  # its PolicyRuntime class for a kind-"flow" bundle
    library: str  # its top-level third-party module (MNN is imported only when a program loads: looked for here)
    install: str  # what puts its libraries on a robot that lacks them (setup.py's extra of the same name)


ROBOT_RUNTIMES: dict[str, RobotBackendSpec] = {  # keys: omni_vla.backends.ROBOT_BACKENDS (a test says so)
    "executorch": RobotBackendSpec("omni_vla.runtime.executorch", "ExecuTorchRuntime", "executorch",
                                   "pip install 'omni_vla[executorch]'"),
    "mnn": RobotBackendSpec("omni_vla.runtime.mnn", "MNNRuntime", "MNN", "pip install omni_vla (mnn is a dependency)"),
}


class BackendUnavailable(BundleError):
    """A robot backend whose libraries are not installed: refused in one line naming what installs them."""


def kind_of(raw: object) -> BundleKind | None:
    """The kind a parsed manifest declares, None for a format or kind this runtime does not read."""
    if not isinstance(raw, dict):
        return None
    for name, spec in KINDS.items():
        if raw.get("format") == spec.format and raw.get("kind") == (name if spec.declares_kind else None):
            return name  # type: ignore[return-value]
    return None


def sniff_kind(bundle_dir: str | Path) -> BundleKind | None:
    """The kind `bundle_dir`'s manifest declares, without validating the rest (None when unreadable)."""
    try:
        raw = json.loads((Path(bundle_dir) / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return kind_of(raw)


def read_any_manifest(bundle_dir: str | Path) -> AnyManifest:
    """The validated manifest of a bundle of any kind, read once; an unknown format or kind is refused in one line."""
    path = Path(bundle_dir) / MANIFEST_NAME
    raw = read_json(path)
    kind = kind_of(raw)
    if kind is None:
        got = (raw.get("format"), raw.get("kind")) if isinstance(raw, dict) else (None, None)
        known = ", ".join(f"{s.format!r} kind {k!r}" for k, s in KINDS.items())
        raise BundleError(f"{path}: format {got[0]!r} kind {got[1]!r}, this runtime reads {known}; re-export the bundle")
    spec = KINDS[kind]
    return validate_json(path, raw, spec.manifest, spec.format)  # type: ignore[return-value]


def openvino_delegated(manifest: AnyManifest) -> bool:
    """Whether a program of the bundle runs on ExecuTorch's OpenVINO delegate, which is configured once per process
    (runtime/openvino.py): a second thread count needs a process of its own."""
    return any(a.delegate == "openvino" for stage in manifest.stages.values() for a in stage.artifacts.values())


def runnable_backends(bundle_dir: str | Path) -> tuple[str, ...]:
    """The loop backends `bundle_dir` runs on: eager PyTorch only for the reference flow kind (it reruns that
    policy's checkpoint), the robot backends whose programs every stage of a format-3 bundle lists."""
    manifest = read_any_manifest(bundle_dir)
    if manifest.kind == "flow":
        return LOOP_BACKENDS
    return tuple(b for b in ROBOT_BACKENDS
                 if all(b in stage.artifacts for stage in manifest.stages.values()))  # type: ignore[union-attr]


def robot_module(backend: str) -> ModuleType:
    """A robot backend's module, imported now (ExecuTorch's imports torch: only when it is asked for)."""
    spec = ROBOT_RUNTIMES.get(backend)
    if spec is None:
        raise ValueError(f"unknown robot backend {backend!r}; expected one of {list(ROBOT_RUNTIMES)}")
    try:
        if importlib.util.find_spec(spec.library) is None:
            raise ModuleNotFoundError(name=spec.library)
        return importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] in ("omni_vla", "omni_vla_safety"):
            raise  # the project's own module missing: a broken install, not a backend to install
        raise BackendUnavailable(f"backend {backend!r} is not installed here (no module {exc.name}): "
                                 f"{spec.install}") from None


def flow_runtime(backend: str) -> Callable[..., PolicyRuntime]:
    """The PolicyRuntime class of a kind-"flow" bundle on `backend`: a robot backend's own, else a registered one."""
    spec = ROBOT_RUNTIMES.get(backend)
    if spec is None:
        return registered_runtime(backend)
    return getattr(robot_module(backend), spec.flow_runtime)


def registered_backends() -> dict[str, metadata.EntryPoint]:
    """Backends registered outside the robot runtime (setup.py's `omni_vla.backends` entry points)."""
    return {ep.name: ep for ep in metadata.entry_points(group=BACKEND_ENTRY_POINTS)}


def backend_names() -> tuple[str, ...]:
    """Every backend open_runtime can load here: the robot's, then the registered ones."""
    return (*ROBOT_BACKENDS, *sorted(set(registered_backends()) - set(ROBOT_BACKENDS)))


def registered_runtime(backend: str) -> Callable[..., PolicyRuntime]:
    """The PolicyRuntime class a registered backend exports: called as cls(bundle_dir, num_threads=n)."""
    found = registered_backends().get(backend)
    if found is None:
        raise ValueError(f"unknown backend {backend!r}; expected one of {list(backend_names())}")
    return found.load()
