"""What a cloud reply must be before any of it can reach the robot, and the plan handed to the controller.

A reply is untrusted input: only a finite float32/float64 [H', D] array with 1 <= H' <= max_horizon
becomes a plan. Anything else raises PlanRejected naming what was wrong, and is dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ALLOWED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class PlanRejected(ValueError):
    """A reply that is not a usable action plan; the message says why."""


def extract_actions(reply: Any) -> tuple[Any, dict]:
    """(actions, timing) from an openpi reply dict {"actions": ...} or vLLM-Omni's bare array."""
    if isinstance(reply, np.ndarray):
        return reply, {}
    if isinstance(reply, dict):
        if "actions" not in reply:
            raise PlanRejected(f"reply dict has no 'actions' key (keys: {sorted(map(str, reply))[:8]})")
        timing = {k: reply[k] for k in ("server_timing", "policy_timing") if isinstance(reply.get(k), dict)}
        return reply["actions"], timing
    raise PlanRejected(f"reply must be a dict with 'actions' or an array, got {type(reply).__name__}")


def validate_actions(actions: Any, action_dim: int, max_horizon: int) -> np.ndarray:
    """The array itself if it is a finite float32/float64 [H', action_dim] plan, else PlanRejected."""
    if not isinstance(actions, np.ndarray):
        raise PlanRejected(f"actions must be an array, got {type(actions).__name__}")
    if actions.dtype not in ALLOWED_DTYPES:
        raise PlanRejected(f"actions dtype {actions.dtype} refused; allowed: float32, float64 (native byte order)")
    if actions.ndim != 2 or actions.shape[1] != action_dim:
        raise PlanRejected(f"actions shape {actions.shape} refused; expected [H, {action_dim}]")
    if not 1 <= actions.shape[0] <= max_horizon:
        raise PlanRejected(f"actions horizon {actions.shape[0]} outside 1..max_horizon={max_horizon}")
    if not np.isfinite(actions).all():
        rows = np.flatnonzero(~np.isfinite(actions).all(axis=1))
        raise PlanRejected(f"actions have non-finite values in rows {rows[:8].tolist()}")
    return actions


@dataclass(slots=True)
class ValidatedPlan:
    """Actions for ticks start_tick, start_tick+1, ... (row 0 is for the tick poll() was called at).

    `actions` is read-only (float32 or float64 [k, D]); copy or splice it, do not keep it past use.
    """

    actions: np.ndarray
    start_tick: int
    obs_tick: int  # tick at which the observation behind the plan was taken
    obs_time: float  # caller's clock at that tick
    age_s: float  # caller's clock: poll time - obs_time
    skipped: int  # rows dropped because their ticks had already passed
    reason: str  # trigger: stall, intervention, cadence, instruction, explicit
    request_id: int
    latency_s: float  # wall time from request hand-off to reply validated
    server_timing: dict = field(default_factory=dict)
