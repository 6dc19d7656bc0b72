"""What crosses between the re-planner's tick side and its network side: requests one way, events the other.

Light on purpose (no websockets, msgpack or cv2): the tick's process imports this module, never network.py.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import numpy as np

LOST = -1  # on_finished id: every request the network side held is gone (its process died)


@dataclass(slots=True)
class Request:
    request_id: int
    gen: int
    tick: int
    obs_time: float  # caller's clock
    wall: float  # time.perf_counter() at hand-off (CLOCK_MONOTONIC: comparable across processes)
    reason: str
    payload: dict | None


class Sink(Protocol):
    """What the network side reports; implemented by the Replanner's tick side."""

    def on_connected(self, metadata: dict) -> None: ...
    def on_disconnected(self) -> None: ...
    def on_sent(self, request_id: int) -> None: ...
    def on_result(self, request: Request, actions: np.ndarray, latency_s: float, timing: dict) -> None: ...
    def on_finished(self, request_id: int, still_pending: bool = False) -> None: ...
    def on_event(self, counter: str, message: str = "", level: int = logging.WARNING, rejection: bool = False) -> None: ...
