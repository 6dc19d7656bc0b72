"""The tracked reference on its own (safety/trajectory.py): refusals, and the box filter's exact mean."""
from __future__ import annotations

import pytest

from omni_vla_safety.trajectory import Reference


@pytest.mark.parametrize("window, dt", [(0, 0.01), (5, 0.0), (5, -0.01)])
def test_reference_refuses_an_empty_window_or_a_period_that_is_not_positive(window: int, dt: float) -> None:
    with pytest.raises(ValueError, match="window must be >= 1 and dt > 0"):
        Reference(1, window, dt)


@pytest.mark.parametrize("window", [1, 2, 4, 5])
def test_reference_is_the_mean_of_the_last_window_samples_and_its_velocity_their_change(window: int) -> None:
    ref = Reference(1, window, 0.01)
    ref.follow(0.0, [(1.0, [1.0])], start=[0.0])  # a ramp of 1 per second from rest at 0
    samples: list[float] = []
    for k in range(1, 12):
        now = 0.01 * k
        ref.step(now)
        samples.append(now)
        last = ([0.0] * window + samples)[-window:]
        want = sum(last) / window
        assert ref.position[0] == pytest.approx(want, abs=1e-12)
        prev = sum(([0.0] * window + samples[:-1])[-window:]) / window
        assert ref.velocity[0] == pytest.approx((want - prev) / 0.01, abs=1e-9)
    assert ref.last == [1.0]
