"""Controller and loop-assembly edges found by mutation testing (issue 26).

Each test pins one behaviour a surviving mutant of omni_vla/core/controller.py or assembly.py
changed: which input a hold names, where "too old" starts, starvation and stale-chunk counting,
the latency window behind the delay estimate, reset, cloud-plan splicing and the loop's close;
and, for perception.py, the accepted image sizes and partial joint velocities.
"""
from __future__ import annotations

from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from omni_vla.core.assembly import build_loop
from omni_vla.core.controller import Controller
from omni_vla.core.perception import ImageRejected, ObservationStore, PolicyImage
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference
from test_inference import H, ToyRuntime
from test_loop_controller import PERIOD, make, obs, row, run


def stamped(now: float = 0.0, **changes: float | None) -> dict:
    o = obs(1.0)
    o["stamps"] = {"front": now, "wrist": now, "joints": now}
    for key, value in changes.items():
        if value is None:
            del o["stamps"][key]
        else:
            o["stamps"][key] = value
    return o


class ScriptedLatency(SyncInference):
    """Zero-delay client that reports the given latencies, one per finished chunk."""

    def __init__(self, latencies: list[float]) -> None:
        super().__init__(ToyRuntime(), delay_ticks=0, period_s=PERIOD)
        self.latencies = list(latencies)

    def poll(self, tick: int, now: float):
        res = super().poll(tick, now)
        if res is not None:
            res.latency_s = self.latencies.pop(0)
        return res


class FakeReplanner:
    """Hands out the plans it is given at their ticks; counts reset/close."""

    def __init__(self, max_horizon: int = 32) -> None:
        self.config = SimpleNamespace(max_horizon=max_horizon)
        self.plans: dict[int, np.ndarray] = {}
        self.observed: list[int] = []
        self.resets = self.closes = 0

    def observe(self, obs, tick: int, now: float) -> None:
        self.observed.append(tick)

    def poll(self, now: float, tick: int):
        actions = self.plans.pop(tick, None)
        return None if actions is None else SimpleNamespace(actions=actions)

    def reset(self) -> None:
        self.resets += 1

    def close(self) -> None:
        self.closes += 1


def plan(n: int, base: float = 100.0) -> np.ndarray:
    return (base + np.arange(n, dtype=np.float32))[:, None] * np.ones((1, 8), np.float32)


# ----- inputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("key, reason", [
    ("front", "waiting for the first front camera image"),
    ("wrist", "waiting for the first wrist camera image"),
    ("qpos", "waiting for the first joint state"),
])
def test_missing_input_holds_and_waits_naming_the_input(key: str, reason: str) -> None:
    """No first frame or joint state yet is waiting (not an error): held, and it says for what."""
    ctl, rt = make(delay=0)
    o = obs()
    o[key] = None
    assert ctl.step(o, 0) is None
    assert (ctl.state, ctl.reason) == ("WAITING", reason) and rt.calls == 0


@pytest.mark.parametrize("key, reason", [
    ("front", "waiting for the first front camera image"),
    ("wrist", "waiting for the first wrist camera image"),
    ("joints", "waiting for the first joint state"),
])
def test_input_without_a_stamp_holds_and_waits_naming_the_input(key: str, reason: str) -> None:
    ctl, _ = make(delay=0)
    assert ctl.step(stamped(0.0, **{key: None}), 0, 0.0) is None
    assert (ctl.state, ctl.reason) == ("WAITING", reason)


@pytest.mark.parametrize("key, reason", [
    ("front", "front camera image older than max_obs_age_s=0.2 s"),
    ("wrist", "wrist camera image older than max_obs_age_s=0.2 s"),
    ("joints", "joint state older than max_obs_age_s=0.2 s"),
])
def test_stale_input_holds_as_stale_and_says_which_input(key: str, reason: str) -> None:
    ctl, _ = make(delay=0, max_obs_age_s=0.2)
    assert ctl.step(stamped(1.0, **{key: 0.75}), 0, 1.0) is None
    assert (ctl.state, ctl.reason) == ("STALE", reason)
    assert ctl.counts["holds"] == 1


def test_input_exactly_max_age_old_is_still_fresh() -> None:
    ctl, _ = make(delay=0, max_obs_age_s=0.25)
    assert ctl.step(stamped(0.0), 0, 0.25) is not None and ctl.state == "OK"


def test_without_a_clock_time_is_tick_times_period() -> None:
    """step(obs, tick) with stamps judges their age at tick * period."""
    ctl, _ = make(delay=0, max_obs_age_s=0.2)
    o = stamped(0.0)
    assert ctl.step(o, 4) is not None, "0.2 s old at tick 4: still fresh"
    assert ctl.step(o, 5) is None and ctl.reason == "front camera image older than max_obs_age_s=0.2 s"


def test_observation_without_instruction_keeps_the_current_one() -> None:
    ctl, rt = make(delay=0)
    assert ctl.step(obs(), 0) is not None
    assert ctl.step(obs(instruction=None), 1) is not None
    assert ctl.step(obs(instruction=""), 2) is not None
    assert rt.encoded == ["pick up the cube"] and ctl.instruction == "pick up the cube"


def test_an_equal_instruction_in_a_new_string_is_not_re_encoded() -> None:
    ctl, rt = make(delay=2)
    for t in range(10):
        o = obs(1.0)
        o["instruction"] = "".join(["pick up ", "the cube"])  # equal text, another object each tick
        ctl.step(o, t)
    assert rt.encoded == ["pick up the cube"] and ctl.counts["discarded_chunks"] == 0


# ----- chunk arrival --------------------------------------------------------------------------
def test_queue_running_dry_after_a_chunk_is_starvation() -> None:
    """Delay 14 > H - s = 12: chunk 0 covers ticks 14-15 only; 16..27 wait for the next."""
    ctl, _ = make("naive", delay=14, s=4)
    cmds = run(ctl, range(28), lambda t: 1.0)
    assert [t for t, a in cmds.items() if a is not None] == [14, 15]
    assert (ctl.state, ctl.reason) == ("WAITING", "action queue ran dry: inference delay exceeds H - execution_horizon")
    assert ctl.counts["starved_ticks"] == 12 and ctl.counts["commands"] == 2
    assert (ctl.counts["requests"], ctl.counts["chunks"], ctl.counts["stale_chunks"]) == (2, 1, 0)
    assert ctl.delay_ticks == 14


def test_chunk_arriving_after_its_horizon_is_counted_stale_and_commands_nothing() -> None:
    ctl, _ = make("naive", delay=H, s=4)
    cmds = run(ctl, range(H + 4), lambda t: 1.0)
    assert all(a is None for a in cmds.values())
    assert (ctl.counts["chunks"], ctl.counts["stale_chunks"], ctl.counts["requests"]) == (1, 1, 2)
    assert ctl.counts["starved_ticks"] == 0
    assert ctl.reason == "waiting for the first action chunk"


def test_after_a_hold_the_loop_waits_for_a_first_chunk_again() -> None:
    ctl, _ = make(delay=2, max_obs_age_s=0.2)
    for t in range(5):
        assert (ctl.step(stamped(t * PERIOD), t, t * PERIOD) is None) == (t < 2)
    assert ctl.step(stamped(0.0), 5, 5 * PERIOD) is None and ctl.state == "STALE"
    assert ctl.step(stamped(6 * PERIOD), 6, 6 * PERIOD) is None
    assert (ctl.state, ctl.reason) == ("WAITING", "waiting for the first action chunk")
    assert ctl.counts["holds"] == 1 and ctl.counts["starved_ticks"] == 0
    assert ctl.counts["commands"] == 3


def test_zero_delay_client_is_estimated_at_zero_ticks() -> None:
    ctl, _ = make(delay=0)
    run(ctl, range(3))
    assert ctl.delay_ticks == 0 and ctl.status()["delay_ticks"] == 0


# ----- latency window -------------------------------------------------------------------------
def test_delay_is_the_p95_of_the_recent_window_not_the_max() -> None:
    """Default window 32: 30 samples -> p95 is the 29th smallest; old outliers leave the window."""
    lat = [PERIOD] * 28 + [4 * PERIOD, 6 * PERIOD] + [PERIOD] * 40
    ctl = Controller(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=H), ScriptedLatency(lat))
    delays = []
    for t in range(70 * H):
        if ctl.step(obs(1.0), t) is None:
            break
        if t % H == 0:  # execution_horizon H: one request per H ticks, when the queue is empty
            delays.append(ctl.delay_ticks)
    assert len(delays) == 70 and not ctl.inference.latencies
    assert delays[:28] == [1] * 28
    assert delays[28:30] == [1, 4], "p95 of 30 samples is the 4-tick one, not the 6-tick maximum"
    assert delays[29:60] == [4] * 31, "both outliers in the window of 32: p95 is still the 4-tick one"
    assert delays[60:] == [1] * 10, "the 4-tick sample left the window 32 samples later"
    assert ctl.latency_summary() == pytest.approx({"p50_ms": 50.0, "p95_ms": 50.0, "max_ms": 50.0})


def test_latency_between_whole_periods_rounds_up_to_the_next_tick() -> None:
    ctl = Controller(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=H), ScriptedLatency([2.4 * PERIOD]))
    ctl.step(obs(), 0)
    assert ctl.delay_ticks == 3


def test_negative_latency_from_disagreeing_clocks_never_gives_a_negative_delay() -> None:
    ctl = Controller(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=H), ScriptedLatency([-4 * PERIOD]))
    ctl.step(obs(), 0)
    assert ctl.delay_ticks == 0


def test_latency_summary_before_and_after_the_first_results() -> None:
    ctl = Controller(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=H), ScriptedLatency([0.1, 0.3, 0.2]))
    assert ctl.latency_summary() == {"p50_ms": 0.0, "p95_ms": 0.0, "max_ms": 0.0}
    ctl.step(obs(), 0)
    assert ctl.latency_summary() == pytest.approx({"p50_ms": 100.0, "p95_ms": 100.0, "max_ms": 100.0})
    ctl.step(obs(), H)
    assert ctl.latency_summary() == pytest.approx({"p50_ms": 300.0, "p95_ms": 300.0, "max_ms": 300.0})
    ctl.step(obs(), 2 * H)
    assert ctl.latency_summary() == pytest.approx({"p50_ms": 200.0, "p95_ms": 300.0, "max_ms": 300.0})


# ----- status ---------------------------------------------------------------------------------
def test_status_before_the_first_tick() -> None:
    ctl, _ = make()
    st = ctl.status()
    assert {k: st[k] for k in ("state", "reason", "tick", "queue_depth", "delay_ticks", "strategy", "backend")} == {
        "state": "WAITING", "reason": "no observation yet", "tick": 0, "queue_depth": 0, "delay_ticks": 0,
        "strategy": "rtc", "backend": "toy"}
    assert all(st[k] == 0 for k in ctl.counts) and ctl.last_prefix_len == 0


def test_status_counts_and_queue_depth_mid_run() -> None:
    ctl, _ = make("naive", delay=2, s=4)
    run(ctl, range(6))  # chunk 0 (tick 0) serves 2..15; chunk 1 requested at 4 arrives at 6
    st = ctl.status()
    assert (st["state"], st["reason"], st["tick"], st["queue_depth"], st["delay_ticks"]) == ("OK", "", 5, 11, 2)
    assert {k: st[k] for k in ctl.counts} == {
        "commands": 4, "holds": 0, "requests": 2, "chunks": 1, "discarded_chunks": 0, "stale_chunks": 0,
        "rejected_images": 0, "starved_ticks": 0, "cloud_plans": 0}
    assert st["inference_latency"] == pytest.approx({"p50_ms": 100.0, "p95_ms": 100.0, "max_ms": 100.0})


# ----- configuration --------------------------------------------------------------------------
@pytest.mark.parametrize("s", [1, H])
def test_execution_horizon_from_one_to_the_chunk_length_is_accepted(s: int) -> None:
    ctl, _ = make(delay=0, s=s)
    assert ctl.step(obs(1.0), 0) is not None


def test_execution_horizon_zero_is_refused_even_in_unvalidated_settings() -> None:
    settings = LoopSettings().model_copy(update={"execution_horizon": 0})  # model_copy does not validate
    with pytest.raises(ValueError, match="execution_horizon 0 must be in 1..H=16"):
        Controller(settings, SyncInference(ToyRuntime()))


def test_more_joint_names_than_policy_actions_are_refused() -> None:
    with pytest.raises(ValueError, match="9 joint_names .* 8 actions"):
        Controller(LoopSettings(joint_names=[f"j{i}" for i in range(9)]), SyncInference(ToyRuntime()))


def test_policy_with_hundreds_of_actions_is_accepted() -> None:
    class Wide(ToyRuntime):
        action_dim = 300

    wide = SyncInference(Wide())
    Controller(LoopSettings(joint_names=[f"j{i}" for i in range(300)]), wide)


def test_rtc_named_by_a_runtime_string_still_pins_the_prefix() -> None:
    name = "".join(["r", "tc"])  # equal to "rtc", not the same object (e.g. read from a file)
    settings = LoopSettings(execution_horizon=4, rate_hz=1 / PERIOD).model_copy(update={"strategy": name})
    ctl = Controller(settings, SyncInference(ToyRuntime(), delay_ticks=2, period_s=PERIOD))
    run(ctl, range(5))
    assert ctl.last_prefix_len == 2


# ----- reset ----------------------------------------------------------------------------------
def test_reset_forgets_queued_and_in_flight_actions_but_keeps_the_instruction() -> None:
    rp = FakeReplanner()
    rt = ToyRuntime()
    ctl = Controller(LoopSettings(strategy="naive", execution_horizon=4, rate_hz=1 / PERIOD),
                     SyncInference(rt, delay_ticks=2, period_s=PERIOD), replanner=rp)
    run(ctl, range(5), lambda t: 1.0)  # chunk 1 requested at tick 4, in flight
    ctl.reset()
    assert rp.resets == 1 and (ctl.state, ctl.reason) == ("WAITING", "reset") and ctl.queue.remaining(5) == 0
    assert ctl.step(obs(1.0), 5) is None
    assert ctl.reason == "waiting for the first action chunk"
    assert ctl.step(obs(1.0), 6) is None and ctl.counts["discarded_chunks"] == 1
    assert ctl.step(obs(1.0), 7) is None, "re-requested at tick 6, arrives at 8"
    assert ctl.step(obs(1.0), 8) is not None and rt.encoded == ["pick up the cube"]


def test_cloud_plan_right_after_a_reset_runs_whole() -> None:
    rp = FakeReplanner()
    ctl = Controller(LoopSettings(strategy="naive", execution_horizon=4, rate_hz=1 / PERIOD),
                     SyncInference(ToyRuntime(), delay_ticks=2, period_s=PERIOD), replanner=rp)
    run(ctl, range(5), lambda t: 1.0)
    ctl.reset()
    rp.plans[5] = plan(20)
    assert ctl.step(obs(1.0), 5)[0] == pytest.approx(100.0)
    assert ctl.queue.remaining(5) == 20
    assert ctl.step(obs(1.0), 6)[0] == pytest.approx(101.0)  # the local chunk in flight is discarded here
    assert ctl.queue.remaining(6) == 19, "the plan is not cut to the delay as after an instruction change"
    assert ctl.counts["requests"] == 2, "no local request while more than H - s plan rows are left"


# ----- cloud plans ----------------------------------------------------------------------------
def test_cloud_plan_replaces_the_queue_and_discards_the_local_chunk_in_flight() -> None:
    rp = FakeReplanner(max_horizon=32)
    ctl = Controller(LoopSettings(strategy="naive", execution_horizon=4, rate_hz=1 / PERIOD),
                     SyncInference(ToyRuntime(), delay_ticks=2, period_s=PERIOD), replanner=rp)
    run(ctl, range(5), lambda t: 1.0)  # local chunk requested at tick 4 arrives at 6
    rp.plans[5] = plan(32)
    requests = ctl.counts["requests"]
    cmds = run(ctl, range(5, 40), lambda t: 1.0)
    assert ctl.counts["cloud_plans"] == 1 and ctl.counts["discarded_chunks"] == 1
    assert [cmds[t] for t in range(5, 25)] == pytest.approx([100.0 + t - 5 for t in range(5, 25)])
    assert ctl.counts["requests"] == requests + 4, "local inference resumes at tick 25 (12 plan rows left)"
    assert cmds[27] == pytest.approx(row(1.0, 2)), "local chunk from tick 25 takes over at 27"
    assert rp.observed == list(range(40))


def test_empty_cloud_plan_changes_nothing() -> None:
    rp = FakeReplanner()
    ctl = Controller(LoopSettings(strategy="naive", execution_horizon=4, rate_hz=1 / PERIOD),
                     SyncInference(ToyRuntime(), delay_ticks=2, period_s=PERIOD), replanner=rp)
    run(ctl, range(5), lambda t: 1.0)
    rp.plans[5] = plan(0)
    cmds = run(ctl, range(5, 8), lambda t: 1.0)
    assert ctl.counts["cloud_plans"] == 0 and ctl.counts["discarded_chunks"] == 0
    assert cmds[7] == pytest.approx(row(1.0, 3)), "the local chunk requested at tick 4 still takes over at 6"


def test_cloud_plan_after_the_local_queue_ran_dry_counts_as_having_a_chunk() -> None:
    rp = FakeReplanner()
    ctl = Controller(LoopSettings(strategy="naive", execution_horizon=4, rate_hz=1 / PERIOD),
                     SyncInference(ToyRuntime(), delay_ticks=H, period_s=PERIOD), replanner=rp)
    run(ctl, range(3), lambda t: 1.0)
    rp.plans[3] = plan(2)
    cmds = run(ctl, range(3, 6), lambda t: 1.0)
    assert cmds[3] == pytest.approx(100.0) and cmds[5] is None
    assert ctl.reason == "action queue ran dry: inference delay exceeds H - execution_horizon"


# ----- assembly -------------------------------------------------------------------------------
def test_runtime_that_does_not_name_its_joints_is_assembled() -> None:
    lp = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), SyncInference(ToyRuntime(), 0, PERIOD))
    assert lp.step(obs(1.0), 0) is not None and lp.commands == 1


@pytest.mark.parametrize("swap", [(0, 1), (6, 7)])
def test_any_swap_of_the_policys_joints_is_refused(swap: tuple[int, int]) -> None:
    from test_assembly import PANDA, loop

    names = list(PANDA)
    i, j = swap
    names[i], names[j] = names[j], names[i]
    with pytest.raises(ValueError, match="in its order"):
        loop(names)


def test_closing_the_loop_stops_the_replanner_and_the_inference_client() -> None:
    class Recording(SyncInference):
        closes = 0

        def close(self) -> None:
            self.closes += 1

    rp = FakeReplanner()
    inf = Recording(ToyRuntime(), 0, PERIOD)
    lp = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), inf, rp)
    lp.close()
    assert (rp.closes, inf.closes) == (1, 1)
    bare = Recording(ToyRuntime(), 0, PERIOD)
    build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), bare).close()
    assert bare.closes == 1


# ----- perception -----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(8, 8, 3), (8, 4096, 3), (4096, 8, 3)])
def test_image_sides_from_8_to_4096_pixels_are_accepted(shape: tuple[int, int, int]) -> None:
    img = np.full(shape, 51, np.uint8)
    out = np.zeros((1, 3, 64, 64), np.float32)
    PolicyImage(64)(img, out)
    np.testing.assert_allclose(out, 0.2)
    ObservationStore(["a"]).put_image("front", img, "rgb8")


@pytest.mark.parametrize("shape", [(7, 64, 3), (64, 7, 3), (4097, 64, 3), (64, 4097, 3)])
def test_image_with_one_side_out_of_range_is_rejected(shape: tuple[int, int, int]) -> None:
    with pytest.raises(ImageRejected, match=f"image size {shape[1]}x{shape[0]} outside 8..4096"):
        PolicyImage(64)(np.zeros(shape, np.uint8), np.zeros((1, 3, 64, 64), np.float32))


@pytest.mark.parametrize("shape", [(64, 100, 3), (100, 64, 3), (32, 64, 3), (64, 32, 3)])
def test_image_with_one_side_already_at_policy_size_is_still_resized(shape: tuple[int, int, int]) -> None:
    img = np.random.default_rng(2).integers(0, 256, shape, dtype=np.uint8)
    out = np.zeros((1, 3, 64, 64), np.float32)
    PolicyImage(64)(img, out)
    small = cv2.resize(img, (64, 64), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(out, (small.astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1)[None])


@pytest.mark.parametrize("n_vel", [2, 5])
def test_joint_velocities_not_one_per_name_read_as_zero(n_vel: int) -> None:
    store = ObservationStore(["j0", "j1", "j2", "j3"])
    store.put_joints(["j0", "j1", "j2", "j3"], [1.0, 2.0, 3.0, 4.0], [0.5] * n_vel)
    np.testing.assert_array_equal(store.obs["qpos"], [1, 2, 3, 4])
    np.testing.assert_array_equal(store.obs["qvel"], [0, 0, 0, 0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.bool_])
def test_image_of_any_dtype_but_uint8_is_rejected(dtype) -> None:
    with pytest.raises(ImageRejected, match="expected uint8"):
        PolicyImage(64)(np.zeros((64, 64, 3), dtype), np.zeros((1, 3, 64, 64), np.float32))


def test_rgb8_frame_is_stored_unchanged() -> None:
    frame = np.random.default_rng(3).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    store = ObservationStore(["a"])
    store.put_image("front", frame, "rgb8")
    np.testing.assert_array_equal(store.obs["front"], frame)


def test_joint_order_changing_between_messages_is_followed() -> None:
    names = ["j0", "j1", "j2", "j3"]
    store = ObservationStore(names)
    store.put_joints(names[::-1], [3.0, 2.0, 1.0, 0.0], [])
    np.testing.assert_array_equal(store.obs["qpos"], [0, 1, 2, 3])
    store.put_joints(names, [4.0, 5.0, 6.0, 7.0], [])
    np.testing.assert_array_equal(store.obs["qpos"], [4, 5, 6, 7])


def test_joint_state_of_many_joints_keeps_positions_and_velocities() -> None:
    names = [f"j{i}" for i in range(300)]
    store = ObservationStore(names)
    store.put_joints(names, np.arange(300.0), np.full(300, 0.5))
    np.testing.assert_array_equal(store.obs["qpos"], np.arange(300.0))
    np.testing.assert_array_equal(store.obs["qvel"], np.full(300, 0.5))


def test_bgr8_named_by_a_runtime_string_is_still_converted() -> None:
    encoding = "".join(["bgr", "8"])  # equal to "bgr8", not the same object (e.g. from a ROS message)
    frame = np.random.default_rng(4).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    bgr = np.ascontiguousarray(frame[:, :, ::-1])
    out = np.zeros((1, 3, 64, 64), np.float32)
    PolicyImage(64)(bgr, out, encoding)
    np.testing.assert_array_equal(out[0], frame.transpose(2, 0, 1) / np.float32(255.0))
    store = ObservationStore(["a"])
    store.put_image("front", bgr, encoding)
    np.testing.assert_array_equal(store.obs["front"], frame)


@pytest.mark.parametrize("shape", [(64, 64, 3, 1), (64, 64, 2)])
def test_image_that_is_not_three_channel_hwc_is_rejected(shape: tuple[int, ...]) -> None:
    with pytest.raises(ImageRejected, match=r"expected \[H, W, 3\]"):
        PolicyImage(64)(np.zeros(shape, np.uint8), np.zeros((1, 3, 64, 64), np.float32))


def test_joint_state_with_more_positions_than_names_is_rejected() -> None:
    from omni_vla.core.perception import JointStateRejected

    store = ObservationStore(["j0", "j1"])
    with pytest.raises(JointStateRejected, match="2 names but 3 positions"):
        store.put_joints(["j0", "j1"], [0.0, 1.0, 2.0], [])


def test_frame_growing_in_size_is_stored_at_its_new_size() -> None:
    store = ObservationStore(["a"])
    store.put_image("front", np.zeros((48, 64, 3), np.uint8), "rgb8")
    big = np.full((128, 128, 3), 7, np.uint8)
    store.put_image("front", big, "bgr8")
    np.testing.assert_array_equal(store.obs["front"], big)
