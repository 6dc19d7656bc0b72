"""Re-planning client against real websocket servers on loopback that misbehave in every way we know.

In every case: the tick-side poll() returns at once (None while a request is in flight), failures
are logged and counted, the client recovers, and no unvalidated action ever comes out.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection

from omni_vla.cloud import codec
from omni_vla.cloud.plan import PlanRejected, validate_actions
from omni_vla.cloud.replanner import Replanner
from omni_vla_sim.openpi_server import PolicyServer, ServerThread
from openpi_rig import PERIOD, D, RampPolicy, Tick, config, free_port, make_obs, ramp_server, wait_for  # noqa: F401


class ScriptedServer:
    """A raw server: metadata first, then connection n answers every request with replies[n]."""

    def __init__(self, replies: list) -> None:
        self.replies, self.connections, self.requests = replies, 0, 0

    async def handler(self, ws: ServerConnection) -> None:
        n = min(self.connections, len(self.replies) - 1)
        self.connections += 1
        await ws.send(codec.packb({"scripted": True}))
        async for msg in ws:
            self.requests += 1
            obs = codec.unpackb(msg)
            reply = self.replies[n]
            if reply == "good":
                reply = codec.packb(RampPolicy().infer(obs))
            elif reply == "silent":
                continue
            await ws.send(reply)


@contextmanager
def scripted_replanner(replies: list, **client: object) -> Iterator[tuple[ScriptedServer, Replanner, Tick]]:
    """A connected Replanner talking to a ScriptedServer that answers `replies` in turn."""
    scripted = ScriptedServer(replies)
    cfg = config("ws://placeholder", client=client)
    with ServerThread(scripted.handler) as st:
        cfg.client.uri = st.uri
        with Replanner(cfg) as rp:
            assert wait_for(lambda: rp.connected, 3.0)
            yield scripted, rp, Tick(rp)


def test_plan_validation_refuses_everything_but_finite_float_plans():
    ok = np.zeros((4, D), np.float32)
    assert validate_actions(ok, D, 8) is ok
    for bad, why in [(np.zeros((4, D), np.int64), "dtype"), (np.zeros((4, D), np.float16), "dtype"),
                     (np.zeros((4, D), ">f8"), "dtype"), (np.zeros((4, 7)), "shape"), (np.zeros(D), "shape"),
                     (np.zeros((9, D)), "horizon"), (np.zeros((0, D)), "horizon"),
                     (np.full((4, D), np.nan), "non-finite"), ([[0.0] * D], "array")]:
        with pytest.raises(PlanRejected, match=why):
            validate_actions(bad, D, 8)


def test_server_absent_at_start_client_retries_with_backoff_then_plans(caplog):
    port = free_port()
    caplog.set_level(logging.INFO, logger="omni_vla.cloud")
    with Replanner(config(f"ws://127.0.0.1:{port}", max_plan_age_s=0.5)) as rp:
        t = Tick(rp)
        t.request()
        assert t.poll_until(0.7) is None  # nobody there: no plan, no exception; the request expires
        assert rp.counts["connect_failures"] >= 2 and not rp.connected
        assert "cannot connect" in caplog.text
        with PolicyServer(RampPolicy()).thread(port=port):
            assert wait_for(lambda: rp.connected, 3.0)
            tick = t.request()
            plan = t.poll_until(2.0)
            assert plan is not None and plan.obs_tick == tick
            np.testing.assert_allclose(plan.actions[0], 0.1 + 0.01 * plan.skipped, atol=1e-6)
        t.assert_polls_were_fast()


def test_disconnect_mid_episode_reconnects_and_next_request_succeeds():
    port = free_port()
    with Replanner(config(f"ws://127.0.0.1:{port}")) as rp:
        t = Tick(rp)
        with PolicyServer(RampPolicy()).thread(port=port):
            assert wait_for(lambda: rp.connected, 3.0)
            t.request()
            assert t.poll_until(2.0) is not None
        assert wait_for(lambda: not rp.connected, 3.0)  # server gone mid-episode
        assert rp.counts["disconnects"] >= 1
        t.request()
        assert t.poll_until(0.3) is None
        with PolicyServer(RampPolicy()).thread(port=port):
            assert t.poll_until(3.0) is not None  # the pending request went out on the new connection
            t.request()
            assert t.poll_until(2.0) is not None
        assert rp.counts["connects"] >= 2
        t.assert_polls_were_fast()


def test_slow_reply_is_time_aligned_and_poll_never_blocks_meanwhile():
    with PolicyServer(RampPolicy(horizon=30), latency_s=0.5).thread() as st, Replanner(config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        tick = t.request(make_obs(q=0.2))
        assert wait_for(lambda: rp.busy, 1.0)
        for _ in range(20):  # in flight: every poll returns None at once
            assert t.poll() is None
        plan = t.poll_until(2.0)
        assert plan is not None and plan.reason == "explicit"
        assert plan.skipped == plan.start_tick - tick >= int(0.5 / PERIOD) - 1
        assert 0.5 <= plan.age_s <= 1.0 and plan.latency_s >= 0.5
        expected = 0.2 + 0.01 * (plan.skipped + np.arange(plan.actions.shape[0]))
        np.testing.assert_allclose(plan.actions[:, 0], expected, atol=1e-6)  # row 0 is for the current tick
        assert plan.actions.shape[0] == 30 - plan.skipped
        t.assert_polls_were_fast()


def test_reply_older_than_the_age_limit_is_discarded(caplog):
    caplog.set_level(logging.WARNING, logger="omni_vla.cloud")
    with PolicyServer(RampPolicy(), latency_s=1.2).thread() as st, Replanner(config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        t.request()
        assert t.poll_until(2.0, done=lambda p: p is not None or rp.counts["expired"]) is None
        assert rp.counts["expired"] == 1 and rp.counts["plans"] == 0
        assert "max_plan_age_s" in caplog.text
        t.assert_polls_were_fast()


def test_text_error_frame_gives_no_plan_then_reconnects(caplog):
    caplog.set_level(logging.WARNING, logger="omni_vla.cloud")
    server = PolicyServer(RampPolicy(fail_first=1))
    with server.thread() as st, Replanner(config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        t.request()
        assert t.poll_until(1.5, done=lambda p: p is not None or rp.counts["server_errors"]) is None
        assert "policy failure number 1" in caplog.text  # the server's traceback is logged
        assert wait_for(lambda: rp.connected and rp.counts["connects"] == 2, 3.0)  # openpi closed with 1011
        t.request()
        assert t.poll_until(2.0) is not None
        assert server.connections == 2
        t.assert_polls_were_fast()


@pytest.mark.parametrize("bad", ["garbage", "oversized"])
def test_garbage_and_oversized_frames_are_refused_then_client_recovers(bad, caplog):
    caplog.set_level(logging.WARNING, logger="omni_vla.cloud")
    first = b"\xc1\x00garbage\xff" if bad == "garbage" else codec.packb({"actions": np.zeros((40_000, D))})
    with scripted_replanner([first, "good"], max_message_bytes=1 << 20) as (scripted, rp, t):
        t.request()
        counter = "protocol_errors" if bad == "garbage" else "rejected"
        assert t.poll_until(2.0, done=lambda p: p is not None or rp.counts[counter]) is None
        assert rp.counts[counter] == 1
        assert ("not a valid msgpack" if bad == "garbage" else "max_message_bytes") in caplog.text
        assert wait_for(lambda: rp.connected and scripted.connections == 2, 3.0)
        t.request()
        assert t.poll_until(2.0) is not None
        t.assert_polls_were_fast()


BAD_REPLIES = {
    "wrong_action_dim": {"actions": np.zeros((10, 7))},
    "one_dimensional": {"actions": np.zeros(D)},
    "too_long": {"actions": np.zeros((65, D))},
    "int_dtype": {"actions": np.zeros((10, D), np.int64)},
    "half_dtype": {"actions": np.zeros((10, D), np.float16)},
    "big_endian": {"actions": np.zeros((10, D), ">f8")},
    "nan": {"actions": np.where(np.eye(10, D) > 0, np.nan, 0.0)},
    "inf": {"actions": np.full((10, D), np.inf, np.float32)},
    "no_actions_key": {"action": np.zeros((10, D))},
    "string": "actions",
    "list_of_floats": {"actions": [[0.0] * D] * 10},
}


@pytest.mark.parametrize("name", sorted(BAD_REPLIES))
def test_wrong_shapes_dtypes_and_non_finite_actions_are_refused(name):
    scripted = ScriptedServer([codec.packb(BAD_REPLIES[name]), "good"])
    with ServerThread(scripted.handler) as st, Replanner(config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        t.request()
        assert t.poll_until(1.5, done=lambda p: p is not None or rp.counts["rejected"]) is None
        assert rp.counts["rejected"] == 1 and rp.last_rejection
        t.request()  # same connection, next request: the server keeps sending the bad reply
        assert t.poll_until(0.5, done=lambda p: p is not None or rp.counts["rejected"] == 2) is None
        assert rp.counts["plans"] == 0 and scripted.connections == 1
        t.assert_polls_were_fast()


def test_complex_actions_are_refused_at_decoding():
    complex_map = {b"__ndarray__": True, b"data": np.zeros((10, D), np.complex128).tobytes(),
                   b"dtype": "<c16", b"shape": [10, D]}
    import msgpack

    scripted = ScriptedServer([msgpack.packb({"actions": complex_map}, use_bin_type=True), "good"])
    with ServerThread(scripted.handler) as st, Replanner(config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        t.request()
        assert t.poll_until(1.5, done=lambda p: p is not None or rp.counts["protocol_errors"]) is None
        assert "complex" in rp.last_error


def test_unanswered_request_times_out_and_the_connection_is_replaced():
    with scripted_replanner(["silent", "good"], request_timeout_s=0.4) as (scripted, rp, t):
        t.request()
        assert t.poll_until(1.0, done=lambda p: p is not None or rp.counts["timeouts"]) is None
        assert rp.counts["timeouts"] == 1
        t.request()
        assert t.poll_until(2.0) is not None and scripted.connections == 2


def test_instruction_change_discards_the_plan_for_the_old_instruction():
    with PolicyServer(RampPolicy(), latency_s=0.3).thread() as st, Replanner(config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        t.request(make_obs(instruction="pick up the red cube"))
        assert wait_for(lambda: rp.counts["sent"] == 1, 1.0)  # in flight
        reason = rp.observe(make_obs(q=0.3, instruction="touch the yellow ball"), t.tick, t.now)
        assert reason == "instruction"
        plan = t.poll_until(2.0)
        assert plan is not None and plan.reason == "instruction"
        np.testing.assert_allclose(plan.actions[0, 0], 0.3 + 0.01 * plan.skipped, atol=1e-6)
        assert rp.counts["superseded"] == 1


def test_bad_observation_is_not_sent_and_says_why(ramp_server):
    _, st = ramp_server
    with Replanner(config(st.uri)) as rp:
        obs = make_obs()
        obs["front"] = np.zeros((16, 16), np.uint8)
        rp.request_plan()
        assert rp.observe(obs, 0, time.perf_counter()) is None
        assert rp.counts["bad_observations"] == 1 and "front" in rp.last_error
        assert rp.counts["requests"] == 0


def test_close_is_prompt_while_the_server_is_unreachable():
    rp = Replanner(config(f"ws://127.0.0.1:{free_port()}")).start()
    time.sleep(0.2)
    t = time.perf_counter()
    rp.close()
    assert time.perf_counter() - t < 2.0
    assert not any(th.name in ("openpi-events", "openpi-network") for th in threading.enumerate())
