"""Cloud re-planning outside the tick: triggers, one request at a time, validation, time alignment.

The control tick calls three cheap, non-blocking methods:
- `observe(obs, tick, now)` every tick: updates the stall window and fires triggers. Only when a
  trigger fires does it copy the observation (the copy is what gets sent; the caller's buffers may
  be reused next tick) and hand it to the network side.
- `poll(now, tick)` every tick: None (a single attribute read, no allocation) unless a validated
  plan is waiting; then it drops the rows whose ticks already passed since the observation was
  taken, discards the plan if it is older than `max_plan_age_s`, and returns a ValidatedPlan whose
  row 0 is the action for `tick`.
- `request_plan(reason)` / `note_intervention()` from any thread (ROS topic or service callbacks).

The network side (omni_vla.cloud.network) runs in its own process by default (`network:
process`), or in a thread (`network: thread`, simulated-time evaluation): connect with backoff,
send the newest pending request, validate the reply. It reports events, which land here: a
validated plan is parked for `poll`; failures are logged and counted, never raised into the tick.

Triggers: a cadence, a stall (every joint's range over a window below a tolerance), repeated
supervisor interventions, an instruction change, or an explicit request. Automatic triggers
respect `min_interval_s`; explicit and instruction triggers do not. An instruction change or a
`reset()` bumps a generation counter, so replies to requests made before it are discarded.
"""
from __future__ import annotations

import collections
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from omni_vla.cloud.config import ReplanConfig
from omni_vla.cloud.hosts import ProcessHost, ThreadHost
from omni_vla.cloud.messages import LOST, Request
from omni_vla.cloud.plan import ValidatedPlan

log = logging.getLogger("omni_vla.cloud.replanner")

COUNTERS = (
    "triggers", "requests", "busy_skips", "bad_observations", "sent", "replies", "plans", "rejected",
    "server_errors", "protocol_errors", "timeouts", "disconnects", "connects", "connect_failures",
    "expired", "superseded", "stale", "resets", "network_restarts",
)


@dataclass(slots=True)
class _Result:
    request: Request
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
        host = ProcessHost if config.network == "process" else ThreadHost
        self._host = host(config, config.client.api_key() if api_key is None else api_key, self)
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
        self._outstanding: tuple[int, float] | None = None  # (id, wall) handed off, not yet finished
        self._in_flight: int | None = None  # id sent to the server, reply not yet in
        self._connected = False
        self._metadata: dict = {}
        self._ready: _Result | None = None  # validated, waiting for poll
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.last_error = ""
        self.last_rejection = ""
        self._plan_event = threading.Event()
        self._started = False

    # ----- lifecycle ------------------------------------------------------------------------
    def start(self) -> "Replanner":
        """Start the network side (connects in the background; never blocks on the server)."""
        if not self._started:
            self._host.start()
            self._started = True
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop the network side and close the connection."""
        if self._started:
            self._host.close(timeout)
            self._started = False

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
                gen = self._gen
            self._host.cancel(gen)
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
            gen = self._gen
            self._ready = None
            self._instruction = None
        self._host.cancel(gen, reset=True)
        self._hcount = self._ecount = 0
        self._interventions.clear()
        self._explicit = None
        self._last_request_time = -math.inf

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def busy(self) -> bool:
        return self._busy()

    @property
    def metadata(self) -> dict:
        return self._metadata

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
        if self._in_flight is not None:
            return True
        p = self._outstanding
        return p is not None and time.perf_counter() - p[1] < self.config.max_plan_age_s

    def _payload(self, obs: Mapping[str, Any]) -> dict:
        keys, d = self.config.keys, self.config.action_dim
        payload: dict[str, Any] = dict(self.config.extra_fields)
        for name, key in keys.images.items():
            img = obs.get(name)
            if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise ValueError(f"observation {name!r} must be a uint8 [H, W, 3] image, got "
                                 f"{getattr(img, 'dtype', type(img).__name__)} {np.shape(img)}")
            payload[key] = img  # the host copies it before observe() returns (shared memory or a copy)
        qpos = np.asarray(obs.get("qpos"), dtype=np.float32)
        if qpos.shape != (d,):
            raise ValueError(f"observation 'qpos' must have shape ({d},), got {qpos.shape}")
        payload[keys.state] = qpos  # copied by the host, like the frames
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
            req = Request(self._next_id, self._gen, tick, now, time.perf_counter(), reason, payload)
        self._outstanding = (req.request_id, req.wall)
        self._host.submit(req)
        if reason == "stall":
            self._hcount = self._ecount = 0
        self.counts["requests"] += 1
        return True

    # ----- events from the network side (its thread, or the thread receiving its process's events)
    def on_connected(self, metadata: dict) -> None:
        self._metadata, self._connected = metadata, True
        self.counts["connects"] += 1
        log.info("connected to %s (metadata keys: %s)", self.config.client.uri, sorted(map(str, metadata))[:10])

    def on_disconnected(self) -> None:
        self._connected = False

    def on_sent(self, request_id: int) -> None:
        self._in_flight = request_id
        self.counts["sent"] += 1

    def on_finished(self, request_id: int, still_pending: bool = False) -> None:
        if request_id in (self._in_flight, LOST):
            self._in_flight = None
        out = self._outstanding
        if request_id == LOST or (out is not None and out[0] == request_id and not still_pending):
            self._outstanding = None

    def on_result(self, request: Request, actions: np.ndarray, latency_s: float, timing: dict) -> None:
        actions.flags.writeable = False  # unpickled from the network process: read-only again
        with self._lock:
            self._ready = _Result(request, actions, latency_s, timing)
        self._plan_event.set()

    def on_event(self, counter: str, message: str = "", level: int = logging.WARNING, rejection: bool = False) -> None:
        if rejection:
            self.last_rejection = message
            log.warning("plan refused: %s", message)
        elif message:
            self.last_error = message
            log.log(level, "%s", message)
        self.counts[counter] += 1  # last: whoever sees the count also sees the message
