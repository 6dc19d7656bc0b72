"""The loop measures each chunk boundary: how far the action of the tick a chunk lands on moves from what the old
queue held for that tick. A policy whose k-th chunk is the constant k makes every jump exactly known.

With equal jumps at every boundary the
percentiles, the ring of recent jumps and the largest-since-start are indistinguishable, so here every boundary
moves by a different, exactly representable amount (sixty-fourths), in alternating directions, and joint b moves
twice as far as joint a, so the jump is the largest |change| over the joints.
"""
from __future__ import annotations

import numpy as np
import pytest

from omni_vla.cameras import CameraInput
from omni_vla.core.assembly import build_loop
from omni_vla.core.controller import Controller
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference
from steps_policy import D, H, Steps


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


# |change of joint a| at the boundary onto chunk k + 2, in 1/64: the first is the largest, the rest grow
STEPS = [28, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


class Jumps:
    """Chunk k (from 1) holds v_k on joint a and -2 v_k on joint b; v_1 = 0, v_k - v_(k-1) = (-1)^k STEPS[k-2]/64."""

    backend, horizon, action_dim, max_prefix, embedding_dim = "toy", H, D, 0, 1
    cameras = (CameraInput("front", 8, 8),)
    joint_names = ["a", "b"]

    def __init__(self) -> None:
        self.calls, self.value = 0, 0.0

    def encode_instruction(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)

    def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:  # noqa: ANN001
        self.calls += 1
        if self.calls > 1:
            self.value += (-1) ** self.calls * STEPS[self.calls - 2] / 64
        out[:, 0], out[:, 1] = self.value, -2 * self.value

    def close(self) -> None:
        pass


def run_until(chunks: int, window: int = 4) -> Controller:
    loop = build_loop(LoopSettings(rate_hz=10, execution_horizon=3, strategy="naive", joint_names=["a", "b"],
                                   latency_window=window), SyncInference(Jumps(), delay_ticks=2, period_s=0.1))
    for tick in range(200):
        now = 0.1 * tick
        loop.step({"front": np.zeros((8, 8, 3), np.uint8), "qpos": np.zeros(D), "qvel": np.zeros(D),
                   "instruction": "go", "stamps": {"front": now, "joints": now}}, tick, now)
        if loop.controller.counts["chunks"] == chunks:
            return loop.controller
    raise AssertionError(f"only {loop.controller.counts['chunks']} chunks in 200 ticks")


def test_percentiles_are_of_the_last_window_of_jumps_and_the_maximum_is_since_start() -> None:
    c = run_until(chunks=7)  # 6 boundaries: 2 * (28, 1, 2, 3, 4, 5) / 64; the window keeps the last 4
    assert c.jump_summary() == {"p50": 2 * 4 / 64, "p95": 2 * 5 / 64, "max": 2 * 28 / 64, "count": 6}


def test_the_window_of_jumps_wraps_round_for_ever() -> None:
    c = run_until(chunks=14)  # 13 boundaries, more than three times the window of 4: last four 2 * (9..12) / 64
    assert c.jump_summary() == {"p50": 2 * 11 / 64, "p95": 2 * 12 / 64, "max": 2 * 28 / 64, "count": 13}


def test_a_single_boundary_is_every_percentile_and_the_maximum() -> None:
    c = run_until(chunks=2, window=32)
    assert c.jump_summary() == {"p50": 2 * 28 / 64, "p95": 2 * 28 / 64, "max": 2 * 28 / 64, "count": 1}


def test_a_window_not_yet_full_uses_only_the_jumps_measured() -> None:
    c = run_until(chunks=4, window=32)  # 3 boundaries: 2 * (28, 1, 2) / 64 and 29 unused zeros in the window
    assert c.jump_summary() == {"p50": 2 * 2 / 64, "p95": 2 * 28 / 64, "max": 2 * 28 / 64, "count": 3}


def test_the_median_of_an_even_count_of_jumps_is_the_upper_middle_one() -> None:
    c = run_until(chunks=7, window=8)  # 6 boundaries, sorted 2 * (1, 2, 3, 4, 5, 28) / 64
    assert c.jump_summary() == {"p50": 2 * 4 / 64, "p95": 2 * 28 / 64, "max": 2 * 28 / 64, "count": 6}
