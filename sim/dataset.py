"""Demonstration datasets in the robomimic HDF5 layout, one file per episode.

One file per episode, written to a temporary name and renamed, so a crash never leaves a
corrupt episode; the reader checks the schema before anything trains on it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import cv2
import h5py
import numpy as np

from omni_vla_sim import robot

POLICY_IMAGE_SIZE = 64  # the reference policy's camera input (demonstrations are stored at this size)

FORMAT = "omni_vla.robomimic/1"
IMAGE_KEYS = ("front_rgb", "wrist_rgb")


@dataclass
class Episode:
    task: str
    instruction: str
    instruction_held_out: bool
    seed: int
    success: bool
    front: np.ndarray  # uint8 [T, S, S, 3]
    wrist: np.ndarray  # uint8 [T, S, S, 3]
    qpos: np.ndarray  # float32 [T, D]
    qvel: np.ndarray  # float32 [T, D]
    actions: np.ndarray  # float32 [T, D]

    def __len__(self) -> int:
        return len(self.actions)


class DatasetError(ValueError):
    """A dataset file does not follow the schema."""


def write_episode(path: str | Path, ep: Episode, joint_names: list[str]) -> Path:
    """Write one episode atomically (tmp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            data.attrs["format"] = FORMAT
            data.attrs["joint_names"] = json.dumps(joint_names)
            demo = data.create_group("demo_0")
            for key, value in (("task", ep.task), ("instruction", ep.instruction),
                               ("instruction_held_out", ep.instruction_held_out), ("seed", ep.seed),
                               ("success", ep.success), ("num_samples", len(ep))):
                demo.attrs[key] = value
            obs = demo.create_group("obs")
            obs.create_dataset("front_rgb", data=ep.front, compression="lzf", chunks=(1, *ep.front.shape[1:]))
            obs.create_dataset("wrist_rgb", data=ep.wrist, compression="lzf", chunks=(1, *ep.wrist.shape[1:]))
            obs.create_dataset("qpos", data=ep.qpos.astype(np.float32))
            obs.create_dataset("qvel", data=ep.qvel.astype(np.float32))
            demo.create_dataset("actions", data=ep.actions.astype(np.float32))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_episode(path: str | Path) -> Episode:
    """Load and schema-check one episode file; errors name the file and the field."""
    path = Path(path)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DatasetError(f"{path}: not a readable HDF5 file ({exc})") from exc
    with f:
        if f.get("data") is None or f["data"].attrs.get("format") != FORMAT:
            raise DatasetError(f"{path}: missing /data with format={FORMAT!r}")
        demo = f["data"].get("demo_0")
        if demo is None:
            raise DatasetError(f"{path}: missing /data/demo_0")
        for key in ("task", "instruction", "instruction_held_out", "seed", "success", "num_samples"):
            if key not in demo.attrs:
                raise DatasetError(f"{path}: /data/demo_0 lacks attribute {key!r}")
        n = int(demo.attrs["num_samples"])
        arrays = {}
        for key, dtype, ndim in (("obs/front_rgb", np.uint8, 4), ("obs/wrist_rgb", np.uint8, 4),
                                 ("obs/qpos", np.float32, 2), ("obs/qvel", np.float32, 2),
                                 ("actions", np.float32, 2)):
            if key not in demo:
                raise DatasetError(f"{path}: /data/demo_0/{key} is missing")
            arr = demo[key][()]
            if arr.dtype != dtype or arr.ndim != ndim or len(arr) != n:
                raise DatasetError(
                    f"{path}: /data/demo_0/{key} has dtype {arr.dtype} shape {arr.shape}; "
                    f"expected {np.dtype(dtype)} with {ndim} dims and {n} samples")
            arrays[key] = arr
        if arrays["obs/qpos"].shape[1] != arrays["actions"].shape[1]:
            raise DatasetError(f"{path}: qpos and actions disagree on the joint count")
        return Episode(
            task=str(demo.attrs["task"]), instruction=str(demo.attrs["instruction"]),
            instruction_held_out=bool(demo.attrs["instruction_held_out"]), seed=int(demo.attrs["seed"]),
            success=bool(demo.attrs["success"]), front=arrays["obs/front_rgb"], wrist=arrays["obs/wrist_rgb"],
            qpos=arrays["obs/qpos"], qvel=arrays["obs/qvel"], actions=arrays["actions"],
        )


def episode_files(root: str | Path) -> list[Path]:
    """Every episode file below `root`, in a stable order."""
    root = Path(root)
    if not root.exists():
        raise DatasetError(f"dataset directory {root} does not exist")
    return sorted(p for p in root.rglob("*.hdf5") if not p.name.startswith("."))


def iter_episodes(root: str | Path, successful_only: bool = True) -> Iterator[Episode]:
    for path in episode_files(root):
        ep = read_episode(path)
        if ep.success or not successful_only:
            yield ep


def write_records(path: Path, env, seed: int, ok: bool, records: list, image_size: int) -> Path:  # noqa: ANN001
    """(observation, expert action) pairs -> one dataset episode at the policy's image size."""
    size = (image_size, image_size)

    def small(key: str) -> np.ndarray:
        return np.stack([cv2.resize(o[key], size, interpolation=cv2.INTER_AREA) for o, _ in records])

    ep = Episode(
        task=env.task.name, instruction=env.instruction.text, instruction_held_out=env.instruction.held_out,
        seed=seed, success=ok, front=small("front"), wrist=small("wrist"),
        qpos=np.stack([o["qpos"] for o, _ in records]).astype(np.float32),
        qvel=np.stack([o["qvel"] for o, _ in records]).astype(np.float32),
        actions=np.stack([a for _, a in records]).astype(np.float32),
    )
    return write_episode(path, ep, list(robot.JOINT_NAMES))
