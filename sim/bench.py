"""`omni-vla bench sim`: physics and render cost, and expert success, as JSON."""
from __future__ import annotations

import argparse
import json
import os
import time

import mujoco
import numpy as np

from omni_vla.tools.errors import positive_int
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.experts import run_episode
from omni_vla_sim.tasks import EVAL_SEED_BASE, TASKS


def _stats_ms(samples: list[float]) -> dict[str, float]:
    arr = np.asarray(samples) * 1e3
    return {"median": round(float(np.median(arr)), 4), "p99": round(float(np.percentile(arr, 99)), 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla bench sim", description=__doc__)
    p.add_argument("--json", action="store_true")
    p.add_argument("--image-size", type=positive_int, default=128)
    p.add_argument("--repetitions", type=positive_int, default=300)
    p.add_argument("--seeds", type=positive_int, default=100, help="expert episodes per task")
    args = p.parse_args(argv)

    env = PandaTaskEnv("pick_red", EnvConfig(image_size=args.image_size))
    env.reset(0)
    step_s, control_s, render_s = [], [], {"front": [], "wrist": []}
    for i in range(args.repetitions):
        t0 = time.perf_counter()
        mujoco.mj_step(env.model, env.data)
        step_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        mujoco.mj_step(env.model, env.data, nstep=env.n_substeps)
        control_s.append(time.perf_counter() - t0)
        for cam in render_s:
            t0 = time.perf_counter()
            env.render(cam)
            render_s[cam].append(time.perf_counter() - t0)
    frame = env.render("front")
    env.close()

    success: dict[str, float] = {}
    for task in sorted(TASKS):
        tenv = PandaTaskEnv(task, EnvConfig(render=False))
        wins = sum(run_episode(tenv, EVAL_SEED_BASE + s)[0] for s in range(args.seeds))
        success[task] = wins / args.seeds
    all_render = render_s["front"] + render_s["wrist"]
    report = {
        "render_ms": _stats_ms(all_render),
        "render_ms_per_camera": {cam: _stats_ms(v) for cam, v in render_s.items()},
        "step_ms": _stats_ms(step_s),
        "control_step_ms": {**_stats_ms(control_s), "physics_substeps": env.n_substeps},
        "expert_success": success,
        "settings": {
            "image_size": args.image_size, "repetitions": args.repetitions, "expert_seeds": args.seeds,
            "MUJOCO_GL": os.environ.get("MUJOCO_GL"), "mujoco": mujoco.__version__,
            "frame_mean": round(float(frame.mean()), 2), "threads": 1,
        },
    }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0
