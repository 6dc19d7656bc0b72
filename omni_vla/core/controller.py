"""One tick of the VLA loop, without sleeping: the same class runs the ROS node, the sim demo and eval.

`step(obs, tick, now)` takes the newest observation and returns the action (float64 [D], a reused
buffer) for that tick, or None when the robot must be held (the safety supervisor holds it when
commands stop). A real-time Scheduler calls it at fixed rate for the node; eval calls it directly
in simulated time with a SyncInference client.

Per tick: apply an instruction change, collect a finished chunk and splice it in (time-aligned, per
strategy), check inputs and the inference worker (fail closed: flush the queue, hold, say why),
request the next chunk when the queue is down to H - s actions (s = execution horizon, the RTC
paper's s: actions executed from each chunk), and emit the queued action for this tick.

Instruction change: the new embedding is computed once (never per tick); results of requests made
with the old instruction are discarded; at the next request the queue is cut to the d actions
already committed for the inference delay (for "rtc" they become the pinned prefix; for "naive"
and "average" they are what runs until the new chunk arrives) and everything after is dropped.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from omni_vla.core.chunking import ChunkQueue, rtc_prefix
from omni_vla.core.settings import LIVE_LOOP_SETTINGS, LoopSettings
from omni_vla.core.ports import InferenceClient
from omni_vla.core.perception import ImageRejected, PolicyImage

# WAITING: nothing wrong yet (no first data, instruction or chunk); STALE: data stopped arriving;
# ERROR: the inference worker failed. The robot is held in all three.
OK, WAITING, STALE, ERROR = "OK", "WAITING", "STALE", "ERROR"


def floor_3(x: float) -> float:
    """x rounded down to 3 significant digits: an advised maximum must not be rounded past the limit."""
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return math.floor(x / step * (1 + 1e-12)) * step  # the 1e-12: 8.0 / 0.01 is 799.999... in floats


class Controller:
    """Turns observations into one command per tick from asynchronously computed action chunks."""

    def __init__(self, config: LoopSettings, inference: InferenceClient, replanner: Any = None) -> None:
        """`replanner`: optional omni_vla.cloud.Replanner; its validated cloud plans are spliced in."""
        h, d = inference.horizon, inference.action_dim
        if len(config.joint_names) != d:
            raise ValueError(
                f"{len(config.joint_names)} joint_names {config.joint_names} but the policy outputs {d} actions"
            )
        if config.rate_hz <= 0:
            raise ValueError(f"rate_hz {config.rate_hz} must be > 0 (a 0 is resolved from the bundle by build_loop)")
        if not 1 <= config.execution_horizon <= h:
            raise ValueError(f"execution_horizon {config.execution_horizon} must be in 1..H={h}")
        self.config = config
        self.inference = inference
        self.period = config.period_s
        self.strategy = config.strategy
        # A cloud plan is queued whole (up to the re-planner's max_horizon), then local chunks resume.
        self.queue = ChunkQueue(h, d, replanner.config.max_horizon if replanner is not None else h)
        self.action = np.zeros(d, np.float64)
        self._images = [(c.name, PolicyImage(c.height, c.width)) for c in inference.cameras]
        self._request_at = h - config.execution_horizon
        self._lat = np.zeros(config.latency_window, np.float64)
        self._lat_sorted = np.zeros(config.latency_window, np.float64)
        # Splice jumps: at the tick a chunk lands, how far its action is from what the old queue held for that tick.
        self._before = np.zeros(d, np.float64)
        self._after = np.zeros(d, np.float64)
        self._finite = np.zeros((h, d), bool)  # scratch: a chunk's finiteness is checked on the tick, without allocating
        self._jumps = np.zeros(config.latency_window, np.float64)
        self._jump_n = 0
        self.jump_max = 0.0
        self._lat_n = 0
        self.delay_ticks = 0
        self.state = WAITING
        self.reason = "no observation yet"
        self.tick = 0
        self.instruction: str | None = None
        self._gen = 0
        self._inflight_gen = -1
        self._recut = False
        self._have_chunk = False
        self.counts = dict.fromkeys(
            ("commands", "holds", "requests", "chunks", "discarded_chunks", "stale_chunks",
             "rejected_images", "starved_ticks", "cloud_plans", "non_finite_chunks"), 0,
        )
        self.replanner = replanner
        self.last_rejection = ""
        self.last_prefix_len = 0
        # What must be present and fresh: (key in obs, key in obs["stamps"]) per camera, then the joint state.
        self._inputs = (*((c.name, c.name) for c in inference.cameras), ("qpos", "joints"))
        self._what = {**{c.name: f"{c.name} camera image" for c in inference.cameras}, "joints": "joint state"}
        self._missing = {k: f"waiting for the first {v}" for k, v in self._what.items()}
        self._stale, self._ahead = self._stale_reasons(config.max_obs_age_s)

    # ----- the tick ---------------------------------------------------------------------------
    def step(self, obs: Mapping[str, Any], tick: int, now: float | None = None) -> np.ndarray | None:
        """The action for `tick` (reused buffer; copy it to keep it), or None to hold."""
        if now is None:
            now = tick * self.period
        self.tick = tick
        inf = self.inference
        text = obs.get("instruction")
        if text and text != self.instruction:
            self.set_instruction(text)
        self._collect(tick, now)
        if not inf.healthy:
            return self._hold(ERROR, inf.reason)
        problem = self._input_problem(obs, now)
        if problem is not None:
            return self._hold(*problem)
        if self.instruction is None:
            return self._hold(WAITING, "no instruction yet")
        if self.replanner is not None:
            self._splice_cloud_plan(obs, tick, now)
        if not inf.busy and (self._recut or self.queue.remaining(tick) <= self._request_at):
            self._request(obs, tick, now)
            self._collect(tick, now)  # a zero-delay synchronous client answers at once
        if self.queue.action_at(tick, self.action):
            self.counts["commands"] += 1
            self._set(OK, "")
            return self.action
        if self._have_chunk:
            self.counts["starved_ticks"] += 1
            self._set(WAITING, "action queue ran dry: inference delay exceeds H - execution_horizon")
        else:
            self._set(WAITING, "waiting for the first action chunk")
        return None

    def set_instruction(self, text: str) -> None:
        """Encode once; in-flight work for the old instruction is discarded, the queue cut at d."""
        self.inference.set_instruction(text)
        self.instruction = text
        self._gen += 1
        self._recut = True

    def reset(self) -> None:
        """Forget queued actions and in-flight work (new episode); keeps the instruction embedding."""
        if self.replanner is not None:
            self.replanner.reset()
        self.queue.clear()
        self._gen += 1
        self._recut = False
        self._have_chunk = False
        self._set(WAITING, "reset")

    def update(self, config: LoopSettings) -> None:
        """Apply a live settings change (LIVE_LOOP_SETTINGS only: the rest built the queue and buffers)."""
        fixed = sorted(k for k in LoopSettings.model_fields
                       if k not in LIVE_LOOP_SETTINGS and getattr(config, k) != getattr(self.config, k))
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot change while the loop runs: reconfigure")
        self._stale, self._ahead = self._stale_reasons(config.max_obs_age_s)
        self.config = config

    # ----- internals --------------------------------------------------------------------------
    def _stale_reasons(self, age: float) -> tuple[dict[str, str], dict[str, str]]:
        """Per input, why it is stale: too old, or captured ahead of the loop's time (its clock jumped back)."""
        return ({k: f"{v} older than max_obs_age_s={age:g} s" for k, v in self._what.items()},
                {k: f"{v} captured more than max_obs_age_s={age:g} s ahead of the loop's time (the clock jumped back)"
                 for k, v in self._what.items()})

    def _splice_cloud_plan(self, obs: Mapping[str, Any], tick: int, now: float) -> None:
        """A validated, time-aligned cloud plan replaces the queue from this tick (never blocks).

        The local request in flight is discarded; the plan runs until H - execution_horizon of its
        rows are left, when local inference resumes (RTC pins the plan's committed rows as prefix).
        """
        rp = self.replanner
        rp.observe(obs, tick, now)
        plan = rp.poll(now, tick)
        if plan is None:
            return
        if self.queue.splice(plan.actions[: self.queue.capacity], tick, tick, "naive"):
            self._gen += 1
            self._have_chunk = True
            self.counts["cloud_plans"] += 1

    def _set(self, state: str, reason: str) -> None:
        self.state = state
        self.reason = reason

    def _hold(self, state: str, reason: str) -> None:
        """Fail closed: drop queued actions and in-flight work, command nothing, say why."""
        self.queue.clear()
        self._gen += 1
        self._have_chunk = False
        self.counts["holds"] += 1
        self._set(state, reason)
        return None

    def _input_problem(self, obs: Mapping[str, Any], now: float) -> tuple[str, str] | None:
        """(WAITING, which input never came) or (STALE, which input is too old), or None."""
        for key, name in self._inputs:
            if obs.get(key) is None:
                return WAITING, self._missing[name]
        stamps = obs.get("stamps")
        if stamps:
            limit = self.config.max_obs_age_s
            for _, key in self._inputs:
                t = stamps.get(key)
                if t is None:
                    return WAITING, self._missing[key]
                if now - t > limit:
                    return STALE, self._stale[key]
                if t - now > limit:  # captured before the clock jumped back: its age is unknown
                    return STALE, self._ahead[key]
        return None

    def _collect(self, tick: int, now: float) -> None:
        res = self.inference.poll(tick, now)
        if res is None:
            return
        self._record_latency(res.latency_s)
        if self._inflight_gen != self._gen:
            self.counts["discarded_chunks"] += 1
            return
        if not np.isfinite(res.actions, out=self._finite).all():  # kept, a NaN would stay in the shaper's memory
            self.counts["non_finite_chunks"] += 1
            self.last_rejection = "the policy returned a chunk with non-finite values: dropped"
            return
        had = self.queue.action_at(tick, self._before)
        kept = self.queue.splice(res.actions, res.request_tick, tick, self.strategy, self.config.average_old_weight,
                                 self.config.splice_blend_ticks)
        self.counts["chunks"] += 1
        if kept == 0:
            self.counts["stale_chunks"] += 1
            return
        self._have_chunk = True
        if had and self.queue.action_at(tick, self._after):
            self._record_jump()

    def _record_jump(self) -> None:
        """max over joints of |new - old| at the splice tick (allocation-free: in place on the scratch rows)."""
        np.subtract(self._after, self._before, out=self._after)
        np.abs(self._after, out=self._after)
        jump = float(self._after.max())
        self._jumps[self._jump_n % self._jumps.shape[0]] = jump
        self._jump_n += 1
        self.jump_max = max(self.jump_max, jump)

    def _record_latency(self, latency_s: float) -> None:
        """d = ceil(p95 of recent latencies / period); allocation-free (sorts a scratch copy)."""
        w = self._lat.shape[0]
        self._lat[self._lat_n % w] = latency_s
        self._lat_n += 1
        n = min(self._lat_n, w)
        s = self._lat_sorted[:n]
        np.copyto(s, self._lat[:n])
        s.sort()
        p95 = s[int(0.95 * n)]  # 0.95 n < n, so the index is at most n - 1
        self.delay_ticks = max(0, math.ceil(p95 / self.period - 1e-6))

    def _request(self, obs: Mapping[str, Any], tick: int, now: float) -> None:
        inf = self.inference
        try:
            for name, convert in self._images:
                convert(obs[name], inf.images[name])
        except ImageRejected as exc:
            self.counts["rejected_images"] += 1
            self.last_rejection = str(exc)
            return
        np.copyto(inf.state[0], obs["qpos"], casting="same_kind")
        d = self.delay_ticks
        if self._recut:
            self.queue.truncate(tick + d)
            self._recut = False
        prefix_len = 0
        if self.strategy == "rtc":
            prefix_len = rtc_prefix(self.queue, tick, d, inf.max_prefix, inf.prefix)
        inf.submit(tick, prefix_len, now)
        self._inflight_gen = self._gen
        self.last_prefix_len = prefix_len
        self.counts["requests"] += 1

    # ----- reporting (allocates; call at diagnostics rate, not per tick) ------------------------
    def latency_summary(self) -> dict[str, float]:
        n = min(self._lat_n, self._lat.shape[0])
        if n == 0:
            return {"p50_ms": 0.0, "p95_ms": 0.0, "max_ms": 0.0}
        lat = np.sort(self._lat[:n])
        return {"p50_ms": 1e3 * float(lat[n // 2]), "p95_ms": 1e3 * float(lat[int(0.95 * n)]),
                "max_ms": 1e3 * float(lat[-1])}

    def delay_headroom(self) -> int:
        """Ticks to spare before the queue runs dry at the measured delay d (negative: it will starve).

        A request is made when H - s actions are left, or at once when the previous one took longer than s
        ticks; with one request in flight, every tick is covered iff d + max(s, d) <= H."""
        h, d, s = self.queue.horizon, self.delay_ticks, self.config.execution_horizon
        return h - max(s, d) - d

    def too_slow(self, latency_s: float) -> str:
        """What to change when delay_headroom() < 0: the largest delay any s covers is d_max = H - max(s, H/2)."""
        h, s = self.queue.horizon, self.config.execution_horizon
        d_max = h - max(s, math.ceil(h / 2))
        hint = f"lower rate_hz to <= {floor_3(d_max / latency_s):.3g} Hz" if d_max > 0 else "use a bundle with longer chunks"
        if s > math.ceil(h / 2):
            hint += f" or execution_horizon to <= {h // 2}"
        return (f"inference p95 {1e3 * latency_s:.0f} ms = {self.delay_ticks} ticks at {self.config.rate_hz:g} Hz, "
                f"more than the {d_max} that chunks of {h} executed {s} at a time cover: the queue will run dry; {hint}")

    def jump_summary(self) -> dict[str, float]:
        """Splice jumps of recent chunk boundaries (the latency window's count) and the largest since start."""
        n = min(self._jump_n, self._jumps.shape[0])
        if n == 0:
            return {"p50": 0.0, "p95": 0.0, "max": 0.0, "count": 0}
        j = np.sort(self._jumps[:n])
        return {"p50": float(j[n // 2]), "p95": float(j[int(0.95 * n)]), "max": self.jump_max, "count": self._jump_n}

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state, "reason": self.reason, "tick": self.tick,
            "queue_depth": self.queue.remaining(self.tick), "delay_ticks": self.delay_ticks,
            "delay_headroom_ticks": self.delay_headroom(),
            "strategy": self.strategy, "backend": self.inference.backend,
            "inference_latency": self.latency_summary(), "splice_jump": self.jump_summary(), **self.counts,
        }
