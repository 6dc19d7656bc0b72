"""The cloud re-planner against a real OpenPI websocket server on loopback: a tiny ramp policy (row i = state +
0.01 * i, so alignment is checkable row by row), its observations, a re-plan config, the tick side's timed
polls (Tick), and a server fixture serving the ramp."""
from __future__ import annotations

import socket
import statistics
import time

import numpy as np
import pytest

from omni_vla.cloud.config import ReplanConfig
from omni_vla.cloud.plan import validate_actions
from omni_vla.cloud.replanner import Replanner
from omni_vla_sim.openpi_server import PolicyServer

D = 8
PERIOD = 0.05


class RampPolicy:
    """A real (tiny) policy: row i = state + 0.01 * i, so alignment is checkable row by row."""

    def __init__(self, horizon: int = 20, fail_first: int = 0) -> None:
        self.horizon, self.fail_first, self.calls = horizon, fail_first, 0
        self.metadata = {"action_horizon": horizon, "action_dim": 8}

    def reset(self) -> None:
        pass

    def infer(self, obs: dict) -> dict:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise RuntimeError(f"policy failure number {self.calls}")
        state = np.asarray(obs["observation/state"], np.float64)
        return {"actions": state[None, :] + 0.01 * np.arange(self.horizon)[:, None]}


def make_obs(q: float = 0.1, instruction: str = "pick up the red cube") -> dict:
    return {"front": np.full((16, 16, 3), 7, np.uint8), "wrist": np.full((16, 16, 3), 9, np.uint8),
            "qpos": np.full(D, q), "qvel": np.zeros(D), "instruction": instruction}


def config(uri: str, **overrides) -> ReplanConfig:
    base = {
        "enabled": True, "max_plan_age_s": 1.0,
        "client": {"uri": uri, "backoff_initial_s": 0.05, "backoff_max_s": 0.2, "request_timeout_s": 3.0,
                   "open_timeout_s": 2.0},
        "triggers": {"stall_window_s": 0, "intervention_count": 0, "cadence_s": 0},
    }
    for key, value in overrides.items():
        if isinstance(value, dict):
            base.setdefault(key, {}).update(value)
        else:
            base[key] = value
    return ReplanConfig.model_validate(base)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tick:
    """The caller's side: perf_counter time, tick = elapsed / period, every poll timed."""

    def __init__(self, rp: Replanner) -> None:
        self.rp, self.t0, self.poll_s = rp, time.perf_counter(), []

    @property
    def now(self) -> float:
        return time.perf_counter()

    @property
    def tick(self) -> int:
        return int((self.now - self.t0) / PERIOD)

    def request(self, obs: dict | None = None) -> int:
        tick = self.tick
        self.rp.request_plan()
        assert self.rp.observe(obs or make_obs(), tick, self.now) == "explicit"
        return tick

    def poll(self):
        t = time.perf_counter()
        plan = self.rp.poll(self.now, self.tick)
        self.poll_s.append(time.perf_counter() - t)
        if plan is not None:
            check_plan(plan)
        return plan

    def poll_until(self, timeout: float, done=lambda plan: plan is not None):
        """Poll every 5 ms like a tick would; the plan (or None) when `done` or at timeout."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            plan = self.poll()
            if done(plan):
                return plan
            time.sleep(0.005)
        return None

    def assert_polls_were_fast(self) -> None:
        assert self.poll_s and statistics.median(self.poll_s) < 1e-3, statistics.median(self.poll_s)


def check_plan(plan) -> None:
    """What may ever leave the replanner."""
    validate_actions(plan.actions, D, 64)
    assert not plan.actions.flags.writeable


def wait_for(pred, timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def ramp_server():
    policy = RampPolicy()
    server = PolicyServer(policy, metadata={"policy": "ramp"})
    with server.thread() as st:
        yield server, st
