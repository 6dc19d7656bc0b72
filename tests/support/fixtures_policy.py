"""Test fixtures: a synthetic demo dataset and a tiny exported bundle (was omni_vla_policies.testing).

Both are fixtures, not the reference policy: the dataset is a toy reaching task in the exact HDF5
contract (briefs/common.md) and the bundle is a small randomly initialised policy with made-up
normalisation statistics and random unit-vector instruction embeddings (no MiniLM load), exported
for real to ExecuTorch, ONNX and MNN so runtimes and the control loop can be tested end to end.

    from fixtures_policy import make_tiny_bundle
    bundle_dir = make_tiny_bundle(tmp_path / "bundle")      # ~10-20 s on 2 cores
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import torch

from omni_vla_policies.export import CHECKPOINT_FORMAT, export_bundle
from omni_vla_policies.model import ModelConfig, VLAPolicy
from omni_vla_policies.text_encoder import random_embeddings

JOINT_NAMES = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
HOME = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04], np.float32)
TASKS = {
    "pick_red": "pick up the red cube",
    "place_blue_on_green": "place the blue cube on the green cube",
    "stack_red_on_blue": "stack the red cube on the blue cube",
    "touch_yellow": "touch the yellow cube",
}
COLORS = {"pick_red": (220, 30, 30), "place_blue_on_green": (30, 30, 220), "stack_red_on_blue": (220, 30, 220),
          "touch_yellow": (230, 220, 30)}


def tiny_model_config(**overrides: object) -> ModelConfig:
    """A small ModelConfig: real I/O shapes (H=16, D=8, 64x64, 384-d), 3 Euler steps so export takes seconds."""
    base = dict(width=32, heads=2, prefix_layers=1, head_layers=1, mlp_ratio=2, cnn_channels=(8, 16, 16), num_steps=3,
                keypoints=4)
    base.update(overrides)
    return ModelConfig(**base)  # type: ignore[arg-type]


def _render(color: tuple[int, int, int], target: np.ndarray, size: int, wrist: bool, rng: np.random.Generator) -> np.ndarray:
    """A grey scene with one coloured square whose position encodes the reach target."""
    img = np.full((size, size, 3), 90, np.uint8)
    img += rng.integers(0, 8, img.shape, dtype=np.uint8)
    cx = int(np.clip((target[0] + 1) / 2 * size, 4, size - 5))
    cy = int(np.clip((target[1] + 1) / 2 * size, 4, size - 5))
    r = 7 if wrist else 4
    img[max(cy - r, 0):cy + r, max(cx - r, 0):cx + r] = color
    return img


def write_synthetic_dataset(out_dir: str | Path, episodes_per_task: int = 3, steps: int = 40, seed: int = 0,
                            size: int = 64, held_out_every: int = 0) -> Path:
    """Write one HDF5 file per episode in the omni_vla.robomimic/1 layout: a learnable toy reach.

    The expert moves joints 1-2 towards a target shown as a coloured square, other joints towards a
    task-specific offset, and closes the gripper halfway; actions are the next joint targets.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    k = 0
    for ti, (task, instruction) in enumerate(TASKS.items()):
        for e in range(episodes_per_task):
            target = rng.uniform(-0.8, 0.8, 2).astype(np.float32)
            goal = HOME.copy()
            goal[0] += target[0]
            goal[1] += target[1]
            goal[3] += 0.2 * ti
            q = HOME + rng.normal(0, 0.05, 8).astype(np.float32)
            q[7] = 0.04
            qs, acts, fronts, wrists = [], [], [], []
            for t in range(steps):
                g = goal.copy()
                g[7] = 0.04 if t < steps // 2 else 0.02
                a = (q + np.clip(g - q, -0.05, 0.05)).astype(np.float32)
                qs.append(q.copy())
                acts.append(a)
                fronts.append(_render(COLORS[task], target, size, False, rng))
                wrists.append(_render(COLORS[task], target * 0.5, size, True, rng))
                q = a + rng.normal(0, 0.002, 8).astype(np.float32)
            held = bool(held_out_every and (e + 1) % held_out_every == 0)
            path = out_dir / f"{task}_{e:03d}.hdf5"
            tmp = path.with_suffix(".hdf5.tmp")
            with h5py.File(tmp, "w") as f:
                data = f.create_group("data")
                data.attrs["format"] = "omni_vla.robomimic/1"
                data.attrs["joint_names"] = json.dumps(JOINT_NAMES)
                g = data.create_group("demo_0")
                g.attrs.update(task=task, instruction=("please " + instruction) if held else instruction,
                               instruction_held_out=held, seed=int(seed * 1000 + k), success=True, num_samples=steps)
                g.create_dataset("obs/front_rgb", data=np.stack(fronts))
                g.create_dataset("obs/wrist_rgb", data=np.stack(wrists))
                g.create_dataset("obs/qpos", data=np.stack(qs).astype(np.float32))
                g.create_dataset("obs/qvel", data=np.zeros((steps, 8), np.float32))
                g.create_dataset("actions", data=np.stack(acts))
            os.replace(tmp, path)
            k += 1
    return out_dir


def make_tiny_checkpoint(seed: int = 0, **config_overrides: object) -> dict:
    """In-memory checkpoint of a randomly initialised tiny policy with synthetic statistics."""
    torch.manual_seed(seed)
    cfg = tiny_model_config(**config_overrides)
    model = VLAPolicy(cfg).eval()  # type: ignore[arg-type]
    stats = {
        "state_mean": HOME.tolist(), "state_std": [0.3] * 7 + [0.01],
        "action_mean": [0.0] * 8, "action_std": [0.05] * 7 + [0.005],
    }
    model.norm.set(stats)
    texts = list(TASKS.values())
    return {
        "format": CHECKPOINT_FORMAT, "model_config": cfg.to_dict(), "state_dict": model.state_dict(),  # type: ignore[attr-defined]
        "normalization": stats, "joint_names": JOINT_NAMES, "control_rate_hz": 20.0,
        "instructions": texts, "instruction_embeddings": random_embeddings(texts, cfg.embedding_dim, seed),  # type: ignore[attr-defined]
        "seed": seed, "dataset_sha256": "synthetic", "steps": 0, "final_loss": None,
        "train_config": {"fixture": "tests/support/fixtures_policy.py:make_tiny_checkpoint"},
    }


def make_tiny_bundle(out_dir: str | Path, seed: int = 0, backends: tuple[str, ...] = ("executorch", "onnx", "mnn"),
                     **config_overrides: object) -> Path:
    """Export a tiny random policy to a real bundle directory (.pte, .onnx, .mnn, manifest.json)."""
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    return export_bundle(make_tiny_checkpoint(seed, **config_overrides), out_dir, backends=backends)


_BUNDLE_CACHE: dict[tuple, Path] = {}


def cached_tiny_bundle(root: str | Path, seed: int = 0) -> Path:
    """make_tiny_bundle once per process (pytest session) under `root`, even when several test
    modules each declare their own session fixture (exports take tens of seconds on 2 cores)."""
    key = (seed,)
    path = _BUNDLE_CACHE.get(key)
    if path is None or not (path / "manifest.json").is_file():
        path = make_tiny_bundle(Path(root) / f"tiny_bundle_{seed}", seed=seed)
        _BUNDLE_CACHE[key] = path
    return path
