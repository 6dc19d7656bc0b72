"""vla_node's diagnostics as plain data, and the supervisor's intervention counters read back: no ROS here,
so what an operator sees (level, message, values) and what triggers a re-plan are tested without rclpy.

Levels (diagnostic_msgs' values): OK commanding (or inactive by lifecycle); WARN waiting for first
data/instruction/chunk, data stopped arriving (the node itself is alive, so not the STALE level), unusable
stamps, or inference too slow for the queue; ERROR a failed or restarting inference worker or a refused
instruction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

OK, WARN, ERROR = 0, 1, 2
_LEVEL = {"OK": OK, "INACTIVE": OK, "WAITING": WARN, "STALE": WARN, "ERROR": ERROR}
INTERVENTIONS = "interventions/"  # the supervisor's diagnostics key prefix for its intervention counters
MAX_NEW_INTERVENTIONS = 16  # per supervisor status: a counter jump (a restart elsewhere) is not a storm
# Tick lateness p99/max over the last 1000 ticks, or 10 s where that holds more: the supervisor's 1000 wake-ups
# (10 s at 100 Hz); fewer samples would make "p99" the window's maximum at a slow policy's rate.
LATENESS_WINDOW_TICKS, LATENESS_WINDOW_S = 1000, 10.0


@dataclass
class Report:
    level: int
    message: str
    values: dict[str, Any]


@dataclass
class NodeCounts:
    """What the node itself counts (the rest comes from the loop, the scheduler and the worker)."""

    rejected: dict[str, int] = field(default_factory=lambda: {"images": 0, "joint_states": 0, "instructions": 0})
    last_rejection: str = ""
    tick_errors: int = 0


@dataclass
class Since:
    """The previous report's tick count, time and stamp fallbacks: rates and 'new since' are per period."""

    ticks: int = 0
    t: float = 0.0
    fallbacks: int = 0


def loop_report(loop: Any, scheduler: Any, inference: Any, active: bool, counts: NodeCounts, since: Since,
                sim_time: bool) -> Report:
    """One period's status of the control loop; updates `since` for the next."""
    ctl, store, st = loop.controller, loop.store, scheduler.stats
    now = scheduler.clock.now()
    rate = (st.ticks - since.ticks) / (now - since.t) if since.t and now > since.t else 0.0
    since.ticks, since.t = st.ticks, now
    s = ctl.status()
    lat = s["inference_latency"]
    fallbacks = store.stamp_fallbacks
    new_fallbacks = fallbacks - since.fallbacks
    since.fallbacks = fallbacks
    state = s["state"] if active else "INACTIVE"
    message = "inactive" if not active else (s["reason"] or "commanding")
    level = _LEVEL.get(state, WARN)
    if not inference.healthy:  # a dead, hung or restarting worker is an error even while inactive
        level, message = ERROR, inference.reason or f"inference worker {inference.worker_state}"
    elif new_fallbacks and level == OK:
        level = WARN
        message = f"{message}; {new_fallbacks} header.stamp(s) not usable ({store.last_stamp_fallback})"
    if active and inference.healthy and s["delay_headroom_ticks"] < 0 and lat["p95_ms"] > 0:
        level = max(level, WARN)
        message = f"{message}; {ctl.too_slow(lat['p95_ms'] / 1e3)}"
    with store.lock:
        ages = {k: ("none" if t is None else round(1e3 * (now - t), 1)) for k, t in store.stamps.items()}
    window = max(LATENESS_WINDOW_TICKS, round(LATENESS_WINDOW_S * loop.settings.rate_hz))
    p99, worst = st.recent(99, window)
    values = {
        "state": state, "backend": inference.backend, "strategy": s["strategy"], "rate_hz_target": loop.settings.rate_hz,
        "loop_rate_hz": round(rate, 2), "tick_lateness_p99_ms": round(1e3 * p99, 4),
        "tick_lateness_max_ms": round(1e3 * worst, 4), "tick_lateness_window_ticks": min(st.ticks, window),
        "tick_lateness_max_since_start_ms": round(1e3 * st.max_lateness, 4), "missed_ticks": st.missed,
        "overruns": st.overruns, "clock_jumps_back": st.clock_jumps_back, "inference_latency_p50_ms": round(lat["p50_ms"], 3),
        "inference_latency_p95_ms": round(lat["p95_ms"], 3), "delay_ticks": s["delay_ticks"],
        "queue_depth": s["queue_depth"], "delay_headroom_ticks": s["delay_headroom_ticks"], "commands": s["commands"],
        "holds": s["holds"], "starved_ticks": s["starved_ticks"], "splice_jump_p95": round(s["splice_jump"]["p95"], 5),
        "splice_jump_max": round(s["splice_jump"]["max"], 5), "splices": s["splice_jump"]["count"],
        "chunks": s["chunks"], "worker_state": inference.worker_state, "worker_pid": inference.pid,
        "worker_restarts": inference.restarts,
        "rejected_images": counts.rejected["images"] + s["rejected_images"],
        "rejected_joint_states": counts.rejected["joint_states"],
        "rejected_instructions": counts.rejected["instructions"], "non_finite_chunks": s["non_finite_chunks"],
        "last_rejection": counts.last_rejection,
        "tick_errors": counts.tick_errors, "scheduling": scheduler.rt_status, "cloud_plans": s["cloud_plans"],
        "time_source": "ROS time (use_sim_time)" if sim_time else "monotonic",
        **{f"{c}_age_ms": ages[c] for c in store.cameras}, "joint_state_age_ms": ages["joints"],
        "stamp_fallbacks": fallbacks, "last_stamp_fallback": store.last_stamp_fallback,
    }
    return Report(level, message, values)


def intervention_total(values: Iterable[tuple[str, str]], kinds: set[str]) -> int:
    """The supervisor's intervention counters named in `kinds` (without the prefix), summed over one of its
    statuses' key/value pairs; a value that is not an integer is skipped."""
    total = 0
    for key, value in values:
        if key.startswith(INTERVENTIONS) and key[len(INTERVENTIONS):] in kinds:
            try:
                total += int(value)
            except ValueError:
                continue
    return total


class InterventionCounter:
    """How many interventions of the watched kinds happened since the supervisor's previous status."""

    def __init__(self, kinds: Iterable[str]) -> None:
        self.kinds = set(kinds)
        self.seen: int | None = None

    def new(self, values: Iterable[tuple[str, str]]) -> int:
        """Interventions since the last status (0 for the first one seen, at most MAX_NEW_INTERVENTIONS)."""
        total = intervention_total(values, self.kinds)
        fresh = 0 if self.seen is None else max(0, min(total - self.seen, MAX_NEW_INTERVENTIONS))
        self.seen = total
        return fresh
