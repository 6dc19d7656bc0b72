"""Chunk queue on absolute ticks: time alignment, the three splice strategies, RTC prefix pinning."""
from __future__ import annotations

import numpy as np
import pytest

from omni_vla.core.chunking import ChunkQueue, rtc_prefix

H, D = 16, 8


def chunk(base: float) -> np.ndarray:
    """Row i holds base + i in every joint: values say which chunk and row an action came from."""
    return (base + np.arange(H, dtype=np.float32))[:, None] * np.ones((1, D), np.float32)


def test_late_chunk_drops_elapsed_rows_and_aligns_to_ticks() -> None:
    q = ChunkQueue(H, D)
    kept = q.splice(chunk(100), t0=10, t1=13, strategy="naive")
    assert kept == H - 3
    out = np.zeros(D)
    assert not q.action_at(12, out), "ticks before arrival are not served"
    assert q.action_at(13, out) and out[0] == 103  # row t1 - t0
    assert q.action_at(25, out) and out[0] == 115  # last row: tick t0 + H - 1
    assert not q.action_at(26, out)
    assert q.remaining(13) == 13 and q.remaining(20) == 6 and q.remaining(26) == 0


def test_chunk_arriving_after_its_horizon_is_dropped_whole() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    assert q.splice(chunk(100), t0=1, t1=1 + H, strategy="naive") == 0
    out = np.zeros(D)
    assert q.action_at(5, out) and out[0] == 5, "the queue is untouched"


def test_naive_replaces_the_overlap_with_the_new_chunk() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    q.splice(chunk(100), t0=4, t1=6, strategy="naive")
    out = np.zeros(D)
    assert q.action_at(6, out) and out[0] == 102
    assert q.action_at(15, out) and out[0] == 111
    assert q.start == 6 and q.end == 20


def test_average_blends_point3_old_point7_new_on_the_overlap_only() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "average")  # old: tick t -> t
    q.splice(chunk(100), t0=8, t1=10, strategy="average", old_weight=0.3)  # new: tick t -> 92 + t
    out = np.zeros(D)
    for t in range(10, 16):  # overlap: old covers ticks < 16
        assert q.action_at(t, out)
        assert out[0] == pytest.approx(0.3 * t + 0.7 * (92 + t))
    for t in range(16, 24):
        assert q.action_at(t, out) and out[0] == pytest.approx(92 + t)
    assert not q.action_at(24, out)


def test_rtc_prefix_copies_the_committed_actions_for_the_delay() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "rtc")
    prefix = np.full((1, H, D), -1, np.float32)
    n = rtc_prefix(q, tick=5, d=3, max_prefix=6, prefix=prefix)
    assert n == 3
    np.testing.assert_array_equal(prefix[0, :3, 0], [5, 6, 7])
    assert np.all(prefix[0, 3:] == -1), "rows beyond prefix_len untouched"
    assert rtc_prefix(q, tick=5, d=9, max_prefix=6, prefix=prefix) == 6, "capped at max_prefix"
    assert rtc_prefix(q, tick=13, d=5, max_prefix=6, prefix=prefix) == 3, "only actions the queue holds"
    assert rtc_prefix(ChunkQueue(H, D), tick=0, d=3, max_prefix=6, prefix=prefix) == 0


def test_rtc_splice_of_a_pinned_chunk_is_continuous() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "rtc")
    prefix = np.zeros((1, H, D), np.float32)
    d = rtc_prefix(q, tick=8, d=2, max_prefix=6, prefix=prefix)
    new = chunk(500)
    new[:d] = prefix[0, :d]  # what a prefix-conditioned policy returns
    q.splice(new, t0=8, t1=8 + d, strategy="rtc")
    out = np.zeros(D)
    assert q.action_at(10, out) and out[0] == 502
    q2 = ChunkQueue(H, D)
    q2.splice(new, t0=8, t1=9, strategy="rtc")  # arrived early: the pinned row is the committed one
    assert q2.action_at(9, out) and out[0] == 9


def test_truncate_keeps_only_committed_ticks() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    q.truncate(7)
    assert q.remaining(4) == 3 and q.remaining(7) == 0


def test_unknown_strategy_and_backwards_time_are_rejected() -> None:
    q = ChunkQueue(H, D)
    with pytest.raises(ValueError, match="unknown strategy 'blend'"):
        q.splice(chunk(0), 0, 0, "blend")
    with pytest.raises(ValueError, match="cannot arrive earlier"):
        q.splice(chunk(0), 5, 4, "naive")
