"""Recovery demonstrations: the trained policy drives, then the scripted expert takes over.

Behaviour cloning only ever sees the expert's own states, so a policy that drifts a little off
them has no example of how to come back (the compounding-error problem DAgger addresses). Here the
policy runs closed loop for a random number of ticks, the expert resumes the task from wherever
that left the scene (`resume_plan` drops the waypoints already done) and, if it succeeds, the
expert's part is written as an ordinary episode: observations the policy caused, expert actions.

Two handover rules. `random`: a seeded tick, so most handovers land in states the policy was handling
fine. `failure`: the policy drives until it shows a failure sign (a missed grasp, a stall, or no success by
the latest handover tick), so every recovery starts where this policy actually goes wrong.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from omni_vla_sim.agents import make_agent
from omni_vla_sim.dataset import write_records
from omni_vla_sim.eval import EvalSettings, episode_env
from omni_vla_sim.experts import ScriptedExpert
from omni_vla_sim.oracle import resume_plan
from omni_vla_sim.tasks import get_task

RECOVERY_SEED_BASE = 500_000  # after the demonstrations' seeds, below tasks.EVAL_SEED_BASE
MIN_HANDOVER = 10  # ticks of policy before the expert may take over
MAX_HANDOVER_FRACTION = 0.75  # of the task's max_steps
HANDOVERS = ("random", "failure")
MISSED_OPENING = 0.01  # m per finger: closed past the cube's half width (0.02) with nothing held
STALL_TICKS = 20  # 1 s at 20 Hz ...
STALL_M = 0.01  # ... with the grip site inside this radius


class FailureWatch:
    """Per-tick failure signs on privileged sim state; `check` names the first one it sees, else None."""

    def __init__(self, task: str) -> None:
        self.obj = get_task(task).grasped_object  # a task that grasps nothing has no missed grasp
        self.grips: list[np.ndarray] = []

    def check(self, w: Any) -> str | None:
        self.grips.append(np.asarray(w.grip, float).copy())
        if self.obj is not None and w.gripper_opening < MISSED_OPENING and self.obj not in w.holding:
            return "missed_grasp"
        if len(self.grips) > STALL_TICKS:
            recent = np.asarray(self.grips[-STALL_TICKS - 1:])
            if np.linalg.norm(recent - recent[-1], axis=1).max() < STALL_M:
                return "stall"
        return None


def recover_one(args: tuple[str, int, str, int, str, str, str]) -> tuple[str, int, bool, int, str]:
    """(task, seed, out_dir, image_size, backend, bundle, handover rule)
    -> (task, seed, written, handover tick, why the expert took over)."""
    task, seed, out_dir, image_size, backend, bundle, rule = args
    if rule not in HANDOVERS:
        raise ValueError(f"handover rule {rule!r}: expected one of {HANDOVERS}")
    # Zero delay and unshaped rows, as the recipe has always driven it (eval's defaults follow the node's).
    settings = EvalSettings(backend=backend, bundle_dir=Path(bundle), tasks=(task,), episodes=1, strategy="naive",
                            delay_ticks=0, command_accel_fraction=0.0)
    env = episode_env(settings, task)
    obs = env.reset(seed, task=task)
    max_steps = env.task.max_steps
    latest = int(MAX_HANDOVER_FRACTION * max_steps)
    handover = random.Random(seed).randint(MIN_HANDOVER, latest) if rule == "random" else latest
    reason = "random" if rule == "random" else "timeout"
    watch = FailureWatch(task) if rule == "failure" else None
    agent = make_agent(settings, env, seed)
    lo, hi = env._ctrl_lo, env._ctrl_hi
    hold = obs["qpos"].copy()
    tick = 0
    while tick < handover:
        proposal = agent.act(obs, tick)
        if proposal is not None:
            hold = np.clip(np.asarray(proposal, np.float64), lo, hi)
        obs, _, ok, _, _ = env.step(hold)
        tick += 1
        if ok:
            return task, seed, False, tick, "policy_succeeded"  # nothing to recover
        sign = watch.check(env.world_state()) if watch is not None and tick >= MIN_HANDOVER else None
        if sign is not None:
            handover, reason = tick, sign
    expert = ScriptedExpert(env)
    expert.reset()
    expert.plan = resume_plan(env, expert.plan)
    records: list[tuple[dict[str, Any], np.ndarray]] = []
    ok = False
    for _ in range(max_steps):
        action = expert.act()
        records.append((obs, action))
        obs, _, ok, _, _ = env.step(action)
        if ok:
            break
    if not ok:
        return task, seed, False, handover, reason
    write_records(Path(out_dir) / task / f"{task}_recovery_{seed:07d}.hdf5", env, seed, True, records, image_size)
    return task, seed, True, handover, reason
