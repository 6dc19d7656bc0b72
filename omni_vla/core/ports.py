"""What the core needs from the layers below it, as protocols: the core imports no client or runtime.

An inference client computes action chunks asynchronously for the controller: the controller writes
a request's inputs into the client's own preallocated arrays (`images` by camera name, `state`, `prefix`),
calls `submit`, and `poll`s once per tick; at most one request is in flight
(implementations: omni_vla.inference.client.SyncInference, omni_vla.inference.worker.ProcessInference).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from omni_vla.cameras import CameraInput


class ChunkResult:
    """The newest finished chunk; one instance per client, reused (no allocation per chunk)."""

    __slots__ = ("request_tick", "actions", "latency_s")

    def __init__(self, actions: np.ndarray) -> None:
        self.request_tick = 0
        self.actions = actions  # float32 [H, D], valid until the next submit
        self.latency_s = 0.0  # from the request's tick time to the result being ready


class InferenceClient(Protocol):
    """Asynchronous chunks for the controller; shapes come from the policy's bundle."""

    backend: str
    horizon: int
    action_dim: int
    max_prefix: int
    cameras: tuple[CameraInput, ...]  # the policy's cameras by name, at their input resolution
    embedding_dim: int
    joint_names: list[str]  # the policy's action order; empty when the runtime does not say
    images: dict[str, np.ndarray]  # per camera: float32 [1, 3, H, W]
    state: np.ndarray  # float32 [1, D]
    prefix: np.ndarray  # float32 [1, H, D]

    @property
    def busy(self) -> bool: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    def set_instruction(self, text: str) -> None: ...

    def submit(self, tick: int, prefix_len: int, now: float) -> None: ...

    def poll(self, tick: int, now: float) -> ChunkResult | None: ...

    def close(self) -> None: ...
