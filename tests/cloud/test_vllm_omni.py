"""vLLM-Omni's dialect: bare-array replies, binary error messages on an open connection, reset, idle close."""
from __future__ import annotations

import logging

import numpy as np

from omni_vla_sim.openpi_server import PolicyServer
from omni_vla.cloud.replanner import Replanner
from openpi_rig import RampPolicy, Tick, config, make_obs, wait_for


class ResettablePolicy(RampPolicy):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1


def vllm_config(uri: str, **kw):
    return config(uri + "/v1/realtime/robot/openpi", client={"protocol": "vllm-omni"},
                  extra_fields={"session_id": "omni-vla-test"}, **kw)


def test_bare_array_reply_becomes_a_plan():
    with PolicyServer(RampPolicy(horizon=12), variant="vllm-omni").thread() as st, Replanner(vllm_config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        t.request(make_obs(q=0.4))
        plan = t.poll_until(2.0)
        assert plan is not None and plan.server_timing == {}
        np.testing.assert_allclose(plan.actions[0], 0.4 + 0.01 * plan.skipped, atol=1e-6)


def test_binary_error_message_gives_no_plan_and_keeps_the_connection(caplog):
    caplog.set_level(logging.WARNING, logger="omni_vla.cloud")
    server = PolicyServer(RampPolicy(fail_first=2), variant="vllm-omni")
    with server.thread() as st, Replanner(vllm_config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        t = Tick(rp)
        for n in (1, 2):
            t.request()
            assert t.poll_until(1.5, done=lambda p: p is not None or rp.counts["server_errors"] == n) is None
            assert f"policy failure number {n}" in caplog.text
        t.request()
        assert t.poll_until(2.0) is not None
        assert server.connections == 1 and rp.counts["connects"] == 1  # never reconnected


def test_reset_request_reaches_the_server_policy():
    policy = ResettablePolicy()
    with PolicyServer(policy, variant="vllm-omni").thread() as st, Replanner(vllm_config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        rp.reset()
        assert wait_for(lambda: policy.resets == 1 and rp.counts["resets"] == 1, 2.0)
        t = Tick(rp)
        t.request()
        assert t.poll_until(2.0) is not None  # the "reset successful" text was an ack, not an error
        assert rp.counts["server_errors"] == 0 and rp.counts["connects"] == 1


def test_idle_close_by_the_server_is_followed_by_a_reconnect():
    server = PolicyServer(RampPolicy(), variant="vllm-omni", idle_timeout_s=0.3)
    with server.thread() as st, Replanner(vllm_config(st.uri)) as rp:
        assert wait_for(lambda: rp.connected, 3.0)
        assert wait_for(lambda: rp.counts["connects"] >= 2, 3.0)  # closed for idling, connected again
        t = Tick(rp)
        t.request()
        assert t.poll_until(2.0) is not None
        assert server.connections >= 2
