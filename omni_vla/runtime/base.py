"""The one interface every policy backend implements, so the loop never knows which runs.

All arrays are caller-owned and preallocated: the runtime reads its inputs and writes
`out` in place, so a tick-rate caller allocates nothing.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np


class PolicyRuntime(Protocol):
    """A loaded, warmed policy bundle on one backend (executorch, mnn, torch, ...)."""

    backend: str
    horizon: int  # H: actions per chunk
    action_dim: int  # D: 8 for the Panda (7 joints + gripper opening)
    max_prefix: int  # largest d (pinned prefix length) the flow head accepts
    image_size: int  # policy input resolution (square)
    embedding_dim: int  # instruction embedding size

    def encode_instruction(self, text: str) -> np.ndarray:
        """float32 [embedding_dim]; called when the instruction changes, never per tick."""

    def infer(
        self,
        front: np.ndarray,  # float32 [1, 3, S, S], RGB in [0, 1]
        wrist: np.ndarray,  # float32 [1, 3, S, S], RGB in [0, 1]
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
