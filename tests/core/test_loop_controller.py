"""Controller in simulated time (synchronous inference with a delay of d ticks).

Checks what the robot would be commanded: timing of the first chunk, each splice strategy's
values at the splice, RTC prefix inputs, instruction changes, fail-closed holds on bad or stale
input, and that the steady-state tick allocates nothing.

Also, one behaviour per test: which input a hold names, where "too old" starts, starvation and stale-chunk
counting, the latency window behind the delay estimate, reset and cloud-plan splicing. `Controller.update`
must refuse any change to a setting the queue and buffers were built from (in either direction) and accept a
settings object that differs only in live settings, however it was built; a chunk the controller did not
request (left in flight in its inference client) is never executed.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from controller_rig import PERIOD, FakeReplanner, make, obs, row, run
from omni_vla.core.controller import Controller
from omni_vla.core.loop import ManualClock, Scheduler
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference
from toy_runtime import H, ToyRuntime


def test_first_command_comes_delay_ticks_after_the_first_request() -> None:
    ctl, _ = make(delay=2)
    cmds = run(ctl, range(4), lambda t: 1.0)
    assert cmds[0] is None and cmds[1] is None
    assert ctl.state == "OK"
    assert cmds[2] == pytest.approx(row(1.0, 2)), "rows 0-1 elapsed during inference: row 2 at tick 2"
    assert cmds[3] == pytest.approx(row(1.0, 3))


def test_waiting_status_before_the_first_chunk() -> None:
    ctl, _ = make(delay=2)
    assert ctl.step(obs(), 0) is None
    assert (ctl.state, ctl.reason) == ("WAITING", "waiting for the first action chunk")


def test_rtc_pins_committed_actions_as_prefix_and_splices_continuously() -> None:
    ctl, rt = make("rtc", delay=2, s=4)
    cmds = run(ctl, range(12))
    # chunk 0 requested at tick 0 (q=0); next request when H - s = 12 actions remain: tick 4 (q=4)
    assert len(rt.requests) == 3 and ctl.delay_ticks == 2
    prefix, state = rt.requests[1]
    assert state[0] == 4.0
    np.testing.assert_allclose(prefix[:, 0], [row(0, 4), row(0, 5)], rtol=1e-6)  # ticks 4, 5 of chunk 0
    assert cmds[4] == pytest.approx(row(0, 4)) and cmds[5] == pytest.approx(row(0, 5))
    assert cmds[6] == pytest.approx(row(4, 2)), "chunk 1 takes over at tick 6 = 4 + d, its row 2"
    assert ctl.last_prefix_len == 2


def test_naive_replaces_at_the_time_aligned_row_without_prefix() -> None:
    ctl, rt = make("naive", delay=3, s=5)
    cmds = run(ctl, range(10))
    assert [len(p) for p, _ in rt.requests] == [0, 0]
    assert cmds[8] == pytest.approx(row(5, 3)), "chunk from tick 5 arrives at 8: its row 3"
    assert cmds[7] == pytest.approx(row(0, 7)), "old chunk runs until the new one arrives"


def test_average_blends_old_and_new_on_the_overlap() -> None:
    ctl, _ = make("average", delay=2, s=4, average_old_weight=0.3)
    cmds = run(ctl, range(10))
    assert cmds[6] == pytest.approx(0.3 * row(0, 6) + 0.7 * row(4, 2), rel=1e-6)
    assert cmds[9] == pytest.approx(0.3 * row(0, 9) + 0.7 * row(4, 5), rel=1e-6)


def test_a_chunk_with_a_non_finite_value_is_dropped_and_counted_while_the_old_one_runs_on() -> None:
    ctl, rt = make("naive", delay=2, s=4)
    run(ctl, range(4))  # chunk 0 (asked for at tick 0) serves ticks 2-15; every later one is poisoned
    infer = rt.infer

    def poisoned(*args, **kwargs) -> None:
        infer(*args, **kwargs)
        (kwargs["out"] if "out" in kwargs else args[-1])[5, 0] = np.nan

    rt.infer = poisoned
    cmds = run(ctl, range(4, 14))
    assert ctl.counts["non_finite_chunks"] >= 2 and ctl.counts["chunks"] == 1
    assert "non-finite" in ctl.last_rejection
    assert all(cmds[t] == pytest.approx(row(0, t)) for t in range(4, 14)), "chunk 0 still runs, nothing from NaN"


def test_delay_estimate_uses_latency_p95_over_the_period() -> None:
    ctl, _ = make("rtc", delay=3, s=5)
    run(ctl, range(12))
    assert ctl.delay_ticks == 3


def test_instruction_change_encodes_once_discards_old_work_and_keeps_committed_d() -> None:
    ctl, rt = make("rtc", delay=2, s=4)
    cmds = run(ctl, range(9))  # request at tick 8 is in flight (arrives at 10)
    for t in range(9, 14):
        a = ctl.step(obs(float(t), instruction="place it in the bin"), t)
        cmds[t] = None if a is None else float(a[0])
    assert rt.encoded == ["pick up the cube", "place it in the bin"], "encoded on change only"
    assert ctl.counts["discarded_chunks"] == 1, "the chunk computed for the old instruction is dropped"
    prefix, state = rt.requests[-1]
    assert state[0] == 10.0
    np.testing.assert_allclose(prefix[:, 0], [cmds[10], cmds[11]], rtol=1e-6)
    assert cmds[10] == pytest.approx(row(4, 6)), "committed actions still run during inference"
    assert cmds[12] == pytest.approx(row(10, 2)), "new instruction's chunk from tick 12"
    np.testing.assert_array_equal(ctl.inference.instruction[0], rt.encode_instruction("place it in the bin"))


def test_instruction_change_truncates_queue_beyond_d_for_naive() -> None:
    ctl, _ = make("naive", delay=2, s=4)
    run(ctl, range(6))
    ctl.step(obs(6.0, instruction="new task"), 6)
    assert ctl.queue.end == 6 + 2, "only the committed d actions survive the change"


def test_missing_joint_state_gives_no_command_and_waits() -> None:
    ctl, rt = make()
    o = obs()
    o["qpos"] = None
    for t in range(5):
        assert ctl.step(o, t) is None
    assert (ctl.state, ctl.reason) == ("WAITING", "waiting for the first joint state")
    assert rt.calls == 0


def test_stale_camera_stops_commands_as_stale_then_recovers() -> None:
    ctl, _ = make(delay=1, max_obs_age_s=0.2)
    o = obs(1.0)
    o["stamps"] = {"front": 0.0, "wrist": 0.0, "joints": 0.0}
    got = []
    for t in range(10):
        now = t * PERIOD
        o["stamps"]["wrist"] = o["stamps"]["joints"] = now
        if t < 3:
            o["stamps"]["front"] = now  # front camera freezes after tick 2
        got.append(ctl.step(o, t, now))
    assert got[1] is not None and got[2] is not None
    assert all(a is None for a in got[7:]), "front image 0.25 s old at tick 7"
    assert ctl.state == "STALE" and ctl.reason == "front camera image older than max_obs_age_s=0.2 s"
    assert ctl.queue.remaining(9) == 0, "queued actions are flushed, not resumed later"
    o["stamps"]["front"] = 10 * PERIOD
    assert ctl.step(o, 10, 10 * PERIOD) is None and ctl.state == "WAITING"
    assert ctl.step(o, 11, 11 * PERIOD) is not None and ctl.state == "OK"


def test_bad_image_is_rejected_and_queued_actions_continue() -> None:
    ctl, _ = make(delay=1, s=4)
    run(ctl, range(3))
    o = obs(3.0)
    o["front"] = np.zeros((128, 128), np.uint8)  # mono: wrong channel count
    assert ctl.step(o, 4) is not None
    assert ctl.counts["rejected_images"] == 1 and "expected [H, W, 3]" in ctl.last_rejection


def test_no_instruction_means_no_command() -> None:
    ctl, rt = make()
    assert ctl.step(obs(instruction=None), 0) is None
    assert (ctl.state, ctl.reason) == ("WAITING", "no instruction yet") and rt.calls == 0


def test_configuration_errors_are_explicit() -> None:
    rt = ToyRuntime()
    with pytest.raises(ValueError, match="3 joint_names .* 8 actions"):
        Controller(LoopSettings(joint_names=["a", "b", "c"]), SyncInference(rt))
    with pytest.raises(ValueError, match="execution_horizon 17 must be in 1..H=16"):
        Controller(LoopSettings(execution_horizon=17), SyncInference(rt))


@pytest.mark.parametrize("strategy", ["rtc", "average", "naive"])
def test_tick_path_allocates_nothing_after_warm_up(strategy: str) -> None:
    rt = ToyRuntime()
    ctl = Controller(LoopSettings(strategy=strategy, execution_horizon=4), SyncInference(rt, 2, PERIOD))
    o = obs(0.3)
    stamps = {"front": 0.0, "wrist": 0.0, "joints": 0.0}
    o["stamps"] = stamps
    for t in range(300):
        stamps["front"] = stamps["wrist"] = stamps["joints"] = t * PERIOD
        ctl.step(o, t, t * PERIOD)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for t in range(300, 1300):
            now = t * PERIOD
            stamps["front"] = stamps["wrist"] = stamps["joints"] = now
            assert ctl.step(o, t, now) is not None
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert rt.calls > 200, "inference really ran during the measured ticks"
    assert growth < 1024, f"{growth} bytes retained over 1000 ticks"


def test_scheduler_drives_controller_one_command_per_tick_on_a_fake_clock() -> None:
    ctl, _ = make(delay=2, s=4)
    clock = ManualClock()
    commands: list[tuple[int, float]] = []

    def tick(k: int, t: float) -> None:
        a = ctl.step(obs(1.0), k, t)
        if a is not None:
            commands.append((k, float(a[0])))

    sched = Scheduler(1 / PERIOD, tick, clock=clock)
    sched.run(max_ticks=200)
    assert [k for k, _ in commands] == list(range(2, 200))
    assert sched.stats.missed == 0


def test_cloud_plan_longer_than_a_chunk_runs_whole_then_local_chunks_resume() -> None:
    from omni_vla.cloud.replanner import Replanner
    from omni_vla_sim.openpi_server import PolicyServer
    from openpi_rig import RampPolicy, config

    with PolicyServer(RampPolicy(horizon=32)).thread() as st:
        rp = Replanner(config(st.uri, max_plan_age_s=60.0), clock=lambda: 0.0).start()
        try:
            rt = ToyRuntime()
            ctl = Controller(LoopSettings(strategy="rtc", execution_horizon=4, rate_hz=1 / PERIOD),
                             SyncInference(rt, delay_ticks=0, period_s=PERIOD), replanner=rp)
            run(ctl, range(5), lambda t: 1.0)
            rp.request_plan("operator")
            assert ctl.step(obs(1.0), 5) is not None  # hands the request off; never waits for it
            local_requests = ctl.counts["requests"]
            assert rp.wait_for_plan(5.0)
            cmds = run(ctl, range(6, 25), lambda t: 1.0)
            during_plan = ctl.counts["requests"] - local_requests
            cmds.update(run(ctl, range(25, 40), lambda t: 1.0))
        finally:
            rp.close()
    assert ctl.counts["cloud_plans"] == 1
    # Requested at tick 5, spliced at tick 6 from row 1 (time-aligned); the 32-row plan runs whole ...
    assert [cmds[t] for t in range(6, 25)] == pytest.approx([1.0 + 0.01 * (t - 5) for t in range(6, 25)])
    # ... with no local inference until H - s = 12 of its rows are left (tick 25), then local chunks.
    assert during_plan == 0
    assert ctl.counts["requests"] > local_requests and cmds[39] is not None


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
        "rejected_images": 0, "starved_ticks": 0, "cloud_plans": 0, "non_finite_chunks": 0}
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


def test_live_update_refuses_a_larger_fixed_setting_as_well_as_a_smaller_one() -> None:
    ctl, _ = make(delay=0, s=4)
    with pytest.raises(ValueError, match="execution_horizon cannot change while the loop runs: reconfigure"):
        ctl.update(ctl.config.model_copy(update={"execution_horizon": 8}))
    assert ctl.config.execution_horizon == 4


def test_live_update_accepts_an_equal_settings_object_built_afresh() -> None:
    ctl, _ = make(delay=0, s=4, max_obs_age_s=0.2)
    fresh = LoopSettings(**{**ctl.config.model_dump(), "max_obs_age_s": 0.5})
    assert fresh is not ctl.config and fresh.joint_names is not ctl.config.joint_names
    ctl.update(fresh)
    o = obs(1.0)
    o["stamps"] = {"front": 0.0, "wrist": 0.0, "joints": 0.0}
    assert ctl.step(o, 8, 0.4) is not None and ctl.state == "OK"
    assert ctl.step(o, 12, 0.6) is None and ctl.reason == "front camera image older than max_obs_age_s=0.5 s"


def test_a_chunk_this_controller_never_requested_is_discarded_not_executed() -> None:
    rt = ToyRuntime(record=True)
    inf = SyncInference(rt, delay_ticks=1, period_s=PERIOD)
    inf.submit(0, 0, 0.0)  # left in flight by an earlier owner of the client
    ctl = Controller(LoopSettings(execution_horizon=4, rate_hz=1 / PERIOD), inf)
    ctl.set_instruction("pick up the cube")
    assert ctl.step(obs(1.0), 1, PERIOD) is None
    assert ctl.counts["discarded_chunks"] == 1 and ctl.counts["chunks"] == 0


def test_a_chunk_left_in_flight_is_counted_as_discarded_even_on_a_first_tick_without_instruction() -> None:
    inf = SyncInference(ToyRuntime(), delay_ticks=0, period_s=PERIOD)
    inf.submit(0, 0, 0.0)
    ctl = Controller(LoopSettings(execution_horizon=4, rate_hz=1 / PERIOD), inf)
    assert ctl.step(obs(1.0, instruction=None), 0, 0.0) is None and ctl.reason == "no instruction yet"
    assert ctl.counts["discarded_chunks"] == 1 and ctl.counts["chunks"] == 0
