"""Recovery demonstrations: the trained policy drives, then the scripted expert takes over.

Behaviour cloning only ever sees the expert's own states, so a policy that drifts a little off
them has no example of how to come back (the compounding-error problem DAgger addresses). Here the
policy runs closed loop for a random number of ticks, the expert resumes the task from wherever
that left the scene (`resume_plan` drops the waypoints already done) and, if it succeeds, the
expert's part is written as an ordinary episode: observations the policy caused, expert actions.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

RECOVERY_SEED_BASE = 500_000  # after the demonstrations' seeds, below tasks.EVAL_SEED_BASE
MIN_HANDOVER = 10  # ticks of policy before the expert may take over
MAX_HANDOVER_FRACTION = 0.75  # of the task's max_steps


def recover_one(args: tuple[str, int, str, int, str, str]) -> tuple[str, int, bool, int]:
    """(task, seed, out_dir, image_size, backend, bundle) -> (task, seed, written, handover tick)."""
    task, seed, out_dir, image_size, backend, bundle = args
    from omni_vla.openpi.oracle import resume_plan
    from omni_vla_sim.collect import write_records
    from omni_vla_sim.eval import EvalSettings, _env, _policy
    from omni_vla_sim.experts import ScriptedExpert

    settings = EvalSettings(backend=backend, bundle_dir=Path(bundle), tasks=(task,), episodes=1)
    env = _env(settings, task)
    obs = env.reset(seed, task=task)
    max_steps = env.task.max_steps
    handover = random.Random(seed).randint(MIN_HANDOVER, int(MAX_HANDOVER_FRACTION * max_steps))
    act, _ = _policy(settings, env, seed)
    lo, hi = env._ctrl_lo, env._ctrl_hi
    hold = obs["qpos"].copy()
    for tick in range(handover):
        proposal = act(obs, tick)
        if proposal is not None:
            hold = np.clip(np.asarray(proposal, np.float64), lo, hi)
        obs, _, ok, _, _ = env.step(hold)
        if ok:
            return task, seed, False, tick  # the policy did it alone: nothing to recover
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
        return task, seed, False, handover
    write_records(Path(out_dir) / task / f"{task}_recovery_{seed:07d}.hdf5", env, seed, True, records, image_size)
    return task, seed, True, handover
