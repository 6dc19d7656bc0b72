"""Where the re-planning network side runs, and how requests and events cross over to it.

- `ProcessHost` (the default, `network: process`): a spawned child process. Camera frames are
  copied into shared memory (two slots, each guarded by a sequence number) and only a small message
  (state, prompt, slot) goes down a multiprocessing queue; events come back up another. The tick's
  process then never runs msgpack, websocket framing or image resizing, and a crash or hang in the
  network stack cannot take the node with it: the child is restarted with backoff.
- `ThreadHost` (`network: thread`): a thread of the caller's process, for simulated-time
  evaluation, where lateness does not exist and a process per episode would only cost start-up.
"""
from __future__ import annotations

import asyncio
import importlib
import logging
import multiprocessing as mp
import queue
import signal
import threading
from dataclasses import replace
from multiprocessing import shared_memory
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from omni_vla.cloud.config import ReplanConfig
from omni_vla.cloud.messages import LOST, Request, Sink

if TYPE_CHECKING:
    from omni_vla.cloud.network import PlanNetwork

# Loaded by name, and only in the process that runs the network side (websockets, msgpack, cv2): the
# tick's process imports this module and must not load them (tests/cloud/test_network_process.py).
NETWORK_MODULE = "omni_vla.cloud.network"


def _network_side() -> ModuleType:
    return importlib.import_module(NETWORK_MODULE)

RESTART_BACKOFF_S = (0.5, 10.0)  # network process restarts: first delay, cap
READY = ("ready", (), {})


def _owned(payload: dict) -> dict:
    """The request's own copies of the caller's arrays (they may be reused right after observe())."""
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in payload.items()}


class ThreadHost:
    """PlanNetwork on an asyncio loop in a daemon thread of this process."""

    def __init__(self, config: Any, api_key: str | None, sink: Sink) -> None:
        self._args = (config, api_key, sink)
        self._net: PlanNetwork | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="openpi-network", daemon=True)
        self._thread.start()
        self._ready.wait(5.0)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            self._net = _network_side().PlanNetwork(*self._args)
            self._loop = loop
            self._ready.set()
            loop.run_until_complete(self._net.run())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _call(self, fn: str, *args: Any) -> None:
        loop, net = self._loop, self._net
        if loop is not None and net is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(getattr(net, fn), *args)
            except RuntimeError:  # loop closing
                pass

    def submit(self, req: Request) -> None:
        """Called on the tick thread: the payload's arrays may be the caller's buffers, so copy."""
        self._call("submit", replace(req, payload=_owned(req.payload or {})))

    def cancel(self, gen: int, reset: bool = False) -> None:
        self._call("cancel", gen, reset)

    def close(self, timeout: float) -> None:
        self._call("stop")
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


class FrameSlots:
    """Two slots of camera frames in shared memory; a slot's sequence number is odd while written.

    The parent writes a request's frames into slot id % 2 and sends (slot, seq) in a small message;
    the child copies them out and checks the sequence number did not move meanwhile (else a newer
    request overwrote the slot, and this one is dropped: its reply would be superseded anyway).
    """

    HEADER = 64  # bytes: the two int64 sequence numbers, cache-line padded

    def __init__(self, shapes: tuple[tuple[int, ...], ...], name: str | None = None) -> None:
        self.shapes = shapes
        self.frame_bytes = [int(np.prod(s)) for s in shapes]
        self.slot_bytes = sum(self.frame_bytes)
        size = self.HEADER + 2 * self.slot_bytes
        self.shm = shared_memory.SharedMemory(name=name, create=name is None, size=size if name is None else 0)
        self.seq = np.ndarray((2,), np.int64, buffer=self.shm.buf, offset=0)
        self.views = []
        for slot in range(2):
            off, views = self.HEADER + slot * self.slot_bytes, []
            for shape, nbytes in zip(shapes, self.frame_bytes):
                views.append(np.ndarray(shape, np.uint8, buffer=self.shm.buf, offset=off))
                off += nbytes
            self.views.append(views)

    def write(self, slot: int, frames: list[np.ndarray]) -> int:
        self.seq[slot] += 1  # odd: being written
        for view, frame in zip(self.views[slot], frames):
            np.copyto(view, frame)
        self.seq[slot] += 1
        return int(self.seq[slot])

    def read(self, slot: int, seq: int) -> list[np.ndarray] | None:
        if self.seq[slot] != seq:
            return None
        frames = [v.copy() for v in self.views[slot]]
        return frames if self.seq[slot] == seq else None

    def close(self, unlink: bool = False) -> None:
        self.seq = None  # type: ignore[assignment]
        self.views = []
        self.shm.close()
        if unlink:
            self.shm.unlink()


class _QueueSink:
    """Child side: every event becomes one small message to the parent."""

    def __init__(self, events: Any) -> None:
        self._events = events

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("on_"):
            raise AttributeError(name)
        return lambda *args, **kw: self._events.put((name, args, kw))


def _child_main(config_json: str, api_key: str | None, requests: Any, events: Any) -> None:
    """Network process: a reader thread feeds the queue's messages to PlanNetwork on the loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the network side stops
    config = ReplanConfig.model_validate_json(config_json)
    sink = _QueueSink(events)
    net = _network_side().PlanNetwork(config, api_key, sink)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    slots: FrameSlots | None = None
    keys = tuple(config.keys.images.values())

    def frames_of(args: tuple) -> tuple | None:
        """("submit", (req, shm name, shapes, slot, seq)) -> (req with its frames,) or None if overwritten."""
        nonlocal slots
        req, name, shapes, slot, seq = args
        if slots is None or slots.shm.name != name.lstrip("/"):
            if slots is not None:
                slots.close()
            slots = FrameSlots(tuple(map(tuple, shapes)), name=name)
        frames = slots.read(slot, seq)
        if frames is None:
            sink.on_finished(req.request_id)
            return None
        req.payload.update(zip(keys, frames))
        return (req,)

    def reader() -> None:
        while True:
            try:
                fn, args = requests.get()
            except (EOFError, OSError):
                fn, args = "stop", ()
            if fn == "submit":
                args = frames_of(args)
                if args is None:
                    continue
            try:
                loop.call_soon_threadsafe(getattr(net, fn), *args)
            except RuntimeError:
                return
            if fn == "stop":
                return

    threading.Thread(target=reader, name="openpi-requests", daemon=True).start()
    events.put(READY)
    try:
        loop.run_until_complete(net.run())
    finally:
        loop.close()
        events.put(("on_disconnected", (), {}))


class ProcessHost:
    """PlanNetwork in a spawned child process; restarted with backoff if it dies."""

    def __init__(self, config: Any, api_key: str | None, sink: Sink) -> None:
        self.config, self._api_key, self._sink = config, api_key, sink
        self._ctx = mp.get_context("spawn")
        self._requests: Any = None
        self._events: Any = None
        self._proc: Any = None
        self._closing = threading.Event()
        self._receiver: threading.Thread | None = None
        self._slots: FrameSlots | None = None
        self._keys = tuple(config.keys.images.values())
        self.restarts = 0

    def start(self, timeout: float = 30.0) -> None:
        """Spawn the child and wait until it runs (imports take ~0.5 s), so that triggers from the
        first tick on reach a live network side."""
        self._spawn()
        try:
            first = self._events.get(timeout=timeout)
        except queue.Empty:
            first = None
        if first != READY:
            self._sink.on_event("network_restarts", f"network process not ready within {timeout:g} s: {first!r}",
                                logging.ERROR)
        self._receiver = threading.Thread(target=self._receive, name="openpi-events", daemon=True)
        self._receiver.start()

    def _spawn(self) -> None:
        self._requests, self._events = self._ctx.Queue(), self._ctx.Queue()
        self._proc = self._ctx.Process(
            target=_child_main, name="omni_vla-openpi",
            args=(self.config.model_dump_json(), self._api_key, self._requests, self._events), daemon=True)
        self._proc.start()

    def _receive(self) -> None:
        """Dispatch the child's events to the sink; notice its death and restart it."""
        delay = RESTART_BACKOFF_S[0]
        while not self._closing.is_set():
            try:
                name, args, kw = self._events.get(timeout=0.25)
            except queue.Empty:
                if self._proc.is_alive() or self._closing.is_set():
                    continue
                code = self._proc.exitcode
                self._sink.on_disconnected()
                self._sink.on_finished(LOST)  # whatever was pending or in flight is gone
                self._sink.on_event("network_restarts", f"network process died (exit code {code}); "
                                    f"restarting in {delay:.1f} s", logging.ERROR)
                if self._closing.wait(delay):
                    return
                delay = min(RESTART_BACKOFF_S[1], delay * 2)
                self.restarts += 1
                self._spawn()
                continue
            except (EOFError, OSError):
                return
            if name != "ready":
                getattr(self._sink, name)(*args, **kw)

    def _put(self, fn: str, *args: Any) -> None:
        if self._requests is not None and not self._closing.is_set():
            self._requests.put((fn, args))  # the queue's feeder thread pickles: the caller only appends

    def submit(self, req: Request) -> None:
        """Called on the tick thread: frames into shared memory, the rest (small) into the queue."""
        payload = dict(req.payload or {})
        frames = [payload.pop(k) for k in self._keys]
        shapes = tuple(f.shape for f in frames)
        if self._slots is None or self._slots.shapes != shapes:  # first request, or the cameras changed
            if self._slots is not None:
                self._slots.close(unlink=True)
            self._slots = FrameSlots(shapes)
        slot = req.request_id % 2
        seq = self._slots.write(slot, frames)
        self._put("submit", replace(req, payload=_owned(payload)), self._slots.shm.name, shapes, slot, seq)

    def cancel(self, gen: int, reset: bool = False) -> None:
        self._put("cancel", gen, reset)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def close(self, timeout: float) -> None:
        if self._proc is None:
            return
        self._put("stop")
        self._closing.set()
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(1.0)
        if self._receiver is not None:
            self._receiver.join(timeout)
        for q in (self._requests, self._events):
            q.close()
            q.cancel_join_thread()
        if self._slots is not None:
            self._slots.close(unlink=True)
            self._slots = None
        self._proc = None
