"""Observation capture times at the edges cosmic-ray found unpinned (results/mutation_core.md).

A stamp decides how old the controller thinks its data is, so a wrong edge either holds a healthy
robot (fresh data dated as old) or, worse, moves it on data older than max_obs_age_s.
"""
from __future__ import annotations

import numpy as np

from omni_vla.core.perception import ObservationStore

IMG = np.zeros((16, 16, 3), np.uint8)


class Clocks:
    """The loop's clock and the senders' clock (sim time under use_sim_time starts near 0)."""

    def __init__(self, loop: float = 5.0, ros: float = 1000.0) -> None:
        self.loop = loop
        self.ros = ros


def test_a_store_built_without_a_tolerance_trusts_no_stamp_from_the_future() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros)
    s.put_joints(["j0"], [0.0], [], stamp=c.ros + 0.5)
    assert s.stamps["joints"] == c.loop and s.stamp_fallbacks == 1


def test_a_small_positive_stamp_early_in_sim_time_is_trusted() -> None:
    c = Clocks(loop=5.0, ros=0.6)
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros, 0.05)
    s.put_image("front", IMG, "rgb8", stamp=0.5)
    assert s.stamps["front"] == 5.0 - (0.6 - 0.5) and s.stamp_fallbacks == 0


def test_a_negative_stamp_falls_back_to_arrival_and_is_counted() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros, 0.05)
    s.put_joints(["j0"], [0.0], [], stamp=-1.0)
    assert s.stamps["joints"] == c.loop and s.stamp_fallbacks == 1
    assert s.last_stamp_fallback == "joints: zero stamp; arrival time used"


def test_a_store_built_without_a_tolerance_trusts_a_stamp_from_now_or_the_past() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros)
    s.put_image("wrist", IMG, "rgb8", stamp=c.ros)
    s.put_joints(["j0"], [0.0], [], stamp=c.ros - 0.25)
    assert s.stamps["wrist"] == c.loop and s.stamps["joints"] == c.loop - 0.25 and s.stamp_fallbacks == 0


def test_a_stamp_exactly_the_tolerance_ahead_is_still_trusted() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros, 0.25)
    s.put_joints(["j0"], [0.0], [], stamp=c.ros + 0.25)
    assert s.stamps["joints"] == c.loop and s.stamp_fallbacks == 0
