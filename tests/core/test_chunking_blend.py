"""'naive' with a crossfade (splice_blend_ticks): against an oracle that keeps the queue as a dict tick -> row and
blends by the documented formula, over random sequences of splices (so the swapped buffers are exercised)."""
from __future__ import annotations

import numpy as np
import pytest

from omni_vla.core.assembly import build_loop
from omni_vla.core.chunking import ChunkQueue
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference
from steps_policy import D, Steps


def oracle_splice(queue: dict[int, np.ndarray], chunk: np.ndarray, t0: int, t1: int, blend: int) -> dict:
    """The queue after a naive splice with crossfade, written from the docstring: rows for ticks >= t1 only."""
    out = {}
    for i in range(chunk.shape[0]):
        tick = t0 + i
        if tick < t1:
            continue
        k = tick - t1
        if k < blend and tick in queue:
            w = (blend - k) / (blend + 1)
            out[tick] = w * queue[tick] + (1 - w) * chunk[i]
        else:
            out[tick] = chunk[i].copy()
    return out


def queued(q: ChunkQueue) -> dict[int, np.ndarray]:
    row = np.zeros(q.action_dim)
    rows = {}
    for tick in range(q.start, q.end):
        assert q.action_at(tick, row)
        rows[tick] = row.copy()
    return rows


@pytest.mark.parametrize("seed", range(40))
def test_crossfade_matches_the_oracle_over_random_splice_sequences(seed: int) -> None:
    rng = np.random.default_rng(seed)
    h, d = int(rng.integers(2, 12)), int(rng.integers(1, 4))
    blend = int(rng.integers(0, h + 3))
    q, ref = ChunkQueue(h, d), {}
    tick = 0
    for _ in range(12):
        t0 = tick
        tick += int(rng.integers(0, h + 2))  # the chunk lands 0 .. h+1 ticks later (sometimes all stale)
        chunk = rng.standard_normal((h, d))
        kept = q.splice(chunk, t0, tick, "naive", blend=blend)
        want = oracle_splice(ref, chunk, t0, tick, blend)
        assert kept == len(want)
        if kept:
            ref = want
            got = queued(q)
            assert got.keys() == ref.keys()
            for t in ref:
                np.testing.assert_allclose(got[t], ref[t], rtol=0, atol=1e-12)


def test_blend_zero_is_plain_replacement_and_other_strategies_ignore_it() -> None:
    rng = np.random.default_rng(1)
    old, new = rng.standard_normal((6, 2)), rng.standard_normal((6, 2))
    for strategy in ("rtc", "average", "naive"):
        a, b = ChunkQueue(6, 2), ChunkQueue(6, 2)
        for q, blend in ((a, 0), (b, 4 if strategy != "naive" else 0)):
            q.splice(old, 0, 0, strategy)
            q.splice(new, 2, 3, strategy, blend=blend)
        assert queued(a).keys() == queued(b).keys()
        for t, row in queued(a).items():
            np.testing.assert_array_equal(row, queued(b)[t])


def test_a_jump_where_a_chunk_starts_is_spread_over_blend_plus_one_ticks() -> None:
    q = ChunkQueue(8, 1)
    q.splice(np.zeros((8, 1)), 0, 0, "naive")
    q.splice(np.ones((8, 1)), 2, 2, "naive", blend=3)
    rows = [r[0] for r in queued(q).values()]
    assert rows == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0])  # four equal steps of 0.25


def test_nothing_to_blend_from_an_empty_queue_or_past_its_end() -> None:
    q = ChunkQueue(4, 1)
    q.splice(np.ones((4, 1)), 0, 0, "naive", blend=3)  # start-up: no old rows
    assert [r[0] for r in queued(q).values()] == [1.0] * 4
    q.splice(np.full((4, 1), 5.0), 3, 3, "naive", blend=3)  # old rows only for tick 3
    assert [r[0] for r in queued(q).values()] == pytest.approx([0.75 * 1.0 + 0.25 * 5.0, 5.0, 5.0, 5.0])


def test_the_loop_crossfades_at_its_setting_and_measures_the_smaller_jump() -> None:
    """Chunk k is k everywhere (test_splice_jumps' toy): with 3 ticks of crossfade the landing tick moves 1/4."""
    loop = build_loop(LoopSettings(rate_hz=10, execution_horizon=3, strategy="naive", splice_blend_ticks=3,
                                   joint_names=["a", "b"]), SyncInference(Steps(), delay_ticks=2, period_s=0.1))
    for tick in range(30):
        obs = {"front": np.zeros((8, 8, 3), np.uint8), "qpos": np.zeros(D), "qvel": np.zeros(D), "instruction": "go",
               "stamps": {"front": 0.1 * tick, "joints": 0.1 * tick}}
        loop.step(obs, tick, 0.1 * tick)
    summary = loop.controller.jump_summary()
    assert summary["count"] >= 5 and summary["max"] == pytest.approx(0.25)


def test_the_strategy_is_compared_by_value_as_settings_read_from_yaml_give_it() -> None:
    """A strategy parsed from a params file is an equal string, not the same object as the literal."""
    naive = "".join(["na", "ive"])
    assert naive == "naive" and naive is not "naive"  # noqa: F632 - the point of the test
    q = ChunkQueue(8, 1)
    q.splice(np.zeros((8, 1)), 0, 0, naive)
    q.splice(np.ones((8, 1)), 2, 2, naive, blend=3)
    assert [r[0] for r in queued(q).values()][:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
