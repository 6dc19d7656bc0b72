"""Cloud plans (OpenPI protocol) inside simulated-time evaluation.

The real Replanner talks to a real server over websockets; only the moment a reply becomes visible
is moved onto the simulated clock: a plan requested at tick t is released at t + latency_ticks, so
results do not depend on the machine or the network, just like the local inference delay.
"""
from __future__ import annotations

import http.client
import math
from typing import Any
from urllib.parse import urlparse

from omni_vla.cloud import ReplanConfig, Replanner
from omni_vla_sim.oracle import sim_state

WAIT_S = 15.0  # wall-clock cap on one reply in simulation (a hung server fails the episode's plans)


def check_server(url: str | None, timeout: float = 3.0) -> None:
    """Refuse to start an evaluation against a server that does not answer /healthz."""
    if not url:
        raise ValueError("an OpenPI server URL (ws://host:port) is required")
    u = urlparse(url)
    if u.scheme not in ("ws", "wss") or not u.hostname:
        raise ValueError(f"OpenPI URL must be ws:// or wss://host:port, got {url!r}")
    conn_cls = http.client.HTTPSConnection if u.scheme == "wss" else http.client.HTTPConnection
    try:
        conn = conn_cls(u.hostname, u.port or (443 if u.scheme == "wss" else 80), timeout=timeout)
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
        conn.close()
    except OSError as exc:
        raise ConnectionError(f"OpenPI server {url} is unreachable ({exc})") from exc
    if status != 200:
        raise ConnectionError(f"OpenPI server {url} answered /healthz with HTTP {status}")


class SimTimeReplanner:
    """Wraps a started Replanner: same triggers, validation and alignment; replies on sim time."""

    def __init__(self, replanner: Any, latency_ticks: int) -> None:
        self.rp = replanner
        self.config = replanner.config
        self.latency_ticks = latency_ticks
        self.release: int | None = None

    def observe(self, obs: Any, tick: int, now: float) -> str | None:
        reason = self.rp.observe(obs, tick, now)
        if reason is not None:
            self.release = tick + self.latency_ticks if self.rp.wait_for_plan(WAIT_S) else None
        return reason

    def poll(self, now: float, tick: int) -> Any:
        if self.release is None or tick < self.release:
            return None
        self.release = None
        return self.rp.poll(now, tick)

    def request_plan(self, reason: str = "explicit") -> None:
        self.rp.request_plan(reason)

    def reset(self) -> None:
        self.release = None
        self.rp.reset()

    def close(self) -> None:
        self.rp.close()


def make_replanner(settings: Any, env: Any, clock: Any, stall: bool = True) -> SimTimeReplanner:
    """A Replanner on `settings.openpi_url` that sends the privileged sim state (for the oracle)."""
    period = 1.0 / env.config.control_hz
    cfg = ReplanConfig.model_validate({
        "enabled": True, "rate_hz": env.config.control_hz, "max_plan_age_s": 5.0, "network": "thread",
        "client": {"uri": settings.openpi_url, "request_timeout_s": WAIT_S},
        "triggers": {"on_instruction_change": False, "stall_window_s": settings.stall_window_s if stall else 0.0,
                     "stall_ee_tol_m": settings.stall_ee_tol_m,
                     "cadence_s": getattr(settings, "replan_cadence_s", 0.0) if stall else 0.0,
                     "intervention_count": 0, "min_interval_s": 1.0},
    })
    rp = Replanner(cfg, extras=lambda: {"privileged/sim_state": sim_state(env)}, clock=clock).start()
    return SimTimeReplanner(rp, math.ceil(settings.cloud_latency_ms / 1e3 / period - 1e-9))
