"""The tick's own copy of the newest observation, so the store's lock is not held across the controller's step.

The step converts images and hands them to the worker when it requests a chunk (milliseconds); holding
the store's lock meanwhile would make every subscriber callback wait for it. Here the lock is
held only for the copies, into buffers reused across ticks; a camera frame is copied only when its
capture time changed (a frame rate below the tick rate costs no copy on the ticks in between).
"""
from __future__ import annotations

from typing import Any

import numpy as np


class ObservationSnapshot:
    """`take(store)`: the store's `obs` (same keys), copied under its lock."""

    def __init__(self) -> None:
        self.obs: dict[str, Any] = {}
        self._stamps: dict[str, float | None] = {}
        self._copied: dict[str, float | None] = {}  # per camera: the capture time of the frame in its buffer
        self.frame_copies = 0

    def take(self, store: Any) -> dict[str, Any]:
        obs, stamps = self.obs, store.stamps
        with store.lock:
            for key, value in store.obs.items():
                if key == "stamps":
                    self._stamps.update(value)
                    obs[key] = self._stamps
                elif isinstance(value, np.ndarray):
                    self._copy(key, value, stamps.get(key), key in stamps)
                else:
                    obs[key] = value
        return obs

    def _copy(self, key: str, value: np.ndarray, stamp: float | None, is_frame: bool) -> None:
        buf = self.obs.get(key)
        if not isinstance(buf, np.ndarray) or buf.shape != value.shape or buf.dtype != value.dtype:
            buf = self.obs[key] = np.empty_like(value)  # first frame or a resolution change only
        elif is_frame and self._copied.get(key) == stamp:
            return
        np.copyto(buf, value)
        if is_frame:
            self._copied[key] = stamp
            self.frame_copies += 1
