"""The ROS-free side of vla_node's time and parameter conventions.

Observation age from the sender's stamp (with the clock-skew guard), a loop that runs on a clock read
from a callable (ROS time under use_sim_time) and a live settings change applied at the next tick.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from controller_rig import PERIOD, make, obs
from omni_vla.core.assembly import build_loop
from omni_vla.core.loop import PolledClock, Scheduler
from omni_vla.core.perception import ObservationStore
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference
from toy_runtime import ToyRuntime

IMG = np.zeros((16, 16, 3), np.uint8)


class Clocks:
    """The loop's clock (monotonic, starts at 5) and the senders' (wall/ROS time, starts at 1000)."""

    def __init__(self) -> None:
        self.loop = 5.0
        self.ros = 1000.0

    def advance(self, dt: float) -> None:
        self.loop += dt
        self.ros += dt


def store(clocks: Clocks, tolerance: float = 0.05) -> ObservationStore:
    return ObservationStore(["j0"], lambda: clocks.loop, lambda: clocks.ros, tolerance)


def test_stamped_data_is_dated_by_its_stamp_so_transport_time_counts_toward_age() -> None:
    c = Clocks()
    s = store(c)
    s.put_image("front", IMG, "rgb8", stamp=c.ros - 0.3)  # captured 0.3 s ago on the sender's clock
    s.put_joints(["j0"], [0.0], [], stamp=c.ros - 0.01)
    assert s.stamps["front"] == pytest.approx(c.loop - 0.3)
    assert s.stamps["joints"] == pytest.approx(c.loop - 0.01)
    assert s.stamp_fallbacks == 0


def test_unstamped_data_is_dated_by_arrival() -> None:
    c = Clocks()
    s = store(c)
    s.put_image("wrist", IMG, "rgb8")
    assert s.stamps["wrist"] == c.loop and s.stamp_fallbacks == 0


@pytest.mark.parametrize("offset, why", [(None, "zero stamp"), (0.2, "stamp 0.200 s ahead of this node's clock")])
def test_zero_or_future_stamp_falls_back_to_arrival_and_is_counted(offset: float | None, why: str) -> None:
    c = Clocks()
    s = store(c, tolerance=0.05)
    stamp = 0.0 if offset is None else c.ros + offset
    s.put_joints(["j0"], [1.0], [], stamp=stamp)
    assert s.stamps["joints"] == c.loop
    assert s.stamp_fallbacks == 1
    assert s.last_stamp_fallback == f"joints: {why}; arrival time used"


def test_stamp_ahead_within_the_tolerance_is_trusted_as_fresh() -> None:
    c = Clocks()
    s = store(c, tolerance=0.05)
    s.put_image("front", IMG, "rgb8", stamp=c.ros + 0.04)
    assert s.stamps["front"] == c.loop and s.stamp_fallbacks == 0


def test_an_old_stamp_makes_the_controller_hold_as_stale() -> None:
    c = Clocks()
    lp = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4, max_obs_age_s=0.2),
                    SyncInference(ToyRuntime(), 0, PERIOD), clock=lambda: c.loop, stamp_clock=lambda: c.ros)
    lp.store.set_instruction("pick up the red cube")
    lp.store.put_image("front", IMG, "rgb8", stamp=c.ros)
    lp.store.put_image("wrist", IMG, "rgb8", stamp=c.ros)
    lp.store.put_joints(lp.settings.joint_names, [0.0] * 8, [], stamp=c.ros)
    assert lp.tick(0, c.loop) is not None
    lp.store.put_joints(lp.settings.joint_names, [0.0] * 8, [], stamp=c.ros - 0.25)  # arrives now, 0.25 s old
    assert lp.tick(1, c.loop) is None
    assert (lp.controller.state, lp.controller.reason) == ("STALE", "joint state older than max_obs_age_s=0.2 s")


def test_live_update_of_max_obs_age_applies_at_the_next_tick_and_renames_the_reason() -> None:
    ctl, _ = make(delay=0, max_obs_age_s=0.2)
    o = obs(1.0)
    o["stamps"] = {"front": 0.0, "wrist": 0.0, "joints": 0.0}
    assert ctl.step(o, 15, 0.3) is None and ctl.reason == "front camera image older than max_obs_age_s=0.2 s"
    ctl.update(ctl.config.model_copy(update={"max_obs_age_s": 0.5}))
    assert ctl.step(o, 16, 0.32) is not None and ctl.state == "OK"
    assert ctl.step(o, 40, 0.8) is None and ctl.reason == "front camera image older than max_obs_age_s=0.5 s"


def test_live_update_refuses_a_setting_the_loop_was_built_from() -> None:
    ctl, _ = make(delay=0)
    with pytest.raises(ValueError, match="execution_horizon cannot change while the loop runs: reconfigure"):
        ctl.update(ctl.config.model_copy(update={"execution_horizon": 2}))


def test_loop_update_moves_the_stamp_tolerance_of_the_store() -> None:
    lp = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), SyncInference(ToyRuntime(), 0, PERIOD))
    lp.update(lp.settings.model_copy(update={"max_future_stamp_s": 1.5}))
    assert lp.store.max_future_stamp_s == 1.5 and lp.settings.max_future_stamp_s == 1.5


def test_scheduler_on_a_polled_clock_ticks_on_that_clock_and_pauses_with_it() -> None:
    """Simulated time: ticks follow the clock callable, not the wall; a paused clock pauses the loop."""
    sim = [0.0]
    lock = threading.Lock()
    ticks: list[tuple[int, float]] = []

    def now() -> float:
        with lock:
            return sim[0]

    clock = PolledClock(now, poll_s=0.0005)
    sched = Scheduler(10.0, lambda k, t: ticks.append((k, t)), clock=clock)

    def run() -> None:
        if clock.wait_for_start():
            sched.run()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.05)
    assert ticks == [], "no tick before time starts (ROS time is 0 until the first /clock)"
    with lock:
        sim[0] = 100.0
    deadline = time.monotonic() + 2
    while not ticks and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.1)  # paused simulated time: a wall-clock 0.1 s is no tick
    assert ticks == [(0, 100.0)]
    for i in range(1, 6):  # 0.5 s of simulated time in a few ms of wall time: five more ticks, on time
        with lock:
            sim[0] = 100.0 + i * 0.1
        end = time.monotonic() + 1
        while len(ticks) < i + 1 and time.monotonic() < end:
            time.sleep(0.0005)
    assert [k for k, _ in ticks] == [0, 1, 2, 3, 4, 5]
    assert [t for _, t in ticks] == pytest.approx([100.0, 100.1, 100.2, 100.3, 100.4, 100.5])
    assert sched.stats.missed == 0
    sched.stop()  # waiting for simulated time that never comes: stop ends the wait
    thread.join(1.0)
    assert not thread.is_alive()


def test_inputs_captured_before_the_clock_jumped_back_hold_the_loop_until_new_ones_arrive() -> None:
    """ROS time going back (a simulation reset, a bag replayed from its start) leaves the last inputs dated ahead
    of the loop's time: their age is unknown, so the loop holds as stale, then resumes on inputs of the new time."""
    c = Clocks()
    lp = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4, max_obs_age_s=0.2),
                    SyncInference(ToyRuntime(), 0, PERIOD), clock=lambda: c.loop, stamp_clock=lambda: c.ros)
    lp.store.set_instruction("pick up the red cube")

    def inputs() -> None:
        for camera in ("front", "wrist"):
            lp.store.put_image(camera, IMG, "rgb8", stamp=c.ros)
        lp.store.put_joints(lp.settings.joint_names, [0.0] * 8, [], stamp=c.ros)

    inputs()
    assert lp.tick(0, c.loop) is not None
    c.loop -= 30.0
    c.ros -= 30.0
    assert lp.tick(1, c.loop) is None
    assert lp.controller.state == "STALE"
    assert lp.controller.reason == ("front camera image captured more than max_obs_age_s=0.2 s ahead of the "
                                    "loop's time (the clock jumped back)")
    c.advance(0.1)
    assert lp.tick(2, c.loop) is None  # still 29.9 s ahead
    inputs()
    assert lp.tick(3, c.loop) is not None and lp.controller.state == "OK"


def test_inputs_captured_slightly_after_the_ticks_nominal_time_are_fresh() -> None:
    """A tick runs a little after its deadline; what arrived in between is not 'ahead' of the loop."""
    ctl, _ = make(delay=0, max_obs_age_s=0.2)
    o = obs(1.0)
    o["stamps"] = {"front": 1.01, "wrist": 1.19, "joints": 1.0}
    assert ctl.step(o, 0, 1.0) is not None and ctl.state == "OK"
    o["stamps"]["wrist"] = 1.21
    assert ctl.step(o, 1, 1.0) is None and ctl.state == "STALE"


class JumpingTime:
    """ROS time read by polling: moves 1 ms per read, and goes back `back` seconds at read `at`."""

    def __init__(self, at: int, back: float) -> None:
        self.t, self.reads, self.at, self.back = 100.0, 0, at, back

    def now(self) -> float:
        self.reads += 1
        self.t += 0.001 - (self.back if self.reads == self.at else 0.0)
        return self.t


@pytest.mark.parametrize("back", [3600.0, 0.5])
def test_a_loop_on_ros_time_restarts_its_schedule_when_time_goes_back(back: float) -> None:
    """Without this the loop would wait for its old deadline: an hour after a reset an hour into a run."""
    clock = JumpingTime(at=200, back=back)
    seen: list[float] = []
    sched = Scheduler(100.0, lambda k, t: seen.append(t), clock=PolledClock(clock.now, poll_s=1e-5))
    runner = threading.Thread(target=sched.run, kwargs={"max_ticks": 40}, daemon=True)
    runner.start()
    runner.join(timeout=10.0)
    assert not runner.is_alive(), "the loop waited for a deadline from before the jump"
    sched.stop()
    assert sched.stats.ticks == 40 and sched.stats.clock_jumps_back == 1 and sched.stats.missed == 0
    jump = next(k for k in range(1, len(seen)) if seen[k] < seen[k - 1])
    assert seen[jump - 1] - seen[jump] == pytest.approx(back, abs=0.02)
    steps = np.diff(seen[jump:])
    assert np.allclose(steps, 0.01), "after the jump, ticks resume at the loop's period on the new time"


def test_time_going_back_less_than_it_moved_since_the_last_tick_only_delays_the_next_tick() -> None:
    """The wait ends at the jump; the deadline still lies ahead on the new time, so the loop waits again:
    no early tick, no restart of the schedule."""
    clock = JumpingTime(at=205, back=0.002)
    seen: list[tuple[float, float]] = []
    sched = Scheduler(100.0, lambda k, t: seen.append((t, clock.t)), clock=PolledClock(clock.now, poll_s=1e-5))
    sched.run(max_ticks=40)
    assert sched.stats.clock_jumps_back == 0
    assert all(now >= deadline for deadline, now in seen)
    assert np.allclose(np.diff([d for d, _ in seen]), 0.01)
