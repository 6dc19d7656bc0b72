"""The one assembly of the loop: settings + an inference client (+ a re-planner) -> `Loop`.

vla_node, the evaluation suite and the loop benchmark all call `build_loop`, so the same checks
(the policy's joints against the settings', the execution horizon against the chunk length) and
the same tick run everywhere; what differs is only the inference client each passes in
(a worker process on the robot, a synchronous simulated-time client in evaluation) and who calls
the tick (the real-time Scheduler, or the simulator's clock).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import numpy as np

from omni_vla.core.controller import Controller
from omni_vla.core.perception import ObservationStore
from omni_vla.core.ports import InferenceClient
from omni_vla.core.settings import LoopSettings
from omni_vla.core.shaping import CommandShaper, JointRates, parse_max_lead
from omni_vla.core.snapshot import ObservationSnapshot


class Loop:
    """Controller + observation store + one preallocated command; `tick` is the lock-step tick."""

    def __init__(self, settings: LoopSettings, inference: InferenceClient, replanner: Any = None,
                 clock: Callable[[], float] = time.perf_counter, stamp_clock: Callable[[], float] | None = None,
                 rates: JointRates | None = None) -> None:
        """`clock`: the tick's time base (the Scheduler's); `stamp_clock`: the messages' (see ObservationStore);
        `rates`: the robot's velocity/acceleration limits in joint order, for command shaping (None: off)."""
        self.settings = settings
        self.inference = inference
        self.replanner = replanner
        self.controller = Controller(settings, inference, replanner=replanner)
        self._snapshot = ObservationSnapshot()
        self.store = ObservationStore(settings.joint_names, clock, stamp_clock, settings.max_future_stamp_s,
                                      cameras=[c.name for c in inference.cameras])
        self.command = np.zeros(len(settings.joint_names), np.float64)
        self.commands = 0
        lead = parse_max_lead(settings.command_max_lead, settings.joint_names)
        self.shaper: CommandShaper | None = None
        if settings.command_accel_fraction > 0 and rates is not None:
            self.shaper = CommandShaper(rates, settings.command_accel_fraction, settings.period_s, lead)

    def tick(self, k: int, t: float) -> np.ndarray | None:
        """Real time: a step on a copy of the newest observation, taken under the store's lock (callbacks write
        it), so no callback waits for the step."""
        return self.step(self._snapshot.take(self.store), k, t)

    def step(self, obs: dict, k: int, t: float | None = None) -> np.ndarray | None:
        """One tick on `obs`: the command (the loop's reused buffer) or None (hold, see controller.reason)."""
        counts = self.controller.counts
        starved = counts["starved_ticks"]
        action = self.controller.step(obs, k, t)
        if action is None:
            # A hold (or no chunk yet): shaped motion restarts from where the robot stops. A starved tick is not
            # a hold: the supervisor still follows the rows it has, so the shaper keeps its motion.
            if self.shaper is not None and counts["starved_ticks"] == starved:
                self.shaper.reset()
            return None
        if self.shaper is not None:
            action = self.shaper(action, obs["qpos"])
        np.copyto(self.command, action)
        self.commands += 1
        return self.command

    def update(self, settings: LoopSettings) -> None:
        """Apply a live settings change (LIVE_LOOP_SETTINGS; anything else raises ValueError)."""
        self.controller.update(settings)
        self.store.max_future_stamp_s = settings.max_future_stamp_s
        self.settings = settings

    def close(self) -> None:
        """Stop the re-planner and the inference client (idempotent in both)."""
        if self.replanner is not None:
            self.replanner.close()
        self.inference.close()


def check_joint_names(settings: LoopSettings, policy_joints: list[str]) -> None:
    """The settings' joints must be exactly the policy's (any order is not enough: it is the action order)."""
    if not policy_joints:
        return  # a runtime that does not name its joints (test doubles): the action count is still checked
    unknown = [n for n in settings.joint_names if n not in policy_joints]
    if unknown:
        raise ValueError(f"unknown joint names {unknown}; the policy's joints are {policy_joints}")
    if list(settings.joint_names) != list(policy_joints):
        raise ValueError(f"joint_names {settings.joint_names} must list the policy's joints in its order: "
                         f"{policy_joints}")


def build_loop(settings: LoopSettings, inference: InferenceClient, replanner: Any = None,
               clock: Callable[[], float] = time.perf_counter, stamp_clock: Callable[[], float] | None = None,
               limits: Mapping[str, Any] | None = None) -> Loop:
    """The assembled loop; refuses joints, horizons or shapes that do not fit the policy.

    A 0 rate or execution horizon in `settings` means the policy's own (its bundle's control rate and
    steps per chunk); `Loop.settings` holds the values the loop runs at. `limits`: the robot's joint limits
    file (joint name -> ros2_control fields), which command shaping needs (without it, shaping is off)."""
    settings = settings.for_policy(getattr(inference, "control_rate_hz", None), getattr(inference, "execute_steps", None))
    check_joint_names(settings, list(getattr(inference, "joint_names", None) or []))
    rates = None
    if limits is not None and settings.command_accel_fraction > 0:
        rates = JointRates.from_limits(limits, settings.joint_names)
    return Loop(settings, inference, replanner, clock, stamp_clock, rates)
