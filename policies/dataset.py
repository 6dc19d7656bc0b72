"""Demonstration dataset (robomimic-layout HDF5, contract in briefs/common.md) -> in-memory training arrays.

Reads with `omni_vla_sim.dataset.read_episodes` when the sim package provides it, else with the
small reader below (same format). Everything is held in RAM as uint8 images: ~50 MB per 1k steps x 2
cameras at 64x64, so a few hundred demos fit easily and batches are built without a DataLoader.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

FORMAT = "omni_vla.robomimic/1"


@dataclass
class Episode:
    """One demonstration, arrays as stored."""

    task: str
    instruction: str
    held_out: bool
    success: bool
    front: np.ndarray  # uint8 [T,64,64,3]
    wrist: np.ndarray  # uint8 [T,64,64,3]
    qpos: np.ndarray  # float32 [T,8]
    actions: np.ndarray  # float32 [T,8]


def _episode_files(root: Path) -> list[Path]:
    files = sorted(p for p in root.rglob("*") if p.suffix in (".hdf5", ".h5"))
    if not files:
        raise FileNotFoundError(f"no .hdf5/.h5 episode files under {root}")
    return files


def read_episodes(root: str | Path) -> tuple[list[Episode], list[str]]:
    """All demos under `root` and the joint names; refuses files of another format."""
    root = Path(root)
    episodes: list[Episode] = []
    joint_names: list[str] | None = None
    for path in _episode_files(root):
        with h5py.File(path, "r") as f:
            data = f["data"]
            fmt = data.attrs.get("format")
            if fmt != FORMAT:
                raise ValueError(f"{path}: dataset format {fmt!r}, expected {FORMAT!r}")
            names = json.loads(data.attrs["joint_names"])
            if joint_names is None:
                joint_names = names
            elif names != joint_names:
                raise ValueError(f"{path}: joint_names {names} differ from {joint_names}")
            for key in sorted(data.keys(), key=lambda k: int(k.split("_")[-1])):
                g = data[key]
                a = g.attrs
                episodes.append(Episode(
                    task=str(a["task"]), instruction=str(a["instruction"]),
                    held_out=bool(a.get("instruction_held_out", False)), success=bool(a.get("success", True)),
                    front=g["obs/front_rgb"][()], wrist=g["obs/wrist_rgb"][()],
                    qpos=g["obs/qpos"][()].astype(np.float32), actions=g["actions"][()].astype(np.float32),
                ))
    assert joint_names is not None
    return episodes, joint_names


def dataset_sha256(root: str | Path) -> str:
    """Content hash of every episode file (relative name + bytes), recorded in the checkpoint."""
    root = Path(root)
    h = hashlib.sha256()
    for path in _episode_files(root):
        h.update(str(path.relative_to(root)).encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


@dataclass
class TrainArrays:
    """Flattened steps with chunk indices; chunks past the episode end repeat its last action (hold)."""

    front: np.ndarray  # uint8 [N,64,64,3]
    wrist: np.ndarray
    state: np.ndarray  # float32 [N,D]
    chunks: np.ndarray  # float32 [N,H,D] raw absolute action chunks
    instr_index: np.ndarray  # int64 [N] -> row of `instructions`
    instructions: list[str] = field(default_factory=list)
    episode_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    future: np.ndarray | None = None  # float32 [N,K,D] joint positions at the auxiliary offsets
    task_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # int64 [N] -> row of `tasks`
    tasks: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.state)


def build_arrays(episodes: list[Episode], horizon: int, only_success: bool = True,
                 aux_offsets: tuple[int, ...] = ()) -> TrainArrays:
    """Stack episodes into per-step training samples.

    Demos whose instruction is held out keep their trajectory but are trained under another
    (non-held-out) instruction of the same task, so held-out phrasings stay unseen; tasks with no
    training phrasing are dropped.
    """
    train_phrases: dict[str, list[str]] = {}
    for ep in episodes:
        if not ep.held_out and ep.instruction not in train_phrases.setdefault(ep.task, []):
            train_phrases[ep.task].append(ep.instruction)
    instructions = sorted({p for ps in train_phrases.values() for p in ps})
    idx_of = {s: i for i, s in enumerate(instructions)}
    tasks = sorted(train_phrases)
    task_of_name = {t: i for i, t in enumerate(tasks)}
    fronts, wrists, states, chunks, instr, epi, task_of, future = [], [], [], [], [], [], [], []
    for k, ep in enumerate(episodes):
        if only_success and not ep.success:
            continue
        phrases = train_phrases.get(ep.task, [])
        if not phrases:
            continue
        phrase = ep.instruction if not ep.held_out else phrases[k % len(phrases)]
        t_len = len(ep.actions)
        rows = np.minimum(np.arange(t_len)[:, None] + np.arange(horizon)[None, :], t_len - 1)
        fronts.append(ep.front)
        wrists.append(ep.wrist)
        states.append(ep.qpos)
        chunks.append(ep.actions[rows])
        instr.append(np.full(t_len, idx_of[phrase], np.int64))
        epi.append(np.full(t_len, k, np.int64))
        task_of.append(np.full(t_len, task_of_name[ep.task], np.int64))
        if aux_offsets:
            steps = np.arange(t_len)[:, None]
            ahead = np.array([t_len - 1 if o < 0 else o for o in aux_offsets])[None, :]
            at = np.where(ahead == t_len - 1, t_len - 1, np.minimum(steps + ahead, t_len - 1))
            future.append(ep.qpos[at])
    if not states:
        raise ValueError("no usable (successful, non-held-out-task) demonstrations in the dataset")
    return TrainArrays(
        front=np.concatenate(fronts), wrist=np.concatenate(wrists), state=np.concatenate(states),
        chunks=np.concatenate(chunks), instr_index=np.concatenate(instr), instructions=instructions,
        episode_index=np.concatenate(epi), future=np.concatenate(future) if aux_offsets else None,
        task_index=np.concatenate(task_of), tasks=tasks,
    )


def normalization_stats(arr: TrainArrays, action_mode: str, min_std: float = 1e-3) -> dict[str, list[float]]:
    """Per-dim mean/std of the state and of the (delta or absolute) action chunk targets."""
    act = arr.chunks - arr.state[:, None, :] if action_mode == "delta" else arr.chunks
    act = act.reshape(-1, act.shape[-1]).astype(np.float64)
    st = arr.state.astype(np.float64)
    return {
        "state_mean": st.mean(0).tolist(), "state_std": np.maximum(st.std(0), min_std).tolist(),
        "action_mean": act.mean(0).tolist(), "action_std": np.maximum(act.std(0), min_std).tolist(),
    }
