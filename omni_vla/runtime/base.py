"""The one interface every policy backend implements, so the loop never knows which runs, and the
backend-independent part of the bundle runtimes (BundleRuntimeBase).

All arrays are caller-owned and preallocated: the runtime reads its inputs and writes
`out` in place, so a tick-rate caller allocates nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Protocol

import numpy as np

from omni_vla.cameras import CameraInput
from omni_vla.runtime.bundle import BundleManifest
from omni_vla.runtime.text import InstructionEncoder, TextEncoderFn


class PolicyRuntime(Protocol):
    """A loaded, warmed policy bundle on one backend (executorch, mnn, torch, ...)."""

    backend: str
    horizon: int  # H: actions per chunk
    action_dim: int  # D: 8 for the Panda (7 joints + gripper opening)
    max_prefix: int  # largest d (pinned prefix length) the flow head accepts
    cameras: tuple[CameraInput, ...]  # the images infer() reads, by name, at their input resolution
    embedding_dim: int  # instruction embedding size

    def encode_instruction(self, text: str) -> np.ndarray:
        """float32 [embedding_dim]; called when the instruction changes, never per tick."""

    def infer(
        self,
        images: Mapping[str, np.ndarray],  # per camera name: float32 [1, 3, H, W], RGB in [0, 1]
        state: np.ndarray,  # float32 [1, D], raw joint positions (normalised inside)
        instruction: np.ndarray,  # float32 [1, embedding_dim]
        prefix: np.ndarray,  # float32 [1, H, D], raw committed actions; rows >= prefix_len ignored
        prefix_len: int,  # 0..max_prefix actions pinned (real-time chunking)
        noise: np.ndarray,  # float32 [1, H, D], initial flow-matching noise
        out: np.ndarray,  # float32 [H, D], raw joint-position targets, written in place
    ) -> None:
        """One full inference: perception + backbone + N-step flow head."""

    def close(self) -> None:
        """Release runtime resources."""


def check_array(name: str, arr: object, shape: tuple[int, ...], dtype: str = "float32") -> None:
    """Clear error for a wrong input at infer entry (before any runtime call)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{name}: expected numpy.ndarray {dtype}{list(shape)}, got {type(arr).__name__}")
    if arr.dtype != np.dtype(dtype) or arr.shape != shape:
        raise ValueError(f"{name}: expected {dtype}{list(shape)}, got {arr.dtype}{list(arr.shape)}")


class BundleRuntimeBase:
    """Shared, backend-independent part of a PolicyRuntime: metadata, input checks, prefix mask, text."""

    backend: str
    # (text-encoder artifact, num_threads) -> encoder(ids, mask); None: the backend runs no text encoder
    make_text_encoder: Callable[[Path, int], TextEncoderFn] | None = None

    def _init_common(self, bundle_dir: Path, manifest: BundleManifest, num_threads: int) -> None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.bundle_dir = bundle_dir
        self.manifest = manifest
        self.num_threads = num_threads
        self.horizon = manifest.horizon
        self.action_dim = manifest.action_dim
        self.max_prefix = manifest.max_prefix
        self.image_size = manifest.image_size
        self.cameras = manifest.cameras
        self.embedding_dim = manifest.embedding_dim
        self.joint_names = list(manifest.joint_names)
        self.control_rate_hz = manifest.control_rate_hz
        self.execute_steps = manifest.execute_steps
        self.num_steps = manifest.num_steps
        s, d, h, e = self.image_size, self.action_dim, self.horizon, self.embedding_dim
        self._shapes = {
            "front": (1, 3, s, s), "wrist": (1, 3, s, s), "state": (1, d), "instruction": (1, e),
            "prefix": (1, h, d), "noise": (1, h, d),
        }
        self._mask = np.zeros((1, h, 1), np.float32)
        self._text = InstructionEncoder(bundle_dir, manifest, backend=self.backend, num_threads=num_threads,
                                        make_encoder=type(self).make_text_encoder)

    def _check_inputs(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
                      prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, ...]:
        """Check every input; the camera images in the graph's order (front, wrist)."""
        cams = tuple(images.get(c.name) for c in self.cameras)
        for name, arr in (("front", cams[0]), ("wrist", cams[1]), ("state", state), ("instruction", instruction),
                          ("prefix", prefix), ("noise", noise)):
            check_array(name, arr, self._shapes[name])
        check_array("out", out, (self.horizon, self.action_dim))
        if not isinstance(prefix_len, (int, np.integer)) or not 0 <= int(prefix_len) <= self.max_prefix:
            raise ValueError(f"prefix_len must be an int in 0..{self.max_prefix}, got {prefix_len!r}")
        return cams

    def _set_mask(self, prefix_len: int) -> np.ndarray:
        self._mask.fill(0.0)
        self._mask[0, : int(prefix_len), 0] = 1.0
        return self._mask

    def encode_instruction(self, text: str) -> np.ndarray:
        """float32 [embedding_dim]: bundle table first, then the text-encoder artifact if installed."""
        return self._text.encode(text)
