"""Cloud re-planning outside the tick: triggers, one request at a time, validation, time alignment.

The control tick calls three cheap, non-blocking methods:
- `observe(obs, tick, now)` every tick: updates the stall window and fires triggers. Only when a
  trigger fires does it copy the observation (the copy is what gets sent; the caller's buffers may
  be reused next tick) and hand it to the network thread.
- `poll(now, tick)` every tick: None (a single attribute read, no allocation) unless a validated
  plan is waiting; then it drops the rows whose ticks already passed since the observation was
  taken, discards the plan if it is older than `max_plan_age_s`, and returns a ValidatedPlan whose
  row 0 is the action for `tick`.
- `request_plan(reason)` / `note_intervention()` from any thread (ROS topic or service callbacks).

The network side runs in its own thread with its own asyncio event loop (OpenPIClient): connect
with backoff, send the newest pending request, validate the reply, park the result for `poll`.
Failures are logged and counted, never raised into the tick; nothing unvalidated leaves this file.

Triggers: a cadence, a stall (every joint's range over a window below a tolerance), repeated
supervisor interventions, an instruction change, or an explicit request. Automatic triggers
respect `min_interval_s`; explicit and instruction triggers do not. An instruction change or a
`reset()` bumps a generation counter, so replies to requests made before it are discarded.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import cv2
import numpy as np
from websockets.exceptions import ConnectionClosed

from omni_vla.openpi import codec
from omni_vla.openpi.client import OpenPIClient, OpenPIError, ServerError
from omni_vla.openpi.config import ReplanConfig
from omni_vla.openpi.plan import PlanRejected, ValidatedPlan, extract_actions, validate_actions

log = logging.getLogger("omni_vla.openpi.replanner")
CLOSE_TOO_BIG = 1009

COUNTERS = (
    "triggers", "requests", "busy_skips", "bad_observations", "sent", "replies", "plans", "rejected",
    "server_errors", "protocol_errors", "timeouts", "disconnects", "connects", "connect_failures",
    "expired", "superseded", "stale", "resets",
)


@dataclass(slots=True)
class _Request:
    request_id: int
    gen: int
    tick: int
    obs_time: float  # caller's clock
    wall: float  # perf_counter at hand-off (network-side age)
    reason: str
    payload: dict


@dataclass(slots=True)
class _Result:
    request: _Request
    actions: np.ndarray
    latency_s: float
    server_timing: dict


def _still(hist: np.ndarray, tol: np.ndarray, hi: np.ndarray, lo: np.ndarray, span: np.ndarray,
           below: np.ndarray) -> bool:
    """Did every column of the window move less than its tolerance? (allocation-free: scratch arrays)"""
    np.max(hist, axis=0, out=hi)
    np.min(hist, axis=0, out=lo)
    np.subtract(hi, lo, out=span)
    np.less(span, tol, out=below)
    return bool(below.all())


class Replanner:
    """Asks an OpenPI server for plans on triggers; hands validated, time-aligned plans to the tick."""

    def __init__(
        self,
        config: ReplanConfig,
        *,
        api_key: str | None = None,
        extras: Callable[[], Mapping[str, Any]] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`extras` is called (tick thread, only when a request is made) for extra request fields,
        e.g. the privileged sim state the expert-oracle server needs. `clock` must be the clock
        of the `now` values the caller passes (default: perf_counter, like the node's scheduler)."""
        self.config = config
        self._client = OpenPIClient(config.client, api_key=api_key)
        self._extras = extras
        self._clock = clock
        self.period = config.period_s
        d = config.action_dim
        trig = config.triggers
        self._stall_n = max(2, math.ceil(trig.stall_window_s * config.rate_hz)) if trig.stall_window_s > 0 else 0
        self._hist = np.zeros((max(self._stall_n, 1), d), np.float64)
        self._hmax = np.zeros(d, np.float64)
        self._hmin = np.zeros(d, np.float64)
        self._hrange = np.zeros(d, np.float64)
        self._tol = np.full(d, trig.stall_joint_tol_rad, np.float64)
        self._tol[-1] = trig.stall_gripper_tol_m
        self._below = np.zeros(d, bool)
        self._hcount = 0
        # End-effector progress (xyz + gripper opening), used when observations carry "ee_pos".
        self._ee_tol = np.array([trig.stall_ee_tol_m] * 3 + [trig.stall_gripper_tol_m], np.float64)
        self._ehist = np.zeros((max(self._stall_n, 1), 4), np.float64)
        self._emax = np.zeros(4, np.float64)
        self._emin = np.zeros(4, np.float64)
        self._erange = np.zeros(4, np.float64)
        self._ebelow = np.zeros(4, bool)
        self._ecount = 0
        self._interventions: collections.deque[float] = collections.deque(maxlen=max(1, trig.intervention_count))
        self._lock = threading.Lock()
        self._gen = 0
        self._next_id = 0
        self._instruction: str | None = None
        self._explicit: str | None = None
        self._last_request_time = -math.inf
        self._pending: _Request | None = None  # handed off, not yet sent
        self._awaiting = False  # sent, reply not yet in
        self._ready: _Result | None = None  # validated, waiting for poll
        self._reset_pending = False
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.last_error = ""
        self.last_rejection = ""
        self._plan_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._started = threading.Event()

    # ----- lifecycle ------------------------------------------------------------------------
    def start(self) -> "Replanner":
        """Start the network thread (connects in the background; never blocks on the server)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._thread_main, name="openpi-replanner", daemon=True)
        self._thread.start()
        self._started.wait(5.0)
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop the network thread and close the connection."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> "Replanner":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- tick-thread API --------------------------------------------------------------------
    def observe(self, obs: Mapping[str, Any], tick: int, now: float) -> str | None:
        """Record this tick's observation; returns the trigger that made a request, if any."""
        qpos = obs.get("qpos")
        if self._stall_n and qpos is not None and np.shape(qpos) == self._hist.shape[1:]:
            np.copyto(self._hist[self._hcount % self._stall_n], qpos, casting="unsafe")
            self._hcount += 1
            ee = obs.get("ee_pos")
            if self._ee_tol[0] > 0 and ee is not None and np.shape(ee) == (3,):
                row = self._ehist[self._ecount % self._stall_n]
                np.copyto(row[:3], ee, casting="unsafe")
                row[3] = qpos[-1]
                self._ecount += 1
        text = obs.get("instruction")
        explicit = reason = self._explicit
        if text and text != self._instruction:
            changed = self._instruction is not None
            with self._lock:
                self._instruction = text
                self._gen += 1  # plans for the old instruction are now worthless
                self._pending = None
            if changed and self.config.triggers.on_instruction_change and reason is None:
                reason = "instruction"
        if reason is None:
            reason = self._automatic_trigger(now)
        if reason is None:
            return None
        self.counts["triggers"] += 1
        forced = reason == explicit or reason == "instruction"  # these replace a pending request
        if self._busy() and not forced:
            self.counts["busy_skips"] += 1
            return None
        if reason == explicit:
            self._explicit = None
        self._last_request_time = now  # also after a refused observation: no retry storm at tick rate
        return reason if self._submit(obs, tick, now, reason) else None

    def poll(self, now: float, tick: int | None = None) -> ValidatedPlan | None:
        """A validated plan aligned to start at `tick` (now), or None. Never blocks on the network."""
        if self._ready is None:
            return None
        with self._lock:
            res, self._ready = self._ready, None
            gen = self._gen
        if res is None:
            return None
        req = res.request
        if req.gen != gen:
            self.counts["superseded"] += 1
            return None
        age = now - req.obs_time
        if age > self.config.max_plan_age_s:
            self.counts["expired"] += 1
            log.warning("plan %d discarded: %.3f s old > max_plan_age_s=%g", req.request_id, age,
                        self.config.max_plan_age_s)
            return None
        skip = (tick - req.tick) if tick is not None else math.floor(age / self.period + 1e-6)
        skip = max(0, skip)
        if res.actions.shape[0] - skip < self.config.min_steps:
            self.counts["stale"] += 1
            log.warning("plan %d discarded: %d of %d rows already elapsed", req.request_id, skip,
                        res.actions.shape[0])
            return None
        self._hcount = self._ecount = 0  # judge progress afresh under the new plan
        self.counts["plans"] += 1
        return ValidatedPlan(
            actions=res.actions[skip:], start_tick=req.tick + skip if tick is None else tick,
            obs_tick=req.tick, obs_time=req.obs_time, age_s=age, skipped=skip, reason=req.reason,
            request_id=req.request_id, latency_s=res.latency_s, server_timing=res.server_timing,
        )

    def request_plan(self, reason: str = "explicit") -> None:
        """Ask for a plan at the next observe() (thread-safe; e.g. from a ROS topic or service)."""
        self._explicit = reason or "explicit"

    def note_intervention(self, now: float | None = None) -> None:
        """The safety supervisor intervened (clamped, held); repeated ones trigger a plan."""
        self._interventions.append(self._clock() if now is None else now)

    def reset(self) -> None:
        """New episode: forget the stall window, pending work and plans; vLLM-Omni gets a reset."""
        with self._lock:
            self._gen += 1
            self._pending = None
            self._ready = None
            self._instruction = None
            self._reset_pending = self.config.client.protocol == "vllm-omni"
        self._hcount = self._ecount = 0
        self._interventions.clear()
        self._explicit = None
        self._last_request_time = -math.inf
        self._wake_network()

    @property
    def connected(self) -> bool:
        return self._client.connected

    @property
    def busy(self) -> bool:
        return self._busy()

    @property
    def metadata(self) -> dict:
        return self._client.metadata

    def wait_for_plan(self, timeout: float) -> bool:
        """Block until a validated plan is parked for poll (tests, simulated-time evaluation only)."""
        ok = self._plan_event.wait(timeout)
        self._plan_event.clear()
        return ok

    def status(self) -> dict[str, Any]:
        """Counters and state (allocates: call at diagnostics rate)."""
        return {"connected": self.connected, "busy": self.busy, "last_error": self.last_error,
                "last_rejection": self.last_rejection, **self.counts}

    # ----- triggers and hand-off (tick thread) ------------------------------------------------
    def _automatic_trigger(self, now: float) -> str | None:
        trig = self.config.triggers
        if now - self._last_request_time < trig.min_interval_s:
            return None
        iv = self._interventions
        if trig.intervention_count and len(iv) >= trig.intervention_count and now - iv[0] <= trig.intervention_window_s:
            iv.clear()
            return "intervention"
        if self._stall_n and self._hcount >= self._stall_n and self._stalled():
            return "stall"
        if trig.cadence_s > 0 and now - self._last_request_time >= trig.cadence_s:
            return "cadence"
        return None

    def _stalled(self) -> bool:
        if self._ecount >= self._stall_n:  # end-effector progress, when the observations carry it
            return _still(self._ehist, self._ee_tol, self._emax, self._emin, self._erange, self._ebelow)
        return _still(self._hist, self._tol, self._hmax, self._hmin, self._hrange, self._below)

    def _busy(self) -> bool:
        if self._awaiting:
            return True
        p = self._pending
        return p is not None and time.perf_counter() - p.wall < self.config.max_plan_age_s

    def _payload(self, obs: Mapping[str, Any]) -> dict:
        keys, d = self.config.keys, self.config.action_dim
        payload: dict[str, Any] = dict(self.config.extra_fields)
        for name, key in (("front", keys.front), ("wrist", keys.wrist)):
            img = obs.get(name)
            if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise ValueError(f"observation {name!r} must be a uint8 [H, W, 3] image, got "
                                 f"{getattr(img, 'dtype', type(img).__name__)} {np.shape(img)}")
            payload[key] = img.copy()
        qpos = np.asarray(obs.get("qpos"), dtype=np.float32)
        if qpos.shape != (d,):
            raise ValueError(f"observation 'qpos' must have shape ({d},), got {qpos.shape}")
        payload[keys.state] = qpos.copy()
        payload[keys.prompt] = str(obs.get("instruction") or "")
        if self._extras is not None:
            payload.update(self._extras())
        return payload

    def _submit(self, obs: Mapping[str, Any], tick: int, now: float, reason: str) -> bool:
        try:
            payload = self._payload(obs)
        except Exception as exc:  # fail closed: no request, say why
            self.counts["bad_observations"] += 1
            self.last_error = f"observation not sent: {exc}"
            log.error("%s", self.last_error)
            return False
        with self._lock:
            self._next_id += 1
            self._pending = _Request(self._next_id, self._gen, tick, now, time.perf_counter(), reason, payload)
        if reason == "stall":
            self._hcount = self._ecount = 0
        self.counts["requests"] += 1
        self._wake_network()
        return True

    def _wake_network(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # loop closing
                pass

    # ----- network thread -----------------------------------------------------------------
    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _error(self, counter: str, message: str, level: int = logging.WARNING) -> None:
        self.last_error = message
        log.log(level, "%s", message)
        self.counts[counter] += 1  # last: whoever sees the count also sees the message

    def _rejected(self, message: str) -> None:
        self.last_rejection = message
        log.warning("plan refused: %s", message)
        self.counts["rejected"] += 1

    async def _main(self) -> None:
        self._stop, self._wake = asyncio.Event(), asyncio.Event()
        self._started.set()
        uri = self.config.client.uri
        while not self._stop.is_set():
            md = await self._client.connect_with_backoff(
                self._stop, lambda why: self._error("connect_failures", f"cannot connect to {uri}: {why}", logging.INFO))
            if md is None:
                break
            self.counts["connects"] += 1
            log.info("connected to %s (metadata keys: %s)", uri, sorted(map(str, md))[:10])
            try:
                await self._serve()
            except ConnectionClosed as exc:
                self._error("disconnects", f"connection to {uri} closed: {exc}")
            except ServerError as exc:
                self._error("server_errors", str(exc))
            except OpenPIError as exc:
                self._error("timeouts" if "request_timeout_s" in str(exc) else "protocol_errors", str(exc))
            except OSError as exc:
                self._error("disconnects", f"network error: {exc}")
            except Exception as exc:  # keep the network thread alive whatever happens; say what
                self._error("protocol_errors", f"unexpected {type(exc).__name__}: {exc}", logging.ERROR)
                log.debug("traceback", exc_info=True)
            finally:
                self._awaiting = False
                await self._client.close()
        await self._client.close()

    async def _next_request(self) -> _Request | None:
        """The pending request, or None if the connection closed or we are stopping first."""
        ws = self._client.connection
        assert ws is not None and self._stop is not None and self._wake is not None
        closed = asyncio.ensure_future(ws.wait_closed())
        try:
            while not self._stop.is_set():
                if self._reset_pending:
                    return None
                with self._lock:
                    req, self._pending = self._pending, None
                if req is not None:
                    if time.perf_counter() - req.wall <= self.config.max_plan_age_s:
                        return req
                    self.counts["expired"] += 1
                    continue
                self._wake.clear()
                waiter = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(self._stop.wait())
                await asyncio.wait({waiter, stopper, closed}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                if closed.done():
                    with self._lock:
                        if self._pending is not None:
                            return None
                    raise ws.protocol.close_exc
            return None
        finally:
            closed.cancel()

    async def _serve(self) -> None:
        while not self._stop.is_set():
            if self._reset_pending:
                self._reset_pending = False
                try:
                    await self._client.reset(dict(self.config.extra_fields))
                    self.counts["resets"] += 1
                except ServerError as exc:
                    if not exc.connection_kept:
                        raise
                    self._error("server_errors", str(exc))
                continue
            req = await self._next_request()
            if req is None:
                if self._client.connected and not self._stop.is_set():
                    continue  # a reset to send first
                return
            await self._exchange(req)

    def _prepared(self, payload: dict) -> dict:
        size = self.config.image_size
        if size:
            keys = self.config.keys
            for key in (keys.front, keys.wrist):
                img = payload[key]
                if img.shape[:2] != (size, size):
                    payload[key] = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
        return payload

    async def _exchange(self, req: _Request) -> None:
        self._awaiting = True
        try:
            self.counts["sent"] += 1
            try:
                reply = await self._client.infer(self._prepared(req.payload))
            except codec.CodecError as exc:
                self._error("bad_observations", f"request {req.request_id} not encodable: {exc}", logging.ERROR)
                return
            except ConnectionClosed as exc:
                if exc.sent is not None and exc.sent.code == CLOSE_TOO_BIG:
                    self._rejected(f"request {req.request_id}: reply larger than max_message_bytes="
                                   f"{self.config.client.max_message_bytes}")
                else:
                    with self._lock:  # send again on the next connection if nothing newer is waiting
                        if self._pending is None and req.gen == self._gen:
                            self._pending = req
                raise
            except ServerError as exc:
                if not exc.connection_kept:
                    raise
                self._error("server_errors", f"request {req.request_id}: {exc}")
                return
            self.counts["replies"] += 1
            try:
                raw, timing = extract_actions(reply)
                actions = validate_actions(raw, self.config.action_dim, self.config.max_horizon)
            except PlanRejected as exc:
                self._rejected(f"request {req.request_id}: {exc}")
                return
            if actions.flags.writeable:  # decoded arrays already are read-only views
                actions = actions.copy()
                actions.flags.writeable = False
            with self._lock:
                self._ready = _Result(req, actions, time.perf_counter() - req.wall, timing)
            self._plan_event.set()
        finally:
            self._awaiting = False
