"""Every backend name and bundle kind, owned here: the settings' and manifests' Literals, the tools' choices and
the runtime's loader table (runtime/registry.py) are read from this module, so a backend is added in one place.

It sits in the bottom layer because core (the node's settings) and runtime (the manifests) both name backends and
never import each other. Names only: what loads each backend is runtime/registry.py's.
"""
from __future__ import annotations

from typing import Literal, get_args

RobotBackend = Literal["executorch", "mnn"]
"""What vla_node runs: programs exported into a bundle, loaded without torch (ExecuTorch's own runtime aside)."""
EagerBackend = Literal["torch"]
"""Eager PyTorch on the bundle's checkpoint, the parity reference: omni_vla_policies registers it (setup.py entry
point), never loaded on the robot."""
LoopBackend = Literal[EagerBackend, RobotBackend]
"""What open_runtime loads behind the loop: eager first, as the reference the others are compared with."""
HostBackend = Literal[EagerBackend, "torch-folded", "onnxruntime"]
"""Off the robot only, for parity and benchmarks: eager PyTorch (the reference flow policy's folded form too) and
onnxruntime on the ONNX artifacts."""
ArtifactFormat = Literal["onnx", "executorch", "mnn"]
"""What a manifest may list per stage, in export order (the MNN program is converted from the ONNX file)."""
BundleKind = Literal["flow", "chunk", "vla"]
"""What a bundle holds (docs/bundle_format.md): the format-2 reference flow policy, or a format-3 single-pass chunk
predictor or a staged VLA."""

ROBOT_BACKENDS: tuple[str, ...] = get_args(RobotBackend)
LOOP_BACKENDS: tuple[str, ...] = get_args(LoopBackend)
ARTIFACT_FORMATS: tuple[str, ...] = get_args(ArtifactFormat)
BUNDLE_KINDS: tuple[str, ...] = get_args(BundleKind)
EAGER: str = get_args(EagerBackend)[0]
ALL_BACKENDS: tuple[str, ...] = (*get_args(HostBackend), *ROBOT_BACKENDS)
"""Every backend, eager first: the benchmarks' default order (each result is read against eager)."""
PROGRAM_BACKENDS: tuple[str, ...] = tuple(b for b in ALL_BACKENDS if b != "torch-folded")
"""What one exported program is compared on: eager, onnxruntime and the robot's."""
ARTIFACT_OF: dict[str, str] = {"onnxruntime": "onnx", **{b: b for b in ROBOT_BACKENDS}}
"""The manifest artifact each non-eager backend runs."""
SUFFIX_OF: dict[str, str] = {"onnx": "onnx", "executorch": "pte", "mnn": "mnn"}
"""The file suffix of each artifact format."""
LIBRARY_OF: dict[str, str] = {f: f for f in ARTIFACT_FORMATS}
"""The distribution whose version must equal the one that wrote each artifact format."""
BACKEND_ENTRY_POINTS = "omni_vla.backends"
"""Entry-point group where a backend outside the robot runtime registers its PolicyRuntime class (setup.py: eager
PyTorch, from omni_vla_policies), so the runtime names no module above it."""
