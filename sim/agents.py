"""Who acts in a simulated episode: the node's assembled loop, the scripted expert, or a cloud policy.

An `Agent` proposes one joint target per control tick (or None: hold); the episode runner sends it
through the same Supervisor as on the robot. `LoopAgent` is the robot's loop (omni_vla.core.assembly
.build_loop) over a synchronous simulated-time inference client, so evaluation, recovery rounds and
the node run one and the same assembly.
"""
from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from omni_vla.core.assembly import Loop, build_loop
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference, copy_runtime_shape, open_runtime
from omni_vla_safety.limits import load_joint_limits
from omni_vla_sim import robot
from omni_vla_sim.experts import ScriptedExpert
from omni_vla_sim.remote import make_replanner


class Agent(Protocol):
    loop: Loop | None  # the assembled loop when the agent is the robot's policy
    latencies_ms: list[float]  # wall-clock inference times (empty for the expert and the cloud)
    boundaries: list[int]  # ticks at which a new chunk took over

    def act(self, obs: dict, tick: int) -> np.ndarray | None: ...

    def close(self) -> None: ...


class TimedRuntime:
    """Forwards to a shared runtime, recording wall-clock inference time; close() is a no-op (cached)."""

    def __init__(self, runtime: Any) -> None:
        self._rt = runtime
        self.latencies_ms: list[float] = []
        copy_runtime_shape(self, runtime)

    def encode_instruction(self, text: str) -> np.ndarray:
        return self._rt.encode_instruction(text)

    def infer(self, *args: Any) -> None:
        t0 = time.perf_counter()
        self._rt.infer(*args)
        self.latencies_ms.append((time.perf_counter() - t0) * 1e3)

    def close(self) -> None:
        pass


_runtimes: dict[tuple[str, str, int], Any] = {}


def shared_runtime(backend: str, bundle_dir: str, threads: int) -> Any:
    """One loaded runtime per (backend, bundle, threads) in this process: episodes reuse it."""
    key = (backend, str(bundle_dir), threads)
    if key not in _runtimes:
        _runtimes[key] = open_runtime(backend, str(bundle_dir), threads)
    return _runtimes[key]


def use_runtime(backend: str, bundle_dir: str, threads: int, runtime: Any) -> None:
    """Episodes of (backend, bundle, threads) in this process run `runtime` (a policy served by its own code,
    omni_vla_sim.served) instead of loading the bundle; released with the rest."""
    _runtimes[(backend, str(bundle_dir), threads)] = runtime


def release_runtimes() -> None:
    for runtime in _runtimes.values():
        runtime.close()
    _runtimes.clear()


class LoopAgent:
    """The robot's loop in simulated time: chunks arrive `delay_ticks` after their request."""

    def __init__(self, settings: Any, env: Any, seed: int) -> None:
        self.runtime = TimedRuntime(shared_runtime(settings.backend, str(settings.bundle_dir), settings.threads))
        self.latencies_ms = self.runtime.latencies_ms
        loop_settings = LoopSettings(rate_hz=env.config.control_hz, strategy=settings.strategy,
                                     execution_horizon=settings.execution_horizon,
                                     splice_blend_ticks=settings.splice_blend_ticks,
                                     command_accel_fraction=settings.command_accel_fraction,
                                     command_max_lead=list(settings.command_max_lead),
                                     joint_names=list(robot.JOINT_NAMES))  # the simulated robot's: a bundle for other joints is refused
        self.now = 0.0
        replanner = make_replanner(settings, env, lambda: self.now) if settings.replan else None
        inference = SyncInference(self.runtime, delay_ticks=settings.delay_ticks, period_s=loop_settings.period_s,
                                  seed=seed, noise_scale=settings.noise_scale)
        self.loop: Loop | None = build_loop(loop_settings, inference, replanner=replanner,
                                            limits=load_joint_limits(settings.joint_limits))
        self.boundaries: list[int] = []

    def act(self, obs: dict, tick: int) -> np.ndarray | None:
        loop = self.loop
        assert loop is not None
        before = loop.controller.counts["chunks"]
        self.now = tick * loop.settings.period_s
        action = loop.step(obs, tick)
        if loop.controller.counts["chunks"] != before:
            self.boundaries.append(tick)
        return action

    def close(self) -> None:
        if self.loop is not None and self.loop.replanner is not None:
            self.loop.replanner.close()  # the runtime is shared across episodes: it stays open


class ExpertAgent:
    """The privileged scripted expert (the suite's upper bound and the demonstrations' source)."""

    loop = None

    def __init__(self, env: Any) -> None:
        self.expert = ScriptedExpert(env)
        self.expert.reset()
        self.latencies_ms: list[float] = []
        self.boundaries: list[int] = []

    def act(self, obs: dict, tick: int) -> np.ndarray | None:
        return self.expert.act()

    def close(self) -> None:
        pass


class CloudAgent:
    """The whole policy behind an OpenPI server, on simulated time: a new plan whenever the current one
    is nearly spent (within the execution horizon of its end)."""

    loop = None

    def __init__(self, settings: Any, env: Any, seed: int) -> None:
        self.hz = env.config.control_hz
        self.horizon = settings.execution_horizon  # 0: re-plan with a quarter of the current plan left
        self.now = 0.0
        self.replanner = make_replanner(settings, env, lambda: self.now, stall=False)
        self.rows = np.zeros((0, 8))
        self.start = 0
        self.latencies_ms: list[float] = []
        self.boundaries: list[int] = []

    def act(self, obs: dict, tick: int) -> np.ndarray | None:
        self.now = tick / self.hz
        left = self.start + len(self.rows) - tick
        if left <= (self.horizon or len(self.rows) // 4) and self.replanner.release is None:
            self.replanner.request_plan("cloud policy")
        self.replanner.observe(obs, tick, self.now)
        plan = self.replanner.poll(self.now, tick)
        if plan is not None:
            self.rows, self.start = np.array(plan.actions), tick
        i = tick - self.start
        return self.rows[i] if 0 <= i < len(self.rows) else None

    def close(self) -> None:
        self.replanner.close()


def make_agent(settings: Any, env: Any, seed: int) -> Agent:
    """The agent `settings.backend` names (an omni_vla_sim.eval.EvalSettings)."""
    if settings.backend == "expert":
        return ExpertAgent(env)
    if settings.backend == "openpi":
        return CloudAgent(settings, env, seed)
    return LoopAgent(settings, env, seed)
