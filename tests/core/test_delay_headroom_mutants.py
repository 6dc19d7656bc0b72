"""Starvation advice checked against the loop itself (mutation testing of `too_slow` found these unpinned).

The covered delay `d_max` the advice states is compared with the largest delay for which a real loop (build_loop,
SyncInference, 60 ticks) executes a command on every tick from the first chunk on; odd horizons and step counts
below half the horizon are where ceil(H/2), floor(H/2) and H - s part. The advised rate is re-run as a loop."""
from __future__ import annotations

import functools
import math
import re

import pytest

from test_delay_headroom import TICKS, run


def ticks(latency_s: float, rate_hz: float) -> int:
    """The ticks a chunk of that latency takes to land at that rate (the whole periods it spans, rounded up)."""
    return math.ceil(latency_s * rate_hz - 1e-6)


@functools.cache
def covered(h: int, s: int, d: int) -> bool:
    """Every tick from the first chunk's arrival on executes a command."""
    return run(h, s, d).counts["commands"] == TICKS - d


def largest_covered_delay(h: int, s: int) -> int:
    return max((d for d in range(h + 1) if covered(h, s, d)), default=-1)


def stated_d_max(msg: str, h: int, s: int) -> int:
    m = re.search(rf"more than the (-?\d+) that chunks of {h} executed {s} at a time cover", msg)
    assert m, msg
    return int(m.group(1))


@pytest.mark.parametrize("h", [5, 7, 8])
def test_the_covered_delay_the_advice_states_is_the_largest_the_loop_really_covers(h: int) -> None:
    for s in range(1, h + 1):
        d_max = largest_covered_delay(h, s)
        c = run(h, s, d_max + 1)  # the first delay that starves
        assert c.delay_headroom() < 0
        assert stated_d_max(c.too_slow(0.1 * (d_max + 1)), h, s) == d_max, (h, s)


@pytest.mark.parametrize("h", [5, 7, 8])
def test_a_shorter_execution_horizon_is_advised_only_when_one_covers_a_longer_delay(h: int) -> None:
    best = max(largest_covered_delay(h, s) for s in range(1, h + 1))
    for s in range(1, h + 1):
        c = run(h, s, h)
        msg = c.too_slow(0.1 * h)
        m = re.search(r" or execution_horizon to <= (\d+)$", msg)
        assert (m is not None) == (largest_covered_delay(h, s) < best), (h, s, msg)
        if m:
            assert largest_covered_delay(h, int(m.group(1))) == best, (h, s, msg)


def test_the_latency_is_named_to_the_millisecond() -> None:
    c = run(8, 4, 5, rate_hz=2.5, latency_s=2.0)
    assert c.too_slow(2.0).startswith("inference p95 2000 ms = 5 ticks at 2.5 Hz, more than the 4 ")


@pytest.mark.parametrize(("latency_s", "rate_hz"), [(0.5, 8.0), (0.3, 13.3)])
def test_at_the_advised_rate_the_same_latency_fits(latency_s: float, rate_hz: float) -> None:
    c = run(8, 4, ticks(latency_s, 10.0), latency_s=latency_s)
    msg = c.too_slow(latency_s)
    advised = float(re.search(r"lower rate_hz to <= ([0-9.]+) Hz", msg).group(1))
    assert advised == rate_hz, msg
    fits = run(8, 4, ticks(latency_s, advised), rate_hz=advised, latency_s=latency_s)
    assert fits.delay_headroom() >= 0 and fits.counts["commands"] == TICKS - fits.delay_ticks


def test_an_advised_rate_rounded_to_three_digits_still_fits() -> None:
    c = run(8, 4, ticks(0.6, 10.0), latency_s=0.6)
    msg = c.too_slow(0.6)
    advised = float(re.search(r"lower rate_hz to <= ([0-9.]+) Hz", msg).group(1))
    at_advised = run(8, 4, ticks(0.6, advised), rate_hz=advised, latency_s=0.6)
    assert at_advised.counts["commands"] == TICKS - at_advised.delay_ticks, (msg, at_advised.counts)
    assert at_advised.delay_headroom() >= 0, (msg, at_advised.delay_ticks)
