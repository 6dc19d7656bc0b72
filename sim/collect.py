"""`omni-vla collect`: scripted-expert demonstrations -> dataset, in parallel spawned workers."""
from __future__ import annotations

import argparse
import multiprocessing as mp
from collections import Counter
from pathlib import Path

import numpy as np
from tqdm import tqdm

from omni_vla.backends import LOOP_BACKENDS
from omni_vla.tools.errors import positive_int
from omni_vla_sim.dataset import POLICY_IMAGE_SIZE, write_records
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.experts import run_episode
from omni_vla_sim.recovery import RECOVERY_SEED_BASE, recover_one
from omni_vla_sim.tasks import CUBE_HALF, EVAL_SEED_BASE, TASKS, get_task

DEMO_SEED_BASE = 0  # evaluation seeds start at tasks.EVAL_SEED_BASE, never overlapping


def _collect_one(args: tuple[str, int, str, int, tuple[float, float] | None]) -> tuple[str, int, bool, int]:
    task, seed, out_dir, image_size, offsets = args
    env = _env_cache.get(task)
    if env is None:
        env = _env_cache[task] = PandaTaskEnv(task, EnvConfig())
    offset = grasp_offset(seed, offsets) if offsets else 0.0
    ok, steps, records = run_episode(env, seed, record=True, grasp_offset=offset)
    if not records:  # an off-centre grasp that never held the cube: there is no correction to record
        return task, seed, False, steps
    write_records(Path(out_dir) / task / episode_name(task, seed, offsets is not None), env, seed, ok, records,
                  image_size)
    return task, seed, ok, steps


def grasp_offset(seed: int, offsets: tuple[float, float]) -> float:
    """A seeded off-centre grasp: magnitude uniform in [lo, hi] m, either sign."""
    rng = np.random.default_rng(seed)
    return float(rng.choice([-1.0, 1.0]) * rng.uniform(*offsets))


def episode_name(task: str, seed: int, off_centre: bool) -> str:
    return f"{task}_{'offcentre_' if off_centre else ''}{seed:07d}.hdf5"


_env_cache: dict = {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla collect", description=__doc__)
    p.add_argument("--out", type=Path, default=Path("data/demos"))
    p.add_argument("--tasks", nargs="+", default=sorted(TASKS), choices=sorted(TASKS), metavar="TASK",
                   help=f"one or more of {', '.join(sorted(TASKS))}")
    p.add_argument("--episodes", type=positive_int, default=200, help="per task")
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--image-size", type=positive_int, default=POLICY_IMAGE_SIZE)
    p.add_argument("--recovery", type=Path, metavar="BUNDLE",
                   help="recovery demonstrations: this bundle's policy drives, the expert takes over (sim/recovery.py)")
    p.add_argument("--backend", choices=LOOP_BACKENDS, default="mnn", help="with --recovery")
    p.add_argument("--handover", choices=("random", "failure"), default="random",
                   help="with --recovery: expert takes over at a seeded random tick, or at the policy's first failure sign")
    p.add_argument("--first-seed", type=int, default=None,
                   help="with --recovery: seeds start here (default recovery.RECOVERY_SEED_BASE); a new round, new seeds")
    p.add_argument("--grasp-offset", type=float, nargs=2, metavar=("LO", "HI"),
                   help="correction demonstrations (place and stack only): the expert grasps |LO..HI| m off-centre "
                        "along the fingers and only the carry and placement are recorded")
    args = p.parse_args(argv)
    if args.recovery is not None:
        return _collect_recovery(args)
    offsets = None
    if args.grasp_offset is not None:
        offsets = tuple(args.grasp_offset)
        if not 0 < offsets[0] <= offsets[1] < 2 * CUBE_HALF:
            raise SystemExit(f"--grasp-offset {offsets}: need 0 < LO <= HI < 0.04 m (a cube is 0.04 m wide)")
        args.tasks = [t for t in args.tasks if get_task(t).placed_object is not None]
    jobs = [
        (t, DEMO_SEED_BASE + s, str(args.out), args.image_size, offsets)
        for s in range(args.episodes) for t in args.tasks
        if not (args.out / t / episode_name(t, DEMO_SEED_BASE + s, offsets is not None)).exists()
    ]
    ok = 0
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for _, _, success, _ in tqdm(pool.imap_unordered(_collect_one, jobs), total=len(jobs), desc="collect"):
            ok += success
    print(f"collected {len(jobs)} episodes into {args.out} ({ok} successful)")
    return 0


def _collect_recovery(args) -> int:
    if not (args.recovery / "manifest.json").is_file():
        raise SystemExit(f"--recovery {args.recovery}: no bundle there (manifest.json missing)")
    first = RECOVERY_SEED_BASE if args.first_seed is None else args.first_seed
    if not RECOVERY_SEED_BASE <= first < EVAL_SEED_BASE - args.episodes:
        raise SystemExit(f"--first-seed {first}: recovery seeds must lie in [{RECOVERY_SEED_BASE}, {EVAL_SEED_BASE}) "
                         "(below: demonstrations; above: evaluation)")
    jobs = [(t, first + s, str(args.out), args.image_size, args.backend, str(args.recovery), args.handover)
            for s in range(args.episodes) for t in args.tasks
            if not (args.out / t / f"{t}_recovery_{first + s:07d}.hdf5").exists()]
    written, reasons = 0, Counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for _, _, ok, _, reason in tqdm(pool.imap_unordered(recover_one, jobs), total=len(jobs), desc="recover"):
            written += ok
            reasons[f"{reason}:{'written' if ok else 'not written'}"] += 1
    print(f"ran {len(jobs)} recovery episodes, wrote {written} into {args.out} "
          f"(the rest: the policy succeeded alone or the expert could not recover); handovers: {dict(reasons)}")
    return 0
