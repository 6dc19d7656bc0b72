"""Scripted experts closed-loop on every task, headless: success per task and an mp4 each.

The pre-policy README demo; the VLA demo (omni_vla_sim.demo) replaces it once a bundle ships.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import cv2
import numpy as np

from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.experts import ScriptedExpert
from omni_vla_sim.tasks import EVAL_SEED_BASE, TASKS


def write_video(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    """mp4 written to a temporary name then renamed (never a half-written video)."""
    import imageio.v2 as imageio  # optional: extra "sim" (imageio-ffmpeg), only when a video is written

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.mp4")
    try:
        with imageio.get_writer(tmp, fps=fps, codec="libx264", macro_block_size=1) as writer:
            for frame in frames:
                writer.append_data(frame)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_frames(path: Path, frames: list[np.ndarray], rows: int = 2, cols: int = 2) -> Path:
    """A PNG of rows x cols frames spread evenly over the episode (start to end), for reports that show no video;
    written to a temporary name then renamed."""
    picks = [frames[round(i * (len(frames) - 1) / (rows * cols - 1))] for i in range(rows * cols)]
    grid = np.vstack([np.hstack(picks[r * cols:(r + 1) * cols]) for r in range(rows)])
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    if not cv2.imwrite(str(tmp), cv2.cvtColor(grid, cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {tmp}")
    os.replace(tmp, path)
    return path


def overlay(front: np.ndarray, wrist: np.ndarray, lines: list[str], scale: int = 3) -> np.ndarray:
    """Side-by-side cameras, upscaled, with text lines (task, tick, ...) burnt in."""
    frame = np.ascontiguousarray(np.hstack([front, wrist]))
    frame = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
    for i, text in enumerate(lines):
        cv2.putText(frame, text, (6, 18 + 18 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    return frame


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla demo --expert", description=__doc__)
    p.add_argument("--episodes", type=int, default=3, help="per task")
    p.add_argument("--out", type=Path, default=Path("reports/expert_demo"))
    args = p.parse_args(argv)
    results = {}
    for task in sorted(TASKS):
        env = PandaTaskEnv(task, EnvConfig())
        wins, frames = 0, []
        for k in range(args.episodes):
            obs = env.reset(EVAL_SEED_BASE + k)
            expert = ScriptedExpert(env)
            expert.reset()
            done = False
            while not done:
                label = [f"{task} ep {k}", obs["instruction"], f"tick {env.steps}"]
                frames.append(overlay(obs["front"], obs["wrist"], label))
                obs, _, ok, truncated, _ = env.step(expert.act())
                done = ok or truncated
            wins += ok
        video = write_video(args.out / f"{task}.mp4", frames, env.config.control_hz)
        results[task] = {"successes": wins, "episodes": args.episodes, "video": str(video)}
        print(f"{task:22s} {wins}/{args.episodes}  {video}")
        env.close()
    (args.out / "summary.json").write_text(json.dumps(results, indent=2))
    return 0
