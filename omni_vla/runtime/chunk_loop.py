"""A kind-"chunk" bundle behind the loop's PolicyRuntime interface, so the node, the evaluation suite and the
benchmarks run an imported policy by changing only `bundle_dir`.

The loop feeds the bundle's cameras by name, at their own resolutions (any number). A chunk predictor takes no
flow noise and pins no prefix (max_prefix 0: the chunk strategies still splice, without inpainting). Its
"instruction embedding" is the bundle's conditioning vector for the text, or one zero for a policy that ignores
language.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from omni_vla.cameras import CameraInput, check_camera_name
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.chunk import ChunkRuntime
from omni_vla.runtime.registry import sniff_kind

__all__ = ["ChunkLoopRuntime", "is_chunk_bundle"]


class ChunkLoopRuntime:
    """PolicyRuntime over a ChunkRuntime (see runtime/base.py for the interface)."""

    max_prefix = 0

    def __init__(self, runtime: ChunkRuntime) -> None:
        m = runtime.manifest
        try:
            self.cameras = tuple(CameraInput(check_camera_name(c.name), c.height, c.width) for c in m.cameras)
        except ValueError as exc:
            raise BundleError(f"{runtime.bundle_dir}: {exc}") from None
        self.runtime = runtime
        self.backend = runtime.backend
        self.horizon, self.action_dim = runtime.chunk_length, runtime.action_dim
        self.embedding_dim = max(runtime.condition_dim, 1)
        self.joint_names = runtime.joint_names
        self.control_rate_hz = runtime.control_rate_hz
        self.execute_steps = m.action.execute_steps
        self._delta = m.action.space == "delta"

    def encode_instruction(self, text: str) -> np.ndarray:
        if not self.runtime.condition_dim:
            return np.zeros(1, np.float32)
        return self.runtime.condition_for(text)

    def infer(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
              prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> None:
        """prefix and noise are ignored (a chunk predictor neither inpaints nor samples)."""
        if prefix_len != 0:
            raise ValueError(f"prefix_len {prefix_len}: this policy pins no prefix (max_prefix 0)")
        self.runtime.infer(images, state, out, instruction if self.runtime.condition_dim else None)
        if self._delta:
            out += state

    def close(self) -> None:
        self.runtime.close()


def is_chunk_bundle(bundle_dir: str | Path) -> bool:
    """Whether `bundle_dir`'s manifest declares format 3 kind chunk (read without validating the rest)."""
    return sniff_kind(bundle_dir) == "chunk"
