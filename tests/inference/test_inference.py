"""Inference clients: the synchronous sim-time client and the supervised worker process.

ToyRuntime is a small deterministic numpy PolicyRuntime whose output encodes its inputs (state,
image mean, prefix), so tests can tell exactly which observation and prefix a chunk came from
(tests/support/toy_runtime.py).
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from omni_vla.inference.client import SyncInference, draw_noise, open_runtime
from omni_vla.inference.worker import ProcessInference
from tiny_bundles import tiny_bundle
from toy_runtime import D, H, STEP, ToyRuntime, toy_factory


@pytest.fixture(scope="module")
def mnn_bundle(tmp_path_factory: pytest.TempPathFactory):
    return tiny_bundle(tmp_path_factory)


def expected_chunk(state: np.ndarray, front_mean: float) -> np.ndarray:
    ramp = np.arange(1, H + 1, dtype=np.float32)[:, None] * np.ones((1, D), np.float32) * STEP
    return ramp * np.float32(1.0 + front_mean) + state.astype(np.float32)


# ---------------------------------------------------------------- synchronous (sim-time) client
def test_sync_client_releases_chunk_exactly_delay_ticks_after_request() -> None:
    client = SyncInference(ToyRuntime(), delay_ticks=3, period_s=0.05)
    client.state[0] = np.arange(D)
    client.set_instruction("pick")
    client.submit(10, 0, 0.5)
    assert client.busy
    assert [client.poll(t, 0.0) for t in (10, 11, 12)] == [None, None, None]
    res = client.poll(13, 0.65)
    assert res is not None and res.request_tick == 10
    assert res.latency_s == pytest.approx(0.15)
    np.testing.assert_allclose(res.actions, expected_chunk(client.state[0], 0.0), rtol=1e-6)
    assert not client.busy and client.poll(14, 0.7) is None


def test_noise_is_drawn_in_place_and_scaled_by_the_temperature() -> None:
    out = np.full((1, H, D), 7.0, np.float32)
    buf = out.ctypes.data
    draw_noise(np.random.default_rng(1), out, 1.0)
    full = out.copy()
    draw_noise(np.random.default_rng(1), out, 0.5)
    np.testing.assert_array_equal(out, full * np.float32(0.5))
    draw_noise(np.random.default_rng(1), out, 0.0)
    assert not out.any() and out.ctypes.data == buf and out.dtype == np.float32
    assert full.std() > 0.5


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_noise_scale_outside_zero_one_is_refused_by_name(bad: float) -> None:
    with pytest.raises(ValueError, match="noise_scale"):
        SyncInference(ToyRuntime(), noise_scale=bad)
    with pytest.raises(ValueError, match="noise_scale"):
        ProcessInference("toy", "toy:", factory=toy_factory, noise_scale=bad)


def test_sync_client_encodes_instruction_once_per_call_not_per_request() -> None:
    rt = ToyRuntime()
    client = SyncInference(rt)
    client.set_instruction("open the drawer")
    for t in range(5):
        client.submit(t, 0, 0.0)
        client.poll(t, 0.0)
    assert rt.encoded == ["open the drawer"]
    assert np.any(client.instruction != 0)


# ---------------------------------------------------------------- worker process
def _worker(spec: str, **kw) -> ProcessInference:
    kw.setdefault("startup_timeout_s", 30.0)
    return ProcessInference("toy", spec, factory=toy_factory, **kw).start()


def _wait_result(client: ProcessInference, timeout: float = 5.0):
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        res = client.poll(0, 0.0)
        if res is not None:
            return res
        time.sleep(0.001)
    return None


def test_worker_process_computes_chunk_from_shared_memory_inputs() -> None:
    client = _worker("toy:latency=0.01")
    try:
        assert (client.horizon, client.action_dim, client.cameras) == (H, D, ToyRuntime.cameras)
        assert client.pid != os.getpid()
        client.set_instruction("stack the blocks")
        client.images["front"][:] = 0.5
        client.state[0] = np.linspace(-1, 1, D)
        client.submit(42, 0, 0.0)
        assert client.busy
        res = _wait_result(client)
        assert res is not None and res.request_tick == 42
        np.testing.assert_allclose(res.actions, expected_chunk(client.state[0], 0.5), rtol=1e-6)
        assert 0.01 <= res.latency_s < 1.0
        assert np.any(client.instruction != 0), "the worker wrote the instruction embedding"
    finally:
        client.close()
    assert client.worker_state == "closed"


def test_worker_pins_prefix_rows_sent_through_shared_memory() -> None:
    client = _worker("toy:")
    try:
        client.set_instruction("x")
        client.prefix[0, :3] = 7.0
        client.submit(0, 3, 0.0)
        res = _wait_result(client)
        assert res is not None
        np.testing.assert_array_equal(res.actions[:3], 7.0)
        assert np.all(res.actions[3:] != 7.0)
    finally:
        client.close()


def test_killed_worker_is_reported_then_restarted_with_backoff() -> None:
    client = _worker("toy:latency=0.2", backoff_s=0.3)
    try:
        client.set_instruction("x")
        client.submit(0, 0, 0.0)
        first_pid = client.pid
        os.kill(first_pid, signal.SIGKILL)
        t_fail = time.perf_counter()
        while client.healthy and time.perf_counter() - t_fail < 5:
            client.poll(0, 0.0)
        assert not client.healthy
        assert "died" in client.reason and "restarting in 0.3 s" in client.reason
        while not client.healthy and time.perf_counter() - t_fail < 30:
            client.poll(0, 0.0)
            time.sleep(0.005)
        assert client.healthy
        assert time.perf_counter() - t_fail >= 0.3, "restart waited for the backoff"
        assert client.pid != first_pid and client.restarts == 1 and client.failures == 1
        client.submit(1, 0, 0.0)
        res = _wait_result(client)
        assert res is not None and res.request_tick == 1
    finally:
        client.close()


def test_hung_worker_is_killed_at_deadline_and_backoff_doubles() -> None:
    client = _worker("toy:mode=hang", timeout_s=0.2, backoff_s=0.1)
    try:
        reasons = []
        for attempt in range(2):
            client.submit(attempt, 0, 0.0)
            pid = client.pid
            t0 = time.perf_counter()
            while client.healthy and time.perf_counter() - t0 < 5:
                client.poll(attempt, 0.0)
            assert not client.healthy
            assert time.perf_counter() - t0 >= 0.2, "not declared hung before the deadline"
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)  # the hung worker was killed and reaped
            reasons.append(client.reason)
            while not client.healthy and time.perf_counter() - t0 < 30:
                client.poll(attempt, 0.0)
                time.sleep(0.005)
            assert client.healthy
        assert "hung" in reasons[0] and "restarting in 0.1 s" in reasons[0]
        assert "restarting in 0.2 s" in reasons[1], "second consecutive failure doubles the backoff"
    finally:
        client.close()


def test_a_policy_slower_than_the_timeout_is_timed_at_start_up_and_not_killed_as_hung() -> None:
    """Chunks of 0.3 s against a 0.1 s timeout: answered, not killed (the warm chunk raised the bound)."""
    client = _worker("toy:latency=0.3", timeout_s=0.1)
    try:
        assert 0.3 <= client.warm_chunk_s < 0.6
        for tick in range(2):
            client.submit(tick, 0, 0.0)
            assert _wait_result(client) is not None and client.healthy and client.failures == 0
    finally:
        client.close()


def test_a_slow_answer_raises_the_hung_bound_so_a_slower_one_after_it_is_not_killed() -> None:
    """Warm chunk 0.3 s: hung after 0.9 s. An answer of 0.6 s raises that to twice it (1.2 s), so the next one, 1.05 s
    (beyond the warm chunk's bound), is answered, not killed."""
    client = _worker("toy:latency=0.3,mode=slowing", timeout_s=0.1)
    try:
        assert client.hung_after_s == pytest.approx(3 * client.warm_chunk_s)
        first = client.hung_after_s
        client.submit(0, 0, 0.0)
        res = _wait_result(client)
        assert res is not None and client.healthy
        assert client.hung_after_s == pytest.approx(2 * res.latency_s) and client.hung_after_s > first
        client.submit(1, 0, 0.0)
        res = _wait_result(client)
        assert res is not None and client.healthy and client.failures == 0, client.reason
        assert res.latency_s > first, "the second answer must be slower than the warm chunk's bound"
    finally:
        client.close()


def test_a_slow_policy_that_hangs_is_still_killed_within_three_warm_chunks() -> None:
    client = _worker("toy:latency=0.3,mode=hang", timeout_s=0.1, startup_timeout_s=30.0)
    try:
        client.submit(0, 0, 0.0)
        t0 = time.perf_counter()
        while client.healthy and time.perf_counter() - t0 < 10:
            client.poll(0, 0.0)
        waited = time.perf_counter() - t0
        assert not client.healthy and "hung" in client.reason
        assert 3 * client.warm_chunk_s <= waited < 3 * client.warm_chunk_s + 0.5, (waited, client.warm_chunk_s)
    finally:
        client.close()


def test_the_hang_bound_never_exceeds_the_start_up_budget() -> None:
    # 3 warm chunks (6 s) past the budget; the budget leaves the start-up (load, one 2 s chunk) room on a busy machine.
    capped = _worker("toy:latency=2.0", timeout_s=0.1, startup_timeout_s=5.0)
    try:
        assert capped.hung_after_s == 5.0, "never beyond max(timeout_s, startup_timeout_s)"
    finally:
        capped.close()


def test_worker_refusing_an_instruction_makes_client_unhealthy_until_a_good_one() -> None:
    client = _worker("toy:")
    try:
        client.set_instruction("unknown words")
        client.submit(0, 0, 0.0)
        t0 = time.perf_counter()
        while client.healthy and time.perf_counter() - t0 < 5:
            client.poll(0, 0.0)
        assert not client.healthy and client.worker_state == "ready", "the worker itself is fine"
        assert "cannot use instruction 'unknown words'" in client.reason
        client.set_instruction("pick")
        assert client.healthy
        client.submit(1, 0, 0.0)
        assert _wait_result(client) is not None
    finally:
        client.close()


def test_worker_that_cannot_load_fails_start_with_its_reason_in_one_line() -> None:
    with pytest.raises(RuntimeError, match="no bundle at toy:mode=fail_load") as exc:
        _worker("toy:mode=fail_load")
    assert "\n" not in str(exc.value) and "Traceback" not in str(exc.value)
    assert "failed to load the runtime: FileNotFoundError: no bundle at" in str(exc.value)


# ---------------------------------------------------------------- controller on top of the worker
def test_controller_holds_and_reports_while_worker_is_down_then_resumes() -> None:
    from omni_vla.core.settings import LoopSettings
    from omni_vla.core.controller import Controller

    client = _worker("toy:latency=0.003", backoff_s=0.2)
    ctl = Controller(LoopSettings(rate_hz=100, execution_horizon=4), client)
    img = np.zeros((64, 64, 3), np.uint8)
    o = {"front": img, "wrist": img, "qpos": np.zeros(D), "qvel": np.zeros(D), "instruction": "pick"}
    log: list[tuple[float, bool, str, str]] = []

    def tick_for(seconds: float, k0: int, until=lambda: False) -> int:
        k = k0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end and not until():
            now = time.perf_counter()
            a = ctl.step(o, k, now)
            log.append((now, a is not None, ctl.state, ctl.reason))
            k += 1
            time.sleep(0.01)
        return k

    try:
        k = tick_for(1.0, 0)
        assert log[-1][1], f"commanding before the kill: {log[-1]}"
        os.kill(client.pid, signal.SIGKILL)
        t_kill = time.perf_counter()
        n0 = len(log)
        k = tick_for(0.1, k)
        after = log[n0:]
        assert not any(ok for _, ok, _, _ in after[3:]), "no commands once the death is seen"
        held = [r for r in after if r[2] == "ERROR"]
        # killed while idle: "died"; killed mid-request (a loaded machine): "exited while answering"
        assert held and ("inference worker died" in held[0][3] or "inference worker exited while answering" in held[0][3])
        assert "restarting in 0.2 s" in held[0][3]
        t_held = held[0][0]
        tick_for(20.0, k, until=lambda: log[-1][1])
        resumed = [t for t, ok, _, _ in log[n0:] if ok and t > t_held]
        assert resumed, "commands resume after the restart"
        assert resumed[0] - t_kill >= 0.2, "not before the backoff delay"
        assert client.restarts == 1 and ctl.counts["holds"] > 0
    finally:
        client.close()


def test_controller_with_unknown_instruction_holds_with_the_reason() -> None:
    from omni_vla.core.settings import LoopSettings
    from omni_vla.core.controller import Controller

    ctl = Controller(LoopSettings(), SyncInference(ToyRuntime()))
    img = np.zeros((64, 64, 3), np.uint8)
    o = {"front": img, "wrist": img, "qpos": np.zeros(D), "qvel": np.zeros(D), "instruction": "unknown task"}
    assert ctl.step(o, 0) is None
    assert ctl.state == "ERROR" and ctl.reason.startswith("cannot use instruction 'unknown task'")
    o["instruction"] = "pick"
    assert ctl.step(o, 1) is not None


# ---------------------------------------------------------------- real bundle (MNN) in the worker
@pytest.mark.slow
@pytest.mark.parametrize("noise_scale", [1.0, 0.25, 0.0])
def test_worker_with_real_mnn_bundle_matches_the_in_process_runtime(mnn_bundle, noise_scale: float) -> None:
    """Same chunk as the runtime in this process given the worker's seeded noise, scaled by the temperature."""
    client = ProcessInference("mnn", str(mnn_bundle), threads=1, seed=7, noise_scale=noise_scale).start()
    local = open_runtime("mnn", str(mnn_bundle), 1)
    try:
        assert client.joint_names == local.joint_names and client.horizon == local.horizon
        rng = np.random.default_rng(3)
        images = {c: rng.random(client.images[c].shape, dtype=np.float32) for c in ("front", "wrist")}
        for camera, image in images.items():
            client.images[camera][:] = image
        inputs = {
            "state": np.array([[0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04]], np.float32),
            "prefix": (0.01 * rng.standard_normal(client.prefix.shape)).astype(np.float32),
        }
        for name, value in inputs.items():
            getattr(client, name)[:] = value
        inputs["prefix"] += inputs["state"][:, None, :]  # absolute targets near the current pose
        client.prefix[:] = inputs["prefix"]
        text = "pick up the red cube"
        client.set_instruction(text)
        client.submit(5, 3, 0.0)
        res = _wait_result(client, 30.0)
        assert res is not None and res.request_tick == 5
        noise = np.random.default_rng(7).standard_normal((1, client.horizon, client.action_dim), dtype=np.float32)
        noise *= np.float32(noise_scale)
        want = np.zeros((client.horizon, client.action_dim), np.float32)
        emb = local.encode_instruction(text)[None]
        local.infer(images, inputs["state"], emb, inputs["prefix"], 3, noise, want)
        np.testing.assert_allclose(res.actions, want, atol=1e-5)
        np.testing.assert_allclose(res.actions[:3], inputs["prefix"][0, :3], atol=1e-4)
        assert 0 < client.last_infer_s < res.latency_s
    finally:
        client.close()
        local.close()
