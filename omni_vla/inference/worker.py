"""Inference in a spawned process, behind shared memory, supervised with restart and backoff.

Why a process: ExecuTorch's Python execute holds the GIL for the whole call, and MNN delayed a
1 kHz ticker thread by 5.5 ms p99 (measured on the 2-core development machine); a spawned child left the parent's tick at
~0.02 ms p99. The runtime is created inside the child from (backend, bundle_dir, threads), so torch
is never imported by the loop process.

Protocol: the parent creates one shared-memory block (header + inputs + output) once the child has
reported the runtime's shapes, and reuses it across restarts. A request is the inputs written into
shared memory plus one byte on a pipe; the child writes the output, then the header's RESP_SEQ,
then sends one byte back. The parent sees RESP_SEQ change without a syscall and then reads that
byte, which also orders its reads after the child's writes. Instructions go down the same pipe,
so the child applies them before any later request.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from multiprocessing import BufferTooShort
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Iterator

import numpy as np

from omni_vla.cameras import CameraInput
from omni_vla.core.cpu_list import format_cpu_list, parse_cpu_list
from omni_vla.core.settings import WorkerSettings
from omni_vla.errors import one_line
from omni_vla.inference.client import (
    ChunkResult, RuntimeFactory, checked_noise_scale, draw_noise, instruction_error, open_runtime, runtime_shape,
)
from omni_vla.runtime.bundle import BundleError

REQ_SEQ, REQ_TICK, PREFIX_LEN, RESP_SEQ, DONE_NS, INFER_NS = range(6)
HEADER_LEN = 8
_ALIGN = 64


class SharedLayout:
    """Byte layout of the shared block; parent and child build identical views from the shapes."""

    def __init__(self, horizon: int, action_dim: int, cameras: tuple[CameraInput, ...], embedding_dim: int) -> None:
        h, d, e = horizon, action_dim, embedding_dim
        self.cameras = tuple(c.name for c in cameras)
        self.fields: list[tuple[str, type, tuple[int, ...]]] = [
            ("header", np.int64, (HEADER_LEN,)),
            *((f"image:{c.name}", np.float32, (1, 3, c.height, c.width)) for c in cameras),
            ("state", np.float32, (1, d)),
            ("prefix", np.float32, (1, h, d)),
            ("instruction", np.float32, (1, e)),
            ("out", np.float32, (h, d)),
        ]
        self.offsets: list[int] = []
        off = 0
        for _, dtype, shape in self.fields:
            self.offsets.append(off)
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            off += -(-nbytes // _ALIGN) * _ALIGN
        self.size = off

    @classmethod
    def of(cls, shape: dict[str, Any]) -> "SharedLayout":
        return cls(shape["horizon"], shape["action_dim"], shape["cameras"], shape["embedding_dim"])

    def views(self, buf: memoryview) -> dict[str, np.ndarray]:
        return {
            name: np.ndarray(shape, dtype=dtype, buffer=buf, offset=off)
            for (name, dtype, shape), off in zip(self.fields, self.offsets)
        }

    def images(self, views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The camera inputs of `views`, by camera name."""
        return {name: views[f"image:{name}"] for name in self.cameras}


def checked_cpus(cpus: frozenset[int]) -> frozenset[int]:
    """`cpus` when this process may run on all of them (empty: no placement); ValueError otherwise."""
    allowed = os.sched_getaffinity(0)
    if cpus - allowed:
        raise ValueError(f"worker_cpus names CPU(s) {format_cpu_list(cpus - allowed)} this process may not use; "
                         f"expected a subset of {format_cpu_list(allowed)}")
    return cpus


def place_worker(cpus: frozenset[int], nice: int) -> None:
    """Pin every thread of this process to `cpus` and lower its priority by `nice`. Linux applies both
    per thread, and imports (numpy's BLAS pool) made threads before this runs; the runtime's threads
    come later and inherit them."""
    for tid in (int(t) for t in os.listdir("/proc/self/task")):
        if cpus:
            os.sched_setaffinity(tid, cpus)
        if nice:
            os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + nice, 19))


@contextlib.contextmanager
def _main_module_hidden(factory: RuntimeFactory) -> Iterator[None]:
    """A spawned child first re-runs the parent's __main__ (vla_node's, with rclpy and cv2: measured 0.5 s
    of a cold start and 100 mapped ROS libraries in the worker); hide it while the child is started,
    unless the factory lives there."""
    main = sys.modules["__main__"]
    if getattr(factory, "__module__", None) == "__main__":
        yield
        return
    saved = {k: main.__dict__.pop(k) for k in ("__spec__", "__file__") if k in main.__dict__}
    main.__spec__ = None
    try:
        yield
    finally:
        del main.__spec__
        main.__dict__.update(saved)


def _child_main(
    factory: RuntimeFactory, backend: str, bundle_dir: str, threads: int,
    req: Connection, resp: Connection, seed: int, noise_scale: float = 1.0,
    cpus: frozenset[int] = frozenset(), nice: int = 0,
) -> None:
    """Worker process: load the runtime, attach the shared block, serve requests until told to quit (or the parent
    is gone), then exit at once: with the interpreter's teardown of the runtime's modules, vla_node's stop waited
    0.35-0.6 s for the worker to end on the 2-core machine under load."""
    # The parent decides when the worker stops: a Ctrl-C or a systemd stop reaches the whole process group, and
    # the parent, stopping on it, sends "q"; a dead parent reads as EOF.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    _serve(factory, backend, bundle_dir, threads, req, resp, seed, noise_scale, cpus, nice)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def _load_failure(exc: Exception) -> tuple[str, str]:
    """A bundle the runtime refuses (missing, corrupt, wrong shape, its backend not installed) is a "refused" line
    for the operator; anything else is an "error" of a runtime and keeps a short traceback."""
    if isinstance(exc, (BundleError, ValueError, OSError, KeyError)):
        return "refused", f"{type(exc).__name__}: {one_line(str(exc))}"
    return "error", traceback.format_exc(limit=4)


def _serve(
    factory: RuntimeFactory, backend: str, bundle_dir: str, threads: int,
    req: Connection, resp: Connection, seed: int, noise_scale: float, cpus: frozenset[int], nice: int,
) -> None:
    try:
        place_worker(cpus, nice)
        runtime = factory(backend, bundle_dir, threads)
    except Exception as exc:  # noqa: BLE001 - the parent reports why in its configure line
        resp.send(_load_failure(exc))
        raise SystemExit(1)
    shape = runtime_shape(runtime)
    resp.send(("meta", shape))
    _, name = req.recv()
    shm = SharedMemory(name=name)
    layout = SharedLayout.of(shape)
    v = layout.views(shm.buf)
    images = layout.images(v)
    hdr = v["header"]
    noise = np.zeros((1, shape["horizon"], shape["action_dim"]), np.float32)
    rng = np.random.default_rng(seed)
    scratch = np.zeros_like(v["out"])
    try:
        for _ in range(2):  # warm-up on zeros, into a scratch output (the parent may read `out`)
            t = time.perf_counter()
            runtime.infer(images, v["state"], v["instruction"], v["prefix"], 0, noise, scratch)
            warm_s = time.perf_counter() - t
    except Exception as exc:  # noqa: BLE001 - a program that loads but cannot run is refused the same way
        resp.send(_load_failure(exc))
        raise SystemExit(1)
    resp.send(("ready", warm_s))  # the second (warm) inference's seconds: what a chunk takes on this machine
    bad_instruction = b""
    try:
        while True:
            try:
                msg = req.recv_bytes()
            except EOFError:
                return  # parent gone
            kind = msg[:1]
            if kind == b"r" and bad_instruction:
                hdr[RESP_SEQ] = hdr[REQ_SEQ]
                resp.send_bytes(bad_instruction)
            elif kind == b"r":
                draw_noise(rng, noise, noise_scale)
                t = time.perf_counter_ns()
                runtime.infer(images, v["state"], v["instruction"], v["prefix"], int(hdr[PREFIX_LEN]), noise, v["out"])
                done = time.perf_counter_ns()
                hdr[INFER_NS] = done - t
                hdr[DONE_NS] = done
                hdr[RESP_SEQ] = hdr[REQ_SEQ]
                resp.send_bytes(b"d")
            elif kind == b"i":
                text = msg[1:].decode("utf-8")
                try:
                    v["instruction"][0] = runtime.encode_instruction(text)
                    bad_instruction = b""
                except Exception as exc:  # reported with the next request's answer; the worker lives on
                    bad_instruction = b"e" + instruction_error(text, exc).encode("utf-8")
            elif kind == b"q":
                return
    finally:
        runtime.close()
        del v, hdr, images
        shm.close()


HUNG_AFTER_WARM_CHUNKS = 3.0
"""A request is hung after max(timeout_s, this many times the warm-up chunk's seconds, twice the slowest answer
since), capped at max(timeout_s, startup_timeout_s): a policy that takes seconds per chunk on this machine (a
full-size VLA) is not killed as hung at every request, and a hang is still caught within a bounded time."""
HUNG_AFTER_SLOWEST = 2.0


class ProcessInference:
    """InferenceClient whose runtime runs in a child process; restarts it with exponential backoff. The start-up
    budget applies to the load and again to the warm-up (a large bundle takes both long)."""

    def __init__(
        self, backend: str, bundle_dir: str, threads: int = 1, factory: RuntimeFactory = open_runtime,
        timeout_s: float = 1.0, startup_timeout_s: float = 60.0, backoff_s: float = 0.5,
        backoff_max_s: float = 10.0, seed: int = 0, noise_scale: float = 1.0,
        cpus: frozenset[int] = frozenset(), nice: int = 0,
    ) -> None:
        self._args = (factory, backend, str(bundle_dir), threads)
        self._placement = (checked_cpus(cpus), nice)
        self.backend = backend
        self.timeout_s = timeout_s
        self.warm_chunk_s = 0.0  # measured by the worker at start-up
        self.hung_after_s = timeout_s  # raised from the warm chunk and the answers (HUNG_AFTER_WARM_CHUNKS)
        self.startup_timeout_s = startup_timeout_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._seed = seed
        self.noise_scale = checked_noise_scale(noise_scale)
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._req: Connection | None = None
        self._resp: Connection | None = None
        self._shm: SharedMemory | None = None
        self._meta: dict[str, Any] | None = None
        self._state = "down"
        self._reason = "inference worker not started"
        self._instruction: str | None = None
        self._seq = 0
        self._req_tick = 0
        self._submit_t = 0.0
        self._deadline = 0.0
        self._restart_at = 0.0
        self._consecutive = 0
        self._ack = bytearray(16)
        self._instruction_error = ""
        self._last_failure = ""
        self._refused = False  # the last load failure was the bundle's or the machine's, not a runtime's bug
        self._phase = "load"  # of the start-up: "load", then "warm-up" (each has startup_timeout_s)
        self.failures = 0
        self.restarts = 0
        self.last_infer_s = 0.0
        self._result: ChunkResult | None = None

    @classmethod
    def from_settings(cls, backend: str, bundle_dir: str, threads: int, worker: WorkerSettings,
                      factory: RuntimeFactory = open_runtime, noise_scale: float = 1.0) -> "ProcessInference":
        """A client supervised as `worker` says (timeouts and restart backoff from the node's settings)."""
        return cls(backend, bundle_dir, threads, factory=factory, timeout_s=worker.inference_timeout_s,
                   startup_timeout_s=worker.startup_timeout_s, backoff_s=worker.restart_backoff_s,
                   backoff_max_s=worker.restart_backoff_max_s, noise_scale=noise_scale,
                   cpus=parse_cpu_list(worker.worker_cpus), nice=worker.worker_nice)

    # ----- life cycle -------------------------------------------------------------------------
    def start(self) -> "ProcessInference":
        """Spawn the worker and wait until it is loaded and warm; raises with the worker's reason."""
        self._spawn()
        while self._state == "starting":
            self._advance_start(0.05)
        if self._state != "ready":
            what = self._last_failure
            self.close()
            raise (BundleError if self._refused else RuntimeError)(f"inference worker {what}")
        return self

    def close(self) -> None:
        """Stop the worker (politely, then by force) and free the shared memory."""
        self._stop_process(polite=True)
        self._state = "closed"
        if self._shm is not None:
            for name in ("images", "state", "prefix", "instruction", "_hdr"):
                self.__dict__.pop(name, None)
            self._result = None
            try:
                self._shm.close()
            except BufferError:
                pass  # a caller still holds a view; the mapping goes when that view does
            self._shm.unlink()
            self._shm = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def worker_state(self) -> str:
        """down | starting | ready | busy | backoff | closed"""
        return self._state

    @property
    def busy(self) -> bool:
        return self._state == "busy"

    @property
    def healthy(self) -> bool:
        return self._state in ("ready", "busy") and not self._instruction_error

    @property
    def reason(self) -> str:
        if self._state in ("ready", "busy"):
            return self._instruction_error
        return self._reason

    # ----- requests ---------------------------------------------------------------------------
    def set_instruction(self, text: str) -> None:
        self._instruction = text
        self._instruction_error = ""
        if self._state in ("ready", "busy"):
            self._send(b"i" + text.encode("utf-8"))

    def submit(self, tick: int, prefix_len: int, now: float) -> None:
        if self._state != "ready":
            raise RuntimeError(f"cannot submit: worker is {self._state}")
        self._seq += 1
        hdr = self._hdr
        hdr[REQ_SEQ] = self._seq
        hdr[REQ_TICK] = tick
        hdr[PREFIX_LEN] = prefix_len
        self._req_tick = tick
        self._submit_t = time.perf_counter()
        self._state = "busy"
        self._send(b"r")

    def poll(self, tick: int, now: float) -> ChunkResult | None:
        state = self._state
        if state == "busy":
            if self._hdr[RESP_SEQ] == self._seq:
                try:
                    self._resp.recv_bytes_into(self._ack)  # type: ignore[union-attr]
                except BufferTooShort as exc:  # a long reply is the worker refusing the instruction
                    self._state = "ready"
                    self._instruction_error = exc.args[0][1:].decode("utf-8", "replace")
                    return None
                except (EOFError, OSError):
                    self._fail("exited while answering")
                    return None
                self._state = "ready"
                self._consecutive = 0
                res = self._result
                res.request_tick = self._req_tick  # type: ignore[union-attr]
                res.latency_s = self._hdr[DONE_NS] * 1e-9 - self._submit_t  # type: ignore[union-attr]
                self.last_infer_s = self._hdr[INFER_NS] * 1e-9
                self._raise_hung_bound(HUNG_AFTER_SLOWEST * res.latency_s)  # type: ignore[union-attr]
                return res
            if time.perf_counter() - self._submit_t > self.hung_after_s:
                self._fail(f"hung: no result within {self.hung_after_s:g} s")
            elif not self._proc.is_alive():
                self._fail(f"died (exit code {self._proc.exitcode})")
        elif state == "ready":
            if not self._proc.is_alive():  # an idle worker's death is noticed at once, not at the next request
                self._fail(f"died (exit code {self._proc.exitcode})")
        elif state == "starting":
            self._advance_start(0.0)
        elif state == "backoff" and time.perf_counter() >= self._restart_at:
            self.restarts += 1
            self._spawn()
        return None

    # ----- internals (fault paths: these may allocate and block briefly) ---------------------
    def _send(self, msg: bytes) -> None:
        try:
            self._req.send_bytes(msg)  # type: ignore[union-attr]
        except (OSError, ValueError):
            self._fail(f"died (exit code {self._proc.exitcode})" if self._proc and not self._proc.is_alive() else "pipe closed")

    def _spawn(self) -> None:
        req_r, req_w = self._ctx.Pipe(duplex=False)
        resp_r, resp_w = self._ctx.Pipe(duplex=False)
        self._proc = self._ctx.Process(
            target=_child_main, args=(*self._args, req_r, resp_w, self._seed, self.noise_scale, *self._placement),
            name=f"omni_vla-inference-{self.backend}", daemon=True,
        )
        with _main_module_hidden(self._args[0]):
            self._proc.start()
        req_r.close()  # our copies closed, so the child's death reads as EOF here
        resp_w.close()
        self._req, self._resp = req_w, resp_r
        self._state = "starting"
        self._refused = False
        self._phase = "load"
        self._deadline = time.perf_counter() + self.startup_timeout_s

    def _advance_start(self, wait_s: float) -> None:
        try:
            while self._state == "starting" and self._resp.poll(wait_s):  # type: ignore[union-attr]
                kind, payload = self._resp.recv()  # type: ignore[union-attr]
                if kind in ("refused", "error"):
                    self._refused = kind == "refused"
                    self._fail(f"failed to load the runtime: {payload}")
                elif kind == "meta":
                    self._attach(payload)
                    self._phase = "warm-up"
                    self._deadline = time.perf_counter() + self.startup_timeout_s  # the warm-up's own budget
                elif kind == "ready":
                    self.warm_chunk_s = float(payload)
                    self._raise_hung_bound(HUNG_AFTER_WARM_CHUNKS * self.warm_chunk_s, reset=True)
                    self._state = "ready"
                    self._reason = ""
                    if self._instruction is not None:
                        self._send(b"i" + self._instruction.encode("utf-8"))
        except (EOFError, OSError):
            self._fail(f"exited during start-up (exit code {self._proc.exitcode})")
            return
        if self._state != "starting":
            return
        if not self._proc.is_alive():
            self._fail(f"exited during start-up (exit code {self._proc.exitcode})")
        elif time.perf_counter() > self._deadline:
            self._fail(f"start-up ({self._phase}) exceeded {self.startup_timeout_s:g} s")

    def _raise_hung_bound(self, seconds: float, reset: bool = False) -> None:
        """hung_after_s: at least timeout_s and `seconds`, at most max(timeout_s, startup_timeout_s)."""
        floor = self.timeout_s if reset else self.hung_after_s
        self.hung_after_s = min(max(floor, seconds), max(self.timeout_s, self.startup_timeout_s))

    def _attach(self, meta: dict[str, Any]) -> None:
        if self._shm is None:
            self._meta = meta
            for k, v in meta.items():
                setattr(self, k, v)
            layout = SharedLayout.of(meta)
            self._shm = SharedMemory(create=True, size=layout.size)
            views = layout.views(self._shm.buf)
            views["header"][:] = 0
            self._hdr = views["header"]
            self.images = layout.images(views)
            for name in ("state", "prefix", "instruction"):
                setattr(self, name, views[name])
            self._result = ChunkResult(views["out"])
        elif meta != self._meta:
            self._fail(f"runtime changed shape on restart: {meta} != {self._meta}")
            return
        self._hdr[RESP_SEQ] = -1
        self._req.send(("shm", self._shm.name))  # type: ignore[union-attr]

    def _fail(self, what: str) -> None:
        self._stop_process(polite=False)
        self.failures += 1
        self._consecutive += 1
        delay = min(self.backoff_s * 2 ** (self._consecutive - 1), self.backoff_max_s)
        self._restart_at = time.perf_counter() + delay
        self._state = "backoff"
        self._last_failure = what
        self._reason = f"inference worker {what}; restarting in {delay:.2g} s (failure {self.failures})"

    def _stop_process(self, polite: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if polite and proc.is_alive() and self._req is not None:
                try:
                    self._req.send_bytes(b"q")
                except (OSError, ValueError):
                    pass
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
            proc.join(1.0)
        for conn in (self._req, self._resp):
            if conn is not None:
                conn.close()
        self._req = self._resp = None
