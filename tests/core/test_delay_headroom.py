"""The loop predicts starvation: with one request in flight, a chunk of H executed s at a time covers every tick
iff the delay d satisfies d + max(s, d) <= H. The prediction (`delay_headroom`) is checked against what the
controller really does over every (H, s, d) of a small grid, and the advice names a rate that would fit.

The starvation advice is checked against the loop itself: the covered delay `d_max` the advice states is
compared with the largest delay for which a real loop (build_loop, SyncInference, 60 ticks) executes a command on
every tick from the first chunk on; odd horizons and step counts below half the horizon are where ceil(H/2),
floor(H/2) and H - s part. The advised rate is re-run as a loop.
"""
from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest

from omni_vla.cameras import CameraInput
from omni_vla.core.assembly import build_loop
from omni_vla.core.controller import Controller
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference


TICKS = 60


def constant_policy(h: int):  # noqa: ANN201
    class Constant:
        backend, horizon, action_dim, max_prefix, embedding_dim = "toy", h, 1, 0, 1
        cameras = (CameraInput("front", 8, 8),)
        joint_names = ["a"]

        def encode_instruction(self, text: str) -> np.ndarray:
            return np.zeros(1, np.float32)

        def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:  # noqa: ANN001
            out[:] = 0.5

        def close(self) -> None:
            pass

    return Constant()


def run(h: int, s: int, d: int, rate_hz: float = 10.0, latency_s: float | None = None) -> Controller:
    """A loop at rate_hz whose chunks land d ticks after the request, reporting latency_s (default d periods)."""
    period = 1.0 / rate_hz
    inference = SyncInference(constant_policy(h), delay_ticks=d,
                              period_s=period if latency_s is None or d == 0 else latency_s / d)
    loop = build_loop(LoopSettings(rate_hz=rate_hz, execution_horizon=s, joint_names=["a"]), inference)
    for tick in range(TICKS):
        now = period * tick
        loop.step({"front": np.zeros((8, 8, 3), np.uint8), "qpos": np.zeros(1), "qvel": np.zeros(1),
                   "instruction": "go", "stamps": {"front": now, "joints": now}}, tick, now)
    return loop.controller


@pytest.mark.parametrize("h", [4, 5, 8])
def test_the_headroom_predicts_starvation_for_every_horizon_steps_and_delay(h: int) -> None:
    for s in range(1, h + 1):
        for d in range(0, h + 1):
            c = run(h, s, d)
            assert c.delay_ticks == d
            covered = c.counts["commands"] == TICKS - d  # every tick from the first chunk's arrival on
            assert (c.delay_headroom() >= 0) == covered, (h, s, d, c.counts)
            assert c.delay_headroom() == h - max(s, d) - d and c.status()["delay_headroom_ticks"] == c.delay_headroom()


def test_the_advice_names_the_delay_that_fits_and_a_rate_that_gives_it() -> None:
    c = run(8, 4, 5)  # d_max = 8 - max(4, 4) = 4 < 5
    msg = c.too_slow(0.5)
    assert msg.startswith("inference p95 500 ms = 5 ticks at 10 Hz, more than the 4 that chunks of 8 executed 4")
    assert "lower rate_hz to <= 8 Hz" in msg and "execution_horizon" not in msg
    rate = float(re.search(r"<= ([0-9.]+) Hz", msg).group(1))
    assert int(np.ceil(0.5 * rate)) + max(4, int(np.ceil(0.5 * rate))) <= 8  # that rate really fits


def test_a_long_execution_horizon_is_named_as_the_other_way_out() -> None:
    c = run(8, 7, 2)  # d_max = 8 - 7 = 1 < 2
    msg = c.too_slow(0.2)
    assert "more than the 1 that chunks of 8 executed 7" in msg
    assert msg.endswith("lower rate_hz to <= 5 Hz or execution_horizon to <= 4")


def test_chunks_too_short_for_any_rate_say_so() -> None:
    c = run(1, 1, 1)  # d_max = 1 - 1 = 0
    assert c.too_slow(0.1).endswith("use a bundle with longer chunks")


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
