"""The controller in simulated time around ToyRuntime: a controller with a synchronous client `delay` ticks late,
observations, the value ToyRuntime commands, a run over ticks; and FakeReplanner, a cloud re-planner double."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from omni_vla.core.controller import Controller
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference
from toy_runtime import STEP, ToyRuntime

PERIOD = 0.05


def make(strategy: str = "rtc", delay: int = 2, s: int = 4, **cfg) -> tuple[Controller, ToyRuntime]:
    rt = ToyRuntime(record=True)
    inf = SyncInference(rt, delay_ticks=delay, period_s=PERIOD)
    return Controller(LoopSettings(strategy=strategy, execution_horizon=s, rate_hz=1 / PERIOD, **cfg), inf), rt


def obs(q: float = 0.0, instruction: str | None = "pick up the cube", size: int = 128) -> dict:
    img = np.zeros((size, size, 3), np.uint8)
    return {"front": img, "wrist": img.copy(), "qpos": np.full(8, q), "qvel": np.zeros(8), "instruction": instruction}


def row(q: float, i: int) -> float:
    """ToyRuntime chunk value (black image) for state q, row i."""
    return float(np.float32(q) + np.float32((i + 1) * STEP))


def run(ctl: Controller, ticks: range, q_of_tick=lambda t: float(t)) -> dict[int, float | None]:
    """Step the controller with qpos = q_of_tick(t); returns the commanded joint-1 value per tick."""
    out: dict[int, float | None] = {}
    for t in ticks:
        a = ctl.step(obs(q_of_tick(t)), t)
        out[t] = None if a is None else float(a[0])
    return out


class FakeReplanner:
    """Hands out the plans it is given at their ticks; counts reset/close."""

    def __init__(self, max_horizon: int = 32) -> None:
        self.config = SimpleNamespace(max_horizon=max_horizon)
        self.plans: dict[int, np.ndarray] = {}
        self.observed: list[int] = []
        self.resets = self.closes = 0

    def observe(self, obs, tick: int, now: float) -> None:
        self.observed.append(tick)

    def poll(self, now: float, tick: int):
        actions = self.plans.pop(tick, None)
        return None if actions is None else SimpleNamespace(actions=actions)

    def reset(self) -> None:
        self.resets += 1

    def close(self) -> None:
        self.closes += 1
