"""ToyRuntime: a small deterministic numpy PolicyRuntime whose output encodes its inputs (state, image mean,
prefix), so a test can tell exactly which observation and prefix a chunk came from; and `toy_factory`, the
factory a worker process imports by module name (this module must stay importable in a spawned child)."""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np

from omni_vla.cameras import CameraInput

H, D, S, E = 16, 8, 64, 16
STEP = 0.01


class ToyRuntime:
    """out[i] = state + (i + 1) * STEP * (1 + mean(front)); rows < prefix_len = prefix (pinned)."""

    backend = "toy"
    horizon = H
    action_dim = D
    max_prefix = 6
    cameras = (CameraInput("front", S, S), CameraInput("wrist", S, S))
    embedding_dim = E

    def __init__(self, latency_s: float = 0.0, mode: str = "ok", record: bool = False) -> None:
        self.latency_s = latency_s
        self.mode = mode
        self.record = record
        self.requests: list[tuple[np.ndarray, np.ndarray]] = []  # (pinned prefix rows, state) when recording
        self.calls = 0
        self.encoded: list[str] = []
        self.last_prefix_len = -1
        self._ramp = np.arange(1, H + 1, dtype=np.float32)[:, None] * np.ones((1, D), np.float32) * STEP

    def encode_instruction(self, text: str) -> np.ndarray:
        self.encoded.append(text)
        if text.startswith("unknown"):
            raise KeyError(f"instruction {text!r} is not in the table")
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        return np.random.default_rng(seed).standard_normal(E).astype(np.float32)

    def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:
        self.calls += 1
        self.last_prefix_len = prefix_len
        if self.mode == "hang" and self.calls > 2:  # after the two warm-up calls
            time.sleep(3600)
        if self.mode == "crash_on_infer" and self.calls > 2:  # after the two warm-up calls
            os._exit(3)
        if self.mode == "slowing" and self.calls > 2:  # answers after the warm-up: 2x, then 3.5x the warm chunk
            time.sleep(self.latency_s * (2.0 if self.calls == 3 else 3.5))
        elif self.latency_s:
            time.sleep(self.latency_s)
        if self.record:
            self.requests.append((prefix[0, :prefix_len].copy(), state[0].copy()))
        np.multiply(self._ramp, 1.0 + images["front"].mean(), out=out)
        out += state
        out[:prefix_len] = prefix[0, :prefix_len]

    def close(self) -> None:
        pass


def toy_factory(backend: str, bundle_dir: str, threads: int) -> ToyRuntime:
    """Worker-side factory; `bundle_dir` carries the toy's behaviour, e.g. "toy:latency=0.02"."""
    opts = dict(kv.split("=") for kv in bundle_dir.partition(":")[2].split(",") if kv)
    if opts.get("mode") == "fail_load":
        raise FileNotFoundError(f"no bundle at {bundle_dir}")
    return ToyRuntime(float(opts.get("latency", 0.0)), opts.get("mode", "ok"))
