"""Recovery rounds inside one training run: the policy being trained makes its own recovery data.

Why: the first shipped weights came from a lineage (a base, then rounds fine-tuned on recovery episodes the
previous round's policy generated, then their mean), about 4.5 h of separate commands. Here the same
loop runs inside `omni-vla train`: at the end of each cosine cycle but the last, the current EMA weights
drive the simulator (`sim/recovery.py`: the policy drives, the expert takes over and finishes), and the
episodes it writes join the training rows of the next cycle. The training clock pauses while episodes
are collected; the summary states both times.
"""
from __future__ import annotations

import multiprocessing as mp
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np

from omni_vla_policies.dataset import TrainArrays, build_arrays, dataset_sha256, read_episodes
from omni_vla_policies.export import export_bundle
from omni_vla_sim.recovery import RECOVERY_SEED_BASE, recover_one
from omni_vla_sim.tasks import EVAL_SEED_BASE

ROUND_SEED_STRIDE = 20_000  # recovery seeds of round k start at RECOVERY_SEED_BASE + k * stride


def round_seeds(round_index: int, episodes: int) -> range:
    """Seeds of one round: disjoint between rounds, inside the recovery range (never demo or evaluation seeds)."""
    if episodes > ROUND_SEED_STRIDE:
        raise ValueError(f"recovery_episodes {episodes}: at most {ROUND_SEED_STRIDE} per task and round")
    first = RECOVERY_SEED_BASE + round_index * ROUND_SEED_STRIDE
    if first + episodes > EVAL_SEED_BASE:
        raise ValueError(f"recovery round {round_index}: seeds would reach the evaluation range ({EVAL_SEED_BASE}+)")
    return range(first, first + episodes)


def collect_round(ckpt: dict, work: Path, round_index: int, episodes: int, tasks: list[str], handover: str,
                  workers: int) -> dict:
    """Export `ckpt` as a PyTorch-only bundle under `work` and run one round of recovery episodes with it.

    Episodes are written at the model's image size. Returns counts and the directory the written
    episodes are in (`episodes_dir`).
    """
    t0 = time.monotonic()
    bundle = export_bundle(ckpt, work / "bundle", backends=())
    out = work / "episodes"
    shutil.rmtree(out, ignore_errors=True)  # a rerun into the same directory must not train on the last run's episodes
    size = int(ckpt["model_config"]["image_size"])
    jobs = [(t, s, str(out), size, "torch", str(bundle), handover) for s in round_seeds(round_index, episodes) for t in tasks]
    reasons: Counter[str] = Counter()
    per_task = {t: {"ran": 0, "policy_succeeded": 0, "written": 0} for t in tasks}
    with mp.get_context("spawn").Pool(workers) as pool:
        for task, _, ok, _, reason in pool.imap_unordered(recover_one, jobs):
            reasons[reason] += 1
            counts = per_task[task]
            counts["ran"] += 1
            counts["written"] += ok
            counts["policy_succeeded"] += reason == "policy_succeeded"
    return {"round": round_index, "ran": len(jobs), "written": sum(c["written"] for c in per_task.values()),
            "handovers": dict(reasons), "per_task": per_task, "episodes_dir": str(out),
            "minutes": round((time.monotonic() - t0) / 60, 2)}


def focus_weights(per_task: dict[str, dict[str, int]], focus: float) -> dict[str, float]:
    """Batch-row shares for the next cycle: `1 - focus` spread evenly, `focus` in proportion to each task's
    failures in the round (episodes the policy did not finish alone).

    Why: one seed of the same hour lagged on place (57%), another on stack (75%); the round has just measured
    where this run's policy fails, so the next cycle trains more on that task instead of a fixed split.
    With the `failure` handover a failure is the policy's own; with `random` it also counts early handovers.
    """
    if not 0.0 <= focus < 1.0:  # at 1 a task the policy always finished would get no rows at all
        raise ValueError(f"recovery_focus {focus}: expected a share in [0, 1)")
    if any(c["ran"] <= 0 for c in per_task.values()):
        raise ValueError(f"a task ran no episode in the round: {per_task}")
    failures = {t: 1.0 - c["policy_succeeded"] / c["ran"] for t, c in per_task.items()}
    total = sum(failures.values())
    even = 1.0 / len(per_task)
    if total == 0.0:
        return {t: even for t in per_task}
    return {t: (1.0 - focus) * even + focus * f / total for t, f in failures.items()}


def add_round_rows(arr: TrainArrays, held_out: list[str], ckpt: dict, info: dict, horizon: int,
                   aux_offsets: tuple[int, ...]) -> tuple[TrainArrays, list[str], np.ndarray]:
    """`arr` grown by the round's written episodes, with the instruction table and its embeddings to match.

    Embeddings come from the round checkpoint's table (`ckpt`, which holds every phrasing of the task
    suite), so a phrasing the demonstrations lacked is embedded exactly as the robot would. Fills
    `info["samples_added"]` and, when anything was written, `info["episodes_sha256"]`.
    """
    episodes_dir = Path(info["episodes_dir"])
    info["samples_added"] = 0
    if episodes_dir.is_dir() and any(episodes_dir.rglob("*.hdf5")):  # else the policy left nothing to recover
        episodes, _ = read_episodes(episodes_dir)
        new = build_arrays(episodes, horizon, only_success=True, aux_offsets=aux_offsets)
        info["samples_added"], info["episodes_sha256"] = len(new), dataset_sha256(episodes_dir)
        arr = append_arrays(arr, new)
    table = arr.instructions + [h for h in held_out if h not in arr.instructions]
    lookup = dict(zip(ckpt["instructions"], ckpt["instruction_embeddings"]))
    return arr, table, np.stack([lookup[s] for s in table]).astype(np.float32)


def append_arrays(arr: TrainArrays, new: TrainArrays) -> TrainArrays:
    """`arr` followed by `new`, with `new`'s instruction, task and episode indices mapped into `arr`'s tables.

    Phrases `arr` has not seen are appended to its instruction list (the caller embeds them); a task
    `arr` does not have is refused, since the batch balancing and the statistics know only `arr`'s tasks.
    """
    unknown = sorted(set(new.tasks) - set(arr.tasks))
    if unknown:
        raise ValueError(f"recovery episodes of tasks {unknown} that the dataset does not have ({arr.tasks})")
    instructions = arr.instructions + [s for s in new.instructions if s not in arr.instructions]
    instr_map = np.array([instructions.index(s) for s in new.instructions], np.int64)
    task_map = np.array([arr.tasks.index(t) for t in new.tasks], np.int64)
    if (arr.future is None) != (new.future is None):
        raise ValueError("recovery rows and dataset rows disagree on auxiliary future targets")
    return TrainArrays(
        front=np.concatenate([arr.front, new.front]), wrist=np.concatenate([arr.wrist, new.wrist]),
        state=np.concatenate([arr.state, new.state]), chunks=np.concatenate([arr.chunks, new.chunks]),
        instr_index=np.concatenate([arr.instr_index, instr_map[new.instr_index]]), instructions=instructions,
        episode_index=np.concatenate([arr.episode_index, new.episode_index + int(arr.episode_index.max()) + 1]),
        future=None if arr.future is None else np.concatenate([arr.future, new.future]),
        task_index=np.concatenate([arr.task_index, task_map[new.task_index]]), tasks=arr.tasks,
    )
