"""Controller in simulated time (synchronous inference with a delay of d ticks).

Checks what the robot would be commanded: timing of the first chunk, each splice strategy's
values at the splice, RTC prefix inputs, instruction changes, fail-closed holds on bad or stale
input, and that the steady-state tick allocates nothing.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from omni_vla.core.settings import LoopSettings
from omni_vla.core.controller import Controller
from omni_vla.inference.client import SyncInference
from omni_vla.core.loop import ManualClock, Scheduler
from test_inference import STEP, ToyRuntime

PERIOD = 0.05


def make(strategy: str = "rtc", delay: int = 2, s: int = 4, **cfg) -> tuple[Controller, ToyRuntime]:
    rt = ToyRuntime(record=True)
    inf = SyncInference(rt, delay_ticks=delay, period_s=PERIOD)
    return Controller(LoopSettings(strategy=strategy, execution_horizon=s, rate_hz=1 / PERIOD, **cfg), inf), rt


def obs(q: float = 0.0, instruction: str | None = "pick up the cube", size: int = 128) -> dict:
    img = np.zeros((size, size, 3), np.uint8)
    return {"front": img, "wrist": img.copy(), "qpos": np.full(8, q), "qvel": np.zeros(8), "instruction": instruction}


def row(q: float, i: int) -> float:
    """ToyRuntime chunk value (black image) for state q, row i."""
    return float(np.float32(q) + np.float32((i + 1) * STEP))


def run(ctl: Controller, ticks: range, q_of_tick=lambda t: float(t)) -> dict[int, float | None]:
    """Step the controller with qpos = q_of_tick(t); returns the commanded joint-1 value per tick."""
    out: dict[int, float | None] = {}
    for t in ticks:
        a = ctl.step(obs(q_of_tick(t)), t)
        out[t] = None if a is None else float(a[0])
    return out


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
    from test_openpi_reliability import RampPolicy, config

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
