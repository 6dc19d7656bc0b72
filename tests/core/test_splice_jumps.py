"""The loop measures each chunk boundary: how far the action of the tick a chunk lands on moves from what the old
queue held for that tick. A policy whose k-th chunk is the constant k makes every jump exactly known."""
from __future__ import annotations

import numpy as np
import pytest

from omni_vla.cameras import CameraInput
from omni_vla.core.assembly import build_loop
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference

H, D = 6, 2


class Steps:
    """Chunk k (counted from 1) is k in every row and joint."""

    backend, horizon, action_dim, max_prefix, embedding_dim = "toy", H, D, 0, 1
    cameras = (CameraInput("front", 8, 8),)
    joint_names = ["a", "b"]

    def __init__(self) -> None:
        self.calls = 0

    def encode_instruction(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)

    def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:  # noqa: ANN001
        self.calls += 1
        out[:] = self.calls

    def close(self) -> None:
        pass


def run(strategy: str, ticks: int, drop_camera_at: int | None = None):  # noqa: ANN201
    loop = build_loop(LoopSettings(rate_hz=10, execution_horizon=3, strategy=strategy, joint_names=["a", "b"]),
                      SyncInference(Steps(), delay_ticks=2, period_s=0.1))
    for tick in range(ticks):
        now = 0.1 * tick
        obs = {"front": np.zeros((8, 8, 3), np.uint8), "qpos": np.zeros(D), "qvel": np.zeros(D), "instruction": "go",
               "stamps": {"front": now, "joints": now}}
        if tick == drop_camera_at:
            obs["front"] = None
        loop.step(obs, tick, now)
    return loop.controller


@pytest.mark.parametrize("strategy, jump", [("naive", 1.0), ("average", 0.7)])
def test_every_splice_onto_a_held_action_is_measured_as_the_change_at_that_tick(strategy: str, jump: float) -> None:
    c = run(strategy, 30)
    summary = c.jump_summary()
    assert summary["count"] == c.counts["chunks"] - 1  # the first chunk lands on an empty queue: no boundary
    assert summary["p50"] == pytest.approx(jump) and summary["max"] == pytest.approx(jump)
    assert c.status()["splice_jump"] == summary


def test_a_chunk_landing_after_a_hold_is_not_a_boundary() -> None:
    held = run("naive", 30, drop_camera_at=12)
    assert held.counts["holds"] >= 1
    assert held.jump_summary()["count"] == held.counts["chunks"] - 2  # the first one, and the first after the hold


def test_no_chunk_yet_reports_zero_jumps() -> None:
    c = run("naive", 1)
    assert c.jump_summary() == {"p50": 0.0, "p95": 0.0, "max": 0.0, "count": 0}
