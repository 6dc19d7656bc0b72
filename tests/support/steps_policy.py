"""Steps: a toy policy whose k-th chunk is the constant k (every row and joint), so every jump at a chunk
boundary is exactly known."""
from __future__ import annotations

import numpy as np

from omni_vla.cameras import CameraInput

H, D = 6, 2


class Steps:
    """Chunk k (counted from 1) is k in every row and joint."""

    backend, horizon, action_dim, max_prefix, embedding_dim = "toy", H, D, 0, 1
    cameras = (CameraInput("front", 8, 8),)
    joint_names = ["a", "b"]

    def __init__(self) -> None:
        self.calls = 0

    def encode_instruction(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)

    def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:  # noqa: ANN001
        self.calls += 1
        out[:] = self.calls

    def close(self) -> None:
        pass
