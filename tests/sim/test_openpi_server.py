"""`omni-vla serve-openpi`: the openpi wire behaviour, health, auth, TLS, latency, and the expert oracle."""
from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect

from omni_vla.cloud import codec
from omni_vla.cloud.replanner import Replanner
from omni_vla_sim.openpi_server import ObservationCheck, PolicyServer, main as serve_main
from omni_vla_sim.robot import DEFAULT_LIMITS_FILE, HOME_QPOS, JOINT_NAMES
from openpi_rig import RampPolicy, config, free_port, make_obs, wait_for

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def test_metadata_comes_first_then_one_reply_per_request():
    with PolicyServer(RampPolicy(horizon=5), metadata={"policy": "ramp", "action_dim": 8}).thread() as st:
        with connect(st.uri, compression=None) as ws:
            assert codec.unpackb(ws.recv()) == {"policy": "ramp", "action_dim": 8}
            for q in (0.1, 0.2):
                ws.send(codec.packb({"observation/state": np.full(8, q, np.float32)}))
                reply = codec.unpackb(ws.recv())
                assert reply["actions"].shape == (5, 8) and np.allclose(reply["actions"][0], q)
                assert reply["server_timing"]["infer_ms"] >= 0


def test_policy_exception_is_a_text_traceback_then_close_1011():
    with PolicyServer(RampPolicy(fail_first=5)).thread() as st, connect(st.uri) as ws:
        ws.recv()
        ws.send(codec.packb({"observation/state": np.zeros(8, np.float32)}))
        text = ws.recv()
        assert isinstance(text, str) and "RuntimeError: policy failure number 1" in text
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv()
        assert closed.value.rcvd.code == 1011


def test_text_or_garbage_requests_are_errors_too():
    for bad in ("not msgpack", b"\xc1garbage"):
        with PolicyServer(RampPolicy()).thread() as st, connect(st.uri) as ws:
            ws.recv()
            ws.send(bad)
            assert "Error" in ws.recv()


def _refusal(server: PolicyServer, request: dict) -> str:
    """Send one request; return the error frame's text after checking the connection closes with 1011."""
    with server.thread() as st, connect(st.uri, compression=None) as ws:
        ws.recv()
        ws.send(codec.packb(request))
        text = ws.recv()
        assert isinstance(text, str), f"expected an error frame, got a reply: {codec.unpackb(text)}"
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv()
        assert closed.value.rcvd.code == 1011
    return text


@pytest.mark.parametrize("bad, where", [
    ({"observation/state": np.array([0.1, 0.2, np.nan, 0, 0, 0, 0, 0], np.float32)}, "observation/state[2] is nan"),
    ({"observation/state": np.full(8, np.inf)}, "observation/state[0] is inf"),
    ({"observation/state": np.zeros(8), "privileged/sim_state": {"qvel": np.array([0.0, -np.inf])}},
     "privileged/sim_state/qvel[1] is -inf"),
    ({"observation/state": np.zeros(8), "extra": float("nan")}, "extra is nan"),
])
def test_non_finite_numbers_are_refused_with_an_error_frame_before_the_policy_runs(bad, where):
    policy = RampPolicy()
    text = _refusal(PolicyServer(policy), bad)
    assert f"ObservationRejected: {where}: every number in a request must be finite" in text
    assert policy.calls == 0


@pytest.mark.parametrize("image, why", [
    (np.zeros((16, 16, 3), np.float32), "dtype is float32, expected uint8"),
    (np.zeros((16, 16), np.uint8), "shape is (16, 16), expected [H, W, 3]"),
    (np.zeros((3, 16, 16), np.uint8), "shape is (3, 16, 16), expected [H, W, 3]"),
])
def test_images_of_the_wrong_shape_or_dtype_are_refused(image, why):
    policy = RampPolicy()
    text = _refusal(PolicyServer(policy), {"observation/state": np.zeros(8), "observation/wrist_image": image})
    assert f"ObservationRejected: observation/wrist_image: image {why}" in text and policy.calls == 0


def test_state_beyond_the_joint_limits_is_refused_and_a_state_at_the_limit_is_served():
    check = ObservationCheck.for_robot(DEFAULT_LIMITS_FILE, JOINT_NAMES)  # panda_joint1: [-2.8973, 2.8973]
    home = np.array(HOME_QPOS)
    policy = RampPolicy(horizon=3)
    for q1, refused in ((1e30, True), (2.8973 + 0.06, True), (-2.8973 - 0.06, True), (2.8973 + 0.04, False)):
        state = home.copy()
        state[0] = q1
        if refused:
            text = _refusal(PolicyServer(policy, check=check), {"observation/state": state})
            assert f"observation/state[0] (panda_joint1) = {q1:g} is outside the joint's limits [-2.8973, 2.8973]" \
                   " by more than 0.05" in text
            continue
        with PolicyServer(policy, check=check).thread() as st, connect(st.uri, compression=None) as ws:
            ws.recv()
            ws.send(codec.packb({"observation/state": state}))
            np.testing.assert_allclose(codec.unpackb(ws.recv())["actions"][0], state)
    assert policy.calls == 1
    text = _refusal(PolicyServer(policy, check=check), {"observation/state": home[:7]})
    assert "observation/state: 7 values, expected 8 (panda_joint1" in text


def test_vllm_omni_variant_answers_a_refused_observation_with_an_error_and_keeps_the_connection():
    with PolicyServer(RampPolicy(), variant="vllm-omni").thread() as st, connect(st.uri, compression=None) as ws:
        ws.recv()
        ws.send(codec.packb({"observation/state": np.full(8, np.nan)}))
        err = codec.unpackb(ws.recv())
        assert err["type"] == "error" and "observation/state[0] is nan" in err["message"]
        ws.send(codec.packb({"observation/state": np.zeros(8)}))
        assert codec.unpackb(ws.recv()).shape == (20, 8)


class NaNPolicy(RampPolicy):
    def infer(self, obs: dict) -> dict:
        out = super().infer(obs)
        out["actions"][1, 3] = np.nan
        return out


def test_non_finite_actions_from_the_policy_are_never_sent():
    text = _refusal(PolicyServer(NaNPolicy()), {"observation/state": np.zeros(8)})
    assert "the policy returned non-finite actions; not sent" in text


def test_healthz_answers_200_over_plain_http():
    with PolicyServer(RampPolicy(), api_key="secret").thread() as st:
        with urllib.request.urlopen(f"http://127.0.0.1:{st.port}/healthz", timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b"OK\n"


def test_api_key_is_required_when_configured_and_sent_by_the_client():
    with PolicyServer(RampPolicy(), api_key="s3cret").thread() as st:
        with Replanner(config(st.uri), api_key="wrong") as rp:
            assert wait_for(lambda: rp.counts["connect_failures"] >= 1, 3.0)
            assert "401" in rp.last_error and not rp.connected
        with Replanner(config(st.uri), api_key="s3cret") as rp:
            rp.request_plan()
            rp.observe(make_obs(), 0, time.perf_counter())
            assert rp.wait_for_plan(3.0)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def test_wss_verifies_the_server_certificate_by_default(certificate):
    cert, key = certificate
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    with PolicyServer(RampPolicy()).thread(ssl_context=ctx) as st:
        assert st.uri.startswith("wss://")
        with Replanner(config(st.uri)) as rp:  # self-signed, not trusted: refused
            assert wait_for(lambda: rp.counts["connect_failures"] >= 1, 3.0)
            assert "CERTIFICATE_VERIFY_FAILED" in rp.last_error and not rp.connected
        with Replanner(config(st.uri, client={"ca_file": str(cert)})) as rp:  # trusted CA: works
            rp.request_plan()
            rp.observe(make_obs(), 0, time.perf_counter())
            assert rp.wait_for_plan(3.0)


def test_injected_latency_delays_every_reply():
    with PolicyServer(RampPolicy(), latency_s=0.3).thread() as st, connect(st.uri) as ws:
        ws.recv()
        for _ in range(2):
            t = time.perf_counter()
            ws.send(codec.packb({"observation/state": np.zeros(8, np.float32)}))
            reply = codec.unpackb(ws.recv())
            assert time.perf_counter() - t >= 0.3
            assert reply["server_timing"]["injected_latency_ms"] == pytest.approx(300)


# ----- the expert oracle ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def env():
    from omni_vla_sim.env import EnvConfig, PandaTaskEnv

    e = PandaTaskEnv("pick_red", EnvConfig(render=False))
    yield e
    e.close()


def test_oracle_plan_is_the_expert_rollout_from_the_sent_state(env):
    from omni_vla_sim.oracle import ExpertOraclePolicy, sim_state
    from omni_vla_sim.experts import ScriptedExpert

    env.reset(1_000_003, task="pick_red")
    for _ in range(5):  # some motion first, so the state is not the reset state
        env.step(env.joint_state()[0] + 0.01)
    state = sim_state(env)
    plan = ExpertOraclePolicy(horizon=12).infer({"privileged/sim_state": codec.unpackb(codec.packb(state))})["actions"]
    import mujoco

    mujoco.mj_forward(env.model, env.data)  # mj_step leaves positions one substep stale; the oracle recomputes them
    expert = ScriptedExpert(env)
    expert.reset()
    reference = []
    for _ in range(12):
        reference.append(expert.act())
        env.step(reference[-1])
    assert plan.shape == (12, 8) and plan.dtype == np.float64
    np.testing.assert_allclose(plan, np.array(reference), atol=1e-6)


def test_oracle_refuses_requests_without_a_usable_sim_state(env):
    from omni_vla_sim.oracle import ExpertOraclePolicy, sim_state

    oracle = ExpertOraclePolicy(horizon=4)
    with pytest.raises(ValueError, match="privileged/sim_state"):
        oracle.infer({"prompt": "pick up the red cube"})
    state = sim_state(env)
    state["qpos"] = state["qpos"][:-1]
    with pytest.raises(ValueError, match="qpos"):
        oracle.infer({"privileged/sim_state": state})


def test_oracle_over_the_protocol_solves_a_task_with_300ms_latency(env):
    """Re-plan every 8 ticks; each plan arrives 6 ticks (300 ms) after its observation, time-aligned."""
    from omni_vla_sim.oracle import ExpertOraclePolicy, sim_state

    delay = 6
    with PolicyServer(ExpertOraclePolicy(horizon=16), latency_s=0.3).thread() as st:
        cfg = config(st.uri, max_plan_age_s=60)
        with Replanner(cfg, extras=lambda: {"privileged/sim_state": sim_state(env)}) as rp:
            obs = env.reset(1_000_001, task="pick_red")
            obs.update(front=np.zeros((16, 16, 3), np.uint8), wrist=np.zeros((16, 16, 3), np.uint8))
            actions, start, due, success = None, 0, None, False
            for k in range(env.task.max_steps):
                if k % 8 == 0:
                    rp.request_plan("cadence")
                    rp.observe(obs, k, k * 0.05)
                    assert rp.wait_for_plan(3.0)
                    due = k if actions is None else k + delay
                if k == due:
                    plan = rp.poll(k * 0.05, k)
                    assert plan is not None and plan.skipped == k - plan.obs_tick
                    actions, start = plan.actions, k
                obs2, _, success, _, _ = env.step(actions[k - start])
                obs.update(qpos=obs2["qpos"], qvel=obs2["qvel"])
                if success:
                    break
    assert success, f"oracle did not solve pick_red in {env.task.max_steps} steps"


def test_serve_openpi_main_runs_the_oracle_server_until_signalled(tmp_path):
    port = free_port()
    env_vars = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                "OPENPI_TEST_KEY": "k"}
    proc = subprocess.Popen([PYTHON, "-c", "import sys; from omni_vla_sim.openpi_server import main; sys.exit(main(sys.argv[1:]))",
                             "--port", str(port), "--latency-ms", "50", "--horizon", "4", "--api-key-env", "OPENPI_TEST_KEY"],
                            env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def healthy() -> bool:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).status == 200
            except OSError:
                return False

        assert wait_for(healthy, 20.0), "server did not come up"
        with connect(f"ws://127.0.0.1:{port}", additional_headers={"Authorization": "Api-Key k"}) as ws:
            assert codec.unpackb(ws.recv())["policy"] == "expert_oracle"
            ws.send(codec.packb({"prompt": "x"}))  # no sim state: the oracle's error comes back as text
            assert "privileged/sim_state" in ws.recv()
        with connect(f"ws://127.0.0.1:{port}", additional_headers={"Authorization": "Api-Key k"}) as ws:
            ws.recv()  # the command-line server checks states against config/joint_limits.yaml
            ws.send(codec.packb({"observation/state": np.full(8, 1e30), "prompt": "x"}))
            assert "observation/state[0] (panda_joint1) = 1e+30 is outside the joint's limits" in ws.recv()
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, out
    assert f"ws://127.0.0.1:{port}" in out


def test_serve_openpi_refuses_bad_arguments():
    with pytest.raises(SystemExit):
        serve_main(["--latency-ms", "-1"])
