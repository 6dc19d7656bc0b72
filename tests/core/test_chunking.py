"""Chunk queue on absolute ticks: time alignment, the three splice strategies, RTC prefix pinning.

Also the boundaries: of time alignment, truncation at and past the end, capacity, cloud plans longer than H, the
average blend's indices, the RTC prefix limits, and random operation sequences checked against a dictionary model
written here (tick -> action)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_vla.core.chunking import STRATEGIES, ChunkQueue, rtc_prefix

H, D = 8, 3
H16, D8 = 16, 8  # a 16-tick chunk of 8 joints


def chunk(base: float, h: int = H) -> np.ndarray:
    """Row i, joint j holds base + i + j / 100: every value says which chunk, row and joint it came from."""
    return base + np.arange(h, dtype=np.float64)[:, None] + np.arange(D)[None, :] / 100


def at(q: ChunkQueue, tick: int) -> np.ndarray | None:
    out = np.full(D, np.nan)
    return out if q.action_at(tick, out) else None


def chunk16(base: float) -> np.ndarray:
    """Row i holds base + i in every joint: values say which chunk and row an action came from."""
    return (base + np.arange(H16, dtype=np.float32))[:, None] * np.ones((1, D8), np.float32)


def test_late_chunk_drops_elapsed_rows_and_aligns_to_ticks() -> None:
    q = ChunkQueue(H16, D8)
    kept = q.splice(chunk16(100), t0=10, t1=13, strategy="naive")
    assert kept == H16 - 3
    out = np.zeros(D8)
    assert not q.action_at(12, out), "ticks before arrival are not served"
    assert q.action_at(13, out) and out[0] == 103  # row t1 - t0
    assert q.action_at(25, out) and out[0] == 115  # last row: tick t0 + H16 - 1
    assert not q.action_at(26, out)
    assert q.remaining(13) == 13 and q.remaining(20) == 6 and q.remaining(26) == 0


def test_chunk_arriving_after_its_horizon_is_dropped_whole() -> None:
    q = ChunkQueue(H16, D8)
    q.splice(chunk16(0), 0, 0, "naive")
    assert q.splice(chunk16(100), t0=1, t1=1 + H16, strategy="naive") == 0
    out = np.zeros(D8)
    assert q.action_at(5, out) and out[0] == 5, "the queue is untouched"


def test_naive_replaces_the_overlap_with_the_new_chunk() -> None:
    q = ChunkQueue(H16, D8)
    q.splice(chunk16(0), 0, 0, "naive")
    q.splice(chunk16(100), t0=4, t1=6, strategy="naive")
    out = np.zeros(D8)
    assert q.action_at(6, out) and out[0] == 102
    assert q.action_at(15, out) and out[0] == 111
    assert q.start == 6 and q.end == 20


def test_average_blends_point3_old_point7_new_on_the_overlap_only() -> None:
    q = ChunkQueue(H16, D8)
    q.splice(chunk16(0), 0, 0, "average")  # old: tick t -> t
    q.splice(chunk16(100), t0=8, t1=10, strategy="average", old_weight=0.3)  # new: tick t -> 92 + t
    out = np.zeros(D8)
    for t in range(10, 16):  # overlap: old covers ticks < 16
        assert q.action_at(t, out)
        assert out[0] == pytest.approx(0.3 * t + 0.7 * (92 + t))
    for t in range(16, 24):
        assert q.action_at(t, out) and out[0] == pytest.approx(92 + t)
    assert not q.action_at(24, out)


def test_rtc_prefix_copies_the_committed_actions_for_the_delay() -> None:
    q = ChunkQueue(H16, D8)
    q.splice(chunk16(0), 0, 0, "rtc")
    prefix = np.full((1, H16, D8), -1, np.float32)
    n = rtc_prefix(q, tick=5, d=3, max_prefix=6, prefix=prefix)
    assert n == 3
    np.testing.assert_array_equal(prefix[0, :3, 0], [5, 6, 7])
    assert np.all(prefix[0, 3:] == -1), "rows beyond prefix_len untouched"
    assert rtc_prefix(q, tick=5, d=9, max_prefix=6, prefix=prefix) == 6, "capped at max_prefix"
    assert rtc_prefix(q, tick=13, d=5, max_prefix=6, prefix=prefix) == 3, "only actions the queue holds"
    assert rtc_prefix(ChunkQueue(H16, D8), tick=0, d=3, max_prefix=6, prefix=prefix) == 0


def test_rtc_splice_of_a_pinned_chunk_is_continuous() -> None:
    q = ChunkQueue(H16, D8)
    q.splice(chunk16(0), 0, 0, "rtc")
    prefix = np.zeros((1, H16, D8), np.float32)
    d = rtc_prefix(q, tick=8, d=2, max_prefix=6, prefix=prefix)
    new = chunk16(500)
    new[:d] = prefix[0, :d]  # what a prefix-conditioned policy returns
    q.splice(new, t0=8, t1=8 + d, strategy="rtc")
    out = np.zeros(D8)
    assert q.action_at(10, out) and out[0] == 502
    q2 = ChunkQueue(H16, D8)
    q2.splice(new, t0=8, t1=9, strategy="rtc")  # arrived early: the pinned row is the committed one
    assert q2.action_at(9, out) and out[0] == 9


def test_truncate_keeps_only_committed_ticks() -> None:
    q = ChunkQueue(H16, D8)
    q.splice(chunk16(0), 0, 0, "naive")
    q.truncate(7)
    assert q.remaining(4) == 3 and q.remaining(7) == 0


def test_unknown_strategy_and_backwards_time_are_rejected() -> None:
    q = ChunkQueue(H16, D8)
    with pytest.raises(ValueError, match="unknown strategy 'blend'"):
        q.splice(chunk16(0), 0, 0, "blend")
    with pytest.raises(ValueError, match="cannot arrive earlier"):
        q.splice(chunk16(0), 5, 4, "naive")


def test_strategies_are_the_three_documented_ones() -> None:
    assert STRATEGIES == ("rtc", "average", "naive")


# --------------------------------------------------------------------------------------- capacity
@pytest.mark.parametrize(("capacity", "expected"), [(None, H), (0, H), (H - 3, H), (H, H), (3 * H, 3 * H)])
def test_capacity_is_at_least_the_horizon(capacity: int | None, expected: int) -> None:
    q = ChunkQueue(H, D, capacity)
    assert (q.horizon, q.action_dim, q.capacity) == (H, D, expected)
    assert (q.start, q.end, q.remaining(0)) == (0, 0, 0), "a new queue is empty"
    assert at(q, 0) is None


def test_a_cloud_plan_longer_than_h_is_queued_whole_up_to_capacity() -> None:
    q = ChunkQueue(H, D, capacity=3 * H)
    plan = chunk(100, 3 * H)
    assert q.splice(plan, t0=5, t1=5, strategy="naive") == 3 * H
    assert (q.start, q.end) == (5, 5 + 3 * H)
    np.testing.assert_array_equal(at(q, 5 + 3 * H - 1), plan[-1])
    assert at(q, 5 + 3 * H) is None
    # Then a regular chunk replaces it (and fits in the same buffers).
    assert q.splice(chunk(500), t0=10, t1=12, strategy="rtc") == H - 2
    np.testing.assert_array_equal(at(q, 12), chunk(500)[2])
    assert (q.start, q.end) == (12, 10 + H)


def test_a_plan_longer_than_capacity_is_refused_and_the_queue_kept() -> None:
    q = ChunkQueue(H, D, capacity=2 * H)
    q.splice(chunk(0), 0, 0, "naive")
    with pytest.raises(ValueError, match=f"chunk of {2 * H + 1} rows exceeds the queue capacity {2 * H}"):
        q.splice(chunk(100, 2 * H + 1), 0, 0, "naive")
    with pytest.raises(ValueError, match=f"exceeds the queue capacity {H}"):
        ChunkQueue(H, D).splice(chunk(100, H + 1), 3, 3, "naive")
    assert (q.start, q.end) == (0, H)
    np.testing.assert_array_equal(at(q, 1), chunk(0)[1])


def test_a_chunk_of_exactly_capacity_rows_fits() -> None:
    q = ChunkQueue(H, D)
    assert q.splice(chunk(0), 0, 0, "average") == H


# --------------------------------------------------------------------------------- time alignment
def test_arrival_exactly_at_the_horizon_is_stale_and_leaves_the_queue_alone() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    for strategy in STRATEGIES:
        assert q.splice(chunk(100), t0=2, t1=2 + H, strategy=strategy) == 0
        assert (q.start, q.end) == (0, H)
        np.testing.assert_array_equal(at(q, H - 1), chunk(0)[-1])


def test_arrival_one_tick_before_the_horizon_keeps_the_last_row() -> None:
    q = ChunkQueue(H, D)
    assert q.splice(chunk(100), t0=2, t1=1 + H, strategy="naive") == 1
    assert (q.start, q.end) == (1 + H, 2 + H)
    np.testing.assert_array_equal(at(q, 1 + H), chunk(100)[-1])


def test_arrival_at_the_request_tick_keeps_every_row_in_place() -> None:
    q = ChunkQueue(H, D)
    assert q.splice(chunk(7), t0=4, t1=4, strategy="naive") == H
    for i in range(H):
        np.testing.assert_array_equal(at(q, 4 + i), chunk(7)[i])
    assert at(q, 3) is None and at(q, 4 + H) is None


def test_arrival_before_the_request_is_refused_for_every_strategy() -> None:
    q = ChunkQueue(H, D)
    for strategy in STRATEGIES:
        with pytest.raises(ValueError, match="chunk requested at tick 5 cannot arrive earlier, at tick 4"):
            q.splice(chunk(0), 5, 4, strategy)
    assert (q.start, q.end) == (0, 0)


def test_unknown_strategy_is_refused_even_for_a_stale_chunk_and_keeps_the_queue() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    with pytest.raises(ValueError, match=r"unknown strategy 'blend'; expected one of \('rtc', 'average', 'naive'\)"):
        q.splice(chunk(100), 2, 2 + H, "blend")
    with pytest.raises(ValueError, match="unknown strategy"):
        q.splice(chunk(100), 2, 3, "blend")
    assert (q.start, q.end) == (0, H)
    np.testing.assert_array_equal(at(q, 3), chunk(0)[3])


# ----------------------------------------------------------------------------------- truncation
def test_truncate_past_the_end_changes_nothing() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), t0=3, t1=3, strategy="naive")
    q.truncate(3 + H + 5)
    assert (q.start, q.end) == (3, 3 + H)
    q.truncate(3 + H)
    assert (q.start, q.end) == (3, 3 + H), "at the end: nothing to forget"
    np.testing.assert_array_equal(at(q, 2 + H), chunk(0)[-1])


def test_truncate_one_before_the_end_forgets_the_last_action() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), t0=3, t1=3, strategy="naive")
    q.truncate(2 + H)
    assert q.end == 2 + H and at(q, 2 + H) is None and at(q, 1 + H) is not None


def test_truncate_at_or_before_the_start_empties_without_moving_the_start() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), t0=3, t1=3, strategy="naive")
    q.truncate(3)
    assert (q.start, q.end) == (3, 3) and q.remaining(0) == 0 and at(q, 3) is None
    q.splice(chunk(0), t0=3, t1=3, strategy="naive")
    q.truncate(-10)
    assert (q.start, q.end) == (3, 3), "never an end before the start"


def test_truncate_then_average_blends_only_what_is_still_queued() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "average")
    q.truncate(5)
    q.splice(chunk(100), t0=2, t1=3, strategy="average", old_weight=0.5)  # old ticks 3, 4 overlap
    np.testing.assert_allclose(at(q, 3), 0.5 * chunk(0)[3] + 0.5 * chunk(100)[1])
    np.testing.assert_allclose(at(q, 4), 0.5 * chunk(0)[4] + 0.5 * chunk(100)[2])
    np.testing.assert_array_equal(at(q, 5), chunk(100)[3])


def test_clear_forgets_everything() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 4, 4, "naive")
    q.clear()
    assert (q.start, q.end) == (0, 0) and q.remaining(0) == 0 and at(q, 4) is None and at(q, 0) is None


# ------------------------------------------------------------------------ remaining / copy_range
def test_remaining_before_start_inside_and_after_the_end() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 10, 10, "naive")
    assert q.remaining(0) == H, "ticks before the start: everything queued is still ahead"
    assert q.remaining(10) == H and q.remaining(11) == H - 1
    assert q.remaining(9 + H) == 1 and q.remaining(10 + H) == 0 and q.remaining(100) == 0


def test_action_at_the_bounds() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 10, 10, "naive")
    assert at(q, 9) is None and at(q, 10 + H) is None
    np.testing.assert_array_equal(at(q, 10), chunk(0)[0])
    np.testing.assert_array_equal(at(q, 9 + H), chunk(0)[-1])


def test_copy_range_counts_and_copies_only_what_is_queued() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 10, 10, "naive")
    out = np.full((H + 4, D), -1.0)
    assert q.copy_range(9, 3, out) == 0 and np.all(out == -1), "before the start: nothing"
    assert q.copy_range(10 + H, 3, out) == 0 and np.all(out == -1), "at the end: nothing"
    assert q.copy_range(12, 3, out) == 3
    np.testing.assert_array_equal(out[:3], chunk(0)[2:5])
    assert np.all(out[3:] == -1)
    out[:] = -1
    assert q.copy_range(12, H + 4, out) == H - 2, "capped at the end of the queue"
    np.testing.assert_array_equal(out[: H - 2], chunk(0)[2:])
    assert np.all(out[H - 2 :] == -1)
    out32 = np.zeros((2, D), np.float32)
    assert q.copy_range(9 + H, 2, out32) == 1 and out32[0, 1] == np.float32(chunk(0)[-1, 1])
    assert q.copy_range(10, 0, out) == 0


# -------------------------------------------------------------------------------------- average
def test_average_uses_point3_old_weight_by_default() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "average")
    q.splice(chunk(100), t0=2, t1=4, strategy="average")
    np.testing.assert_allclose(at(q, 4), 0.3 * chunk(0)[4] + 0.7 * chunk(100)[2])


def test_average_indexes_old_and_new_by_tick_when_the_old_queue_starts_late() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), t0=0, t1=4, strategy="naive")  # ticks 4..7 hold rows 4..7
    q.splice(chunk(100), t0=3, t1=3, strategy="average", old_weight=0.25)  # ticks 3..10; overlap 4..7
    assert (q.start, q.end) == (3, 3 + H)
    np.testing.assert_array_equal(at(q, 3), chunk(100)[0])
    for t in range(4, 8):
        np.testing.assert_allclose(at(q, t), 0.25 * chunk(0)[t] + 0.75 * chunk(100)[t - 3])
    for t in range(8, 11):
        np.testing.assert_array_equal(at(q, t), chunk(100)[t - 3])


def test_average_with_an_empty_queue_or_no_overlap_takes_the_new_chunk_unchanged() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(100), t0=0, t1=2, strategy="average")
    for t in range(2, H):
        np.testing.assert_array_equal(at(q, t), chunk(100)[t])
    q.splice(chunk(200), t0=H, t1=H + 1, strategy="average")  # old queue ended at H: touching, no overlap
    for t in range(H + 1, 2 * H):
        np.testing.assert_array_equal(at(q, t), chunk(200)[t - H])


def test_average_of_a_shorter_chunk_blends_only_its_own_ticks() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    short = chunk(100, 3)
    assert q.splice(short, t0=2, t1=3, strategy="average", old_weight=0.5) == 2
    assert (q.start, q.end) == (3, 5), "the new chunk replaces the queue, even when shorter"
    np.testing.assert_allclose(at(q, 3), 0.5 * chunk(0)[3] + 0.5 * short[1])
    np.testing.assert_allclose(at(q, 4), 0.5 * chunk(0)[4] + 0.5 * short[2])


@pytest.mark.parametrize("strategy", ["rtc", "naive"])
def test_rtc_and_naive_never_blend(strategy: str) -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    q.splice(chunk(100), t0=1, t1=2, strategy=strategy, old_weight=0.5)
    for t in range(2, 1 + H):
        np.testing.assert_array_equal(at(q, t), chunk(100)[t - 1])


def test_the_caller_chunk_is_never_modified() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "average")
    new = chunk(100)
    q.splice(new, 1, 2, "average")
    np.testing.assert_array_equal(new, chunk(100))


# -------------------------------------------------------------------------------------- rtc prefix
def test_rtc_prefix_of_nothing_or_a_negative_delay_pins_nothing() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "rtc")
    prefix = np.full((1, H, D), -1.0)
    assert rtc_prefix(q, tick=2, d=0, max_prefix=4, prefix=prefix) == 0
    assert rtc_prefix(q, tick=2, d=3, max_prefix=0, prefix=prefix) == 0
    assert rtc_prefix(q, tick=2, d=-1, max_prefix=4, prefix=prefix) == 0
    assert rtc_prefix(q, tick=2, d=3, max_prefix=-2, prefix=prefix) == 0
    assert np.all(prefix == -1)


def test_rtc_prefix_pins_exactly_min_of_delay_max_prefix_and_what_is_queued() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "rtc")
    prefix = np.full((1, H, D), -1.0)
    assert rtc_prefix(q, tick=1, d=4, max_prefix=4, prefix=prefix) == 4
    np.testing.assert_array_equal(prefix[0, :4], chunk(0)[1:5])
    assert np.all(prefix[0, 4:] == -1)
    assert rtc_prefix(q, tick=H - 1, d=4, max_prefix=4, prefix=prefix) == 1, "the last queued action"
    assert rtc_prefix(q, tick=H, d=4, max_prefix=4, prefix=prefix) == 0, "past the end: nothing"


# ---------------------------------------------------------------------- random sequences vs a model
class Model:
    """The queue's contract as a dict tick -> action."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.q = capacity, {}

    def splice(self, c: np.ndarray, t0: int, t1: int, strategy: str, w: float) -> int:
        keep = len(c) - (t1 - t0)
        if keep <= 0:
            return 0
        new = {t1 + i: c[t1 - t0 + i].copy() for i in range(keep)}
        if strategy == "average":
            new = {t: w * self.q[t] + (1 - w) * a if t in self.q else a for t, a in new.items()}
        self.q = new
        return keep

    def truncate(self, end: int) -> None:
        self.q = {t: a for t, a in self.q.items() if t < end}

    def remaining(self, tick: int) -> int:
        return sum(t >= tick for t in self.q)


ops = st.lists(st.one_of(
    st.tuples(st.just("splice"), st.integers(1, 3 * H), st.integers(0, 3), st.integers(0, H + 2),
              st.sampled_from(STRATEGIES), st.sampled_from([0.0, 0.3, 0.5, 1.0])),
    st.tuples(st.just("truncate"), st.integers(-3, 3 * H)),
    st.tuples(st.just("clear")),
), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(ops)
def test_random_operation_sequences_match_the_model(operations: list) -> None:
    cap = 2 * H
    q, m = ChunkQueue(H, D, capacity=cap), Model(cap)
    now = 0
    for k, op in enumerate(operations):
        if op[0] == "splice":
            _, h, advance, delay, strategy, w = op
            now += advance
            c = chunk(1000 * (k + 1), h)
            if h > cap:
                with pytest.raises(ValueError):
                    q.splice(c, now, now + delay, strategy, w)
                continue
            assert q.splice(c, now, now + delay, strategy, w) == m.splice(c, now, now + delay, strategy, w)
        elif op[0] == "truncate":
            q.truncate(now + op[1])
            m.truncate(now + op[1])
        else:
            q.clear()
            m.q = {}
        for t in range(now - 2, now + 3 * H + 4):
            expected = m.q.get(t)
            got = at(q, t)
            if expected is None:
                assert got is None, t
            else:
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
            assert q.remaining(t) == m.remaining(t), t


# ------------------------------------- tick indexing, strategy names compared by value, copy ranges, one-row prefixes
def test_average_indexes_the_new_chunk_by_tick_when_the_old_queue_starts_far_later() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), t0=4, t1=6, strategy="naive")  # ticks 6..11 hold rows 2..7
    q.splice(chunk(100), t0=1, t1=2, strategy="average", old_weight=0.5)  # ticks 2..8; overlap 6..8
    for t in range(2, 6):
        np.testing.assert_array_equal(at(q, t), chunk(100)[t - 1])
    for t in range(6, 9):
        np.testing.assert_allclose(at(q, t), 0.5 * chunk(0)[t - 4] + 0.5 * chunk(100)[t - 1])


def test_a_strategy_name_built_at_run_time_blends_like_the_literal() -> None:
    """Strategies come from parameter files: compared by value, never by identity."""
    name = "".join(["aver", "age"])
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "naive")
    q.splice(chunk(100), t0=2, t1=3, strategy=name, old_weight=0.5)
    np.testing.assert_allclose(at(q, 3), 0.5 * chunk(0)[3] + 0.5 * chunk(100)[1])


def test_copy_range_from_the_start_and_past_the_end() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 300, 300, "naive")  # ticks beyond the small-int cache
    out = np.full((H, D), -1.0)
    assert q.copy_range(300, 3, out) == 3
    np.testing.assert_array_equal(out[:3], chunk(0)[:3])
    out[:] = -1
    for tick in (300 + H, 301 + H, 400):
        assert q.copy_range(tick, 3, out) == 0 and np.all(out == -1), tick
        assert q.action_at(tick, out[0]) is False


def test_rtc_prefix_of_one_tick_pins_one_row_of_the_first_batch_entry_only() -> None:
    q = ChunkQueue(H, D)
    q.splice(chunk(0), 0, 0, "rtc")
    prefix = np.full((2, H, D), -1.0)
    assert rtc_prefix(q, tick=3, d=1, max_prefix=4, prefix=prefix) == 1
    assert rtc_prefix(q, tick=3, d=5, max_prefix=1, prefix=prefix) == 1
    np.testing.assert_array_equal(prefix[0, 0], chunk(0)[3])
    assert np.all(prefix[0, 1:] == -1) and np.all(prefix[1] == -1)
    assert rtc_prefix(q, tick=H + 2, d=3, max_prefix=4, prefix=prefix) == 0, "past the end"
