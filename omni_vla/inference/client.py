"""How the controller gets action chunks: the client interface, and the in-process synchronous client.

The controller writes a request's inputs into the client's own preallocated arrays (`images` by
camera name, `state`, `prefix`), calls `submit`, and `poll`s once per tick. At most one request is in
flight. Two clients implement this:

- SyncInference (here): runs the runtime in the caller's thread at submit time and releases the
  result `delay_ticks` ticks later, so a run in simulated time does not depend on machine speed.
- ProcessInference (worker.py): the runtime lives in a spawned process behind shared memory, because
  ExecuTorch's execute holds the GIL for the whole call (measured on the 2-core development machine: a 1 kHz ticker thread saw
  1.37 s p50 lateness next to it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.cameras import CameraInput
from omni_vla.core.ports import ChunkResult, InferenceClient
from omni_vla.runtime.base import PolicyRuntime
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.chunk import ChunkRuntime
from omni_vla.runtime.chunk_loop import ChunkLoopRuntime
from omni_vla.runtime.chunk_manifest import ChunkManifest
from omni_vla.runtime.registry import (AnyManifest, flow_runtime, read_any_manifest, registered_runtime,
                                       robot_module, sniff_kind)
from omni_vla.runtime.vla import StagedVLARuntime

__all__ = ["ChunkResult", "InferenceClient", "RuntimeInputs", "SyncInference", "open_runtime"]

RuntimeFactory = Callable[[str, str, int], PolicyRuntime]
"""(backend, bundle_dir, threads) -> a loaded, warmed runtime. Must be a module-level function (it is
pickled by reference into the worker process)."""


def open_runtime(backend: str, bundle_dir: str, threads: int) -> PolicyRuntime:
    """Load and warm a bundle on `backend`. A robot backend reads the manifest once and opens the runtime of its kind;
    any other (eager PyTorch) is a registered entry point, so the robot path never imports it."""
    if backend not in ROBOT_BACKENDS:
        kind = sniff_kind(bundle_dir)
        if kind not in (None, "flow"):
            raise BundleError(f"{bundle_dir}: a {kind} bundle runs on {' or '.join(ROBOT_BACKENDS)}; backend "
                              f"{backend!r} reruns only the reference policy's checkpoint")
        return registered_runtime(backend)(Path(bundle_dir), num_threads=threads)
    manifest = read_any_manifest(bundle_dir)
    return _OPEN[manifest.kind](backend, Path(bundle_dir), threads, manifest)


def open_chunk_runtime(backend: str, bundle_dir: str | Path, threads: int = 1,
                       manifest: ChunkManifest | None = None) -> ChunkRuntime:
    """Load and warm a kind-"chunk" bundle (format 3) on a robot backend (its module imported now: torch for
    ExecuTorch)."""
    load = robot_module(backend).load_chunk_program
    return ChunkRuntime(Path(bundle_dir), backend, load, num_threads=threads, manifest=manifest)


def _open_flow(backend: str, bundle_dir: Path, threads: int, manifest: AnyManifest) -> PolicyRuntime:
    return flow_runtime(backend)(bundle_dir, num_threads=threads, manifest=manifest)


def _open_chunk(backend: str, bundle_dir: Path, threads: int, manifest: AnyManifest) -> PolicyRuntime:
    return ChunkLoopRuntime(open_chunk_runtime(backend, bundle_dir, threads, manifest))  # type: ignore[arg-type]


def _open_vla(backend: str, bundle_dir: Path, threads: int, manifest: AnyManifest) -> PolicyRuntime:
    load = robot_module(backend).load_program
    return StagedVLARuntime(bundle_dir, backend, load, num_threads=threads, manifest=manifest)  # type: ignore[arg-type]


# How each bundle kind (omni_vla.backends.BUNDLE_KINDS) is opened on a robot backend.
_OPEN: dict[str, Callable[[str, Path, int, AnyManifest], PolicyRuntime]] = {
    "flow": _open_flow, "chunk": _open_chunk, "vla": _open_vla,
}


def instruction_error(text: str, exc: BaseException) -> str:
    detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
    return f"cannot use instruction {text!r}: {detail}"


# What a client (or a wrapper) takes over from its runtime: the shapes of every request.
RUNTIME_SHAPE = ("backend", "horizon", "action_dim", "max_prefix", "cameras", "embedding_dim")
# What a runtime may say about how it is meant to run (None when it does not: the loop's settings must).
RUNTIME_HINTS = ("control_rate_hz", "execute_steps")


def runtime_shape(rt: PolicyRuntime) -> dict[str, object]:
    """The runtime's shapes as plain data (picklable: the worker sends them to the loop process)."""
    shape: dict[str, object] = {name: getattr(rt, name) for name in RUNTIME_SHAPE}
    shape["cameras"] = tuple(CameraInput(*c) for c in rt.cameras)
    shape.update({name: getattr(rt, name, None) for name in RUNTIME_HINTS})
    shape["joint_names"] = list(getattr(rt, "joint_names", None) or [])
    return shape


def copy_runtime_shape(dst: object, rt: PolicyRuntime) -> None:
    for name, value in runtime_shape(rt).items():
        setattr(dst, name, value)


def camera_buffers(cameras: tuple[CameraInput, ...]) -> dict[str, np.ndarray]:
    """One preallocated float32 [1, 3, H, W] input per camera, by name."""
    return {c.name: np.zeros((1, 3, c.height, c.width), np.float32) for c in cameras}


def checked_noise_scale(scale: float) -> float:
    if not 0.0 <= scale <= 1.0:
        raise ValueError(f"noise_scale must be in [0, 1], got {scale}")
    return float(scale)


def draw_noise(rng: np.random.Generator, out: np.ndarray, scale: float) -> None:
    """The flow's initial noise into `out`, N(0, scale^2), without allocating.

    Why a scale: sampling at a lower temperature trades diversity for the policy's most likely chunk
    (0: deterministic), which closed-loop success in simulation favoured (results/)."""
    if scale == 0.0:
        out.fill(0.0)
        return
    rng.standard_normal(dtype=np.float32, out=out)
    if scale != 1.0:
        out *= np.float32(scale)


class RuntimeInputs:
    """One request's inputs, preallocated in the shapes of a runtime's graphs (float32, batch 1)."""

    def __init__(self, runtime: PolicyRuntime, seed: int = 0, noise_scale: float = 1.0) -> None:
        self.runtime = runtime
        self.noise_scale = checked_noise_scale(noise_scale)
        copy_runtime_shape(self, runtime)
        h, d = self.horizon, self.action_dim
        self.images = camera_buffers(self.cameras)
        self.state = np.zeros((1, d), np.float32)
        self.prefix = np.zeros((1, h, d), np.float32)
        self.noise = np.zeros((1, h, d), np.float32)
        self.instruction = np.zeros((1, self.embedding_dim), np.float32)
        self._rng = np.random.default_rng(seed)

    def run(self, prefix_len: int, out: np.ndarray) -> None:
        """Fresh noise (scaled in place), then one full inference into `out` [H, D]."""
        draw_noise(self._rng, self.noise, self.noise_scale)
        self.runtime.infer(self.images, self.state, self.instruction, self.prefix, prefix_len, self.noise, out)


class SyncInference(RuntimeInputs):
    """Runs inference in the calling thread; the chunk for tick t is released at tick t + delay_ticks."""

    def __init__(self, runtime: PolicyRuntime, delay_ticks: int = 0, period_s: float = 0.05, seed: int = 0,
                 noise_scale: float = 1.0) -> None:
        if delay_ticks < 0:
            raise ValueError(f"delay_ticks must be >= 0, got {delay_ticks}")
        super().__init__(runtime, seed, noise_scale)
        h, d = self.horizon, self.action_dim
        self.delay_ticks = delay_ticks
        self.period_s = period_s
        self._result = ChunkResult(np.zeros((h, d), np.float32))
        self._busy = False
        self._ready_tick = 0
        self._instruction_error = ""

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def healthy(self) -> bool:
        return not self._instruction_error

    @property
    def reason(self) -> str:
        return self._instruction_error

    def set_instruction(self, text: str) -> None:
        try:
            self.instruction[0] = self.runtime.encode_instruction(text)
            self._instruction_error = ""
        except Exception as exc:  # e.g. not in the bundle's table: hold until a usable instruction
            self._instruction_error = instruction_error(text, exc)

    def submit(self, tick: int, prefix_len: int, now: float) -> None:
        if self._busy:
            raise RuntimeError("a request is already in flight")
        self.run(prefix_len, self._result.actions)
        self._result.request_tick = tick
        self._result.latency_s = self.delay_ticks * self.period_s
        self._ready_tick = tick + self.delay_ticks
        self._busy = True

    def poll(self, tick: int, now: float) -> ChunkResult | None:
        if self._busy and tick >= self._ready_tick:
            self._busy = False
            return self._result
        return None

    def close(self) -> None:
        self.runtime.close()
