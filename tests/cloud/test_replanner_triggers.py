"""When the re-planner asks the cloud: stall, interventions, cadence, explicit requests, and what it sends."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from omni_vla.cloud.config import ReplanConfig, load_replan_config
from omni_vla.cloud.replanner import Replanner
from omni_vla_sim.openpi_server import PolicyServer
from openpi_rig import PERIOD, RampPolicy, config, make_obs, wait_for

REPO_CONFIG = __import__("pathlib").Path(__file__).resolve().parents[2] / "config" / "openpi.yaml"


class RecordingPolicy(RampPolicy):
    """Keeps every request it served, to check what the robot sent."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.seen: list[dict] = []

    def infer(self, obs: dict) -> dict:
        self.seen.append(obs)
        return super().infer(obs)


@pytest.fixture
def served():
    policy = RecordingPolicy()
    with PolicyServer(policy).thread() as st:
        yield policy, st.uri


def run_ticks(rp: Replanner, n: int, qpos_at, start: int = 0, ee_at=None) -> list[tuple[int, str]]:
    """Feed n ticks in simulated time (tick k at k * PERIOD); returns (tick, trigger) of requests."""
    fired = []
    for k in range(start, start + n):
        obs = make_obs()
        obs["qpos"] = qpos_at(k)
        if ee_at is not None:
            obs["ee_pos"] = ee_at(k)
        reason = rp.observe(obs, k, k * PERIOD)
        if reason:
            fired.append((k, reason))
            assert wait_for(lambda: not rp.busy, 2.0)
            rp.poll(k * PERIOD, k)
    return fired


def stall_config(uri: str, **triggers) -> ReplanConfig:
    t = {"stall_window_s": 1.0, "stall_joint_tol_rad": 0.01, "min_interval_s": 0.0, **triggers}
    return config(uri, triggers=t, max_plan_age_s=60)


def test_no_joint_progress_over_the_window_triggers_a_stall_request(served):
    _, uri = served
    with Replanner(stall_config(uri)) as rp:
        fired = run_ticks(rp, 45, lambda k: np.full(8, 0.3))
        assert fired and fired[0] == (19, "stall")  # window of 20 ticks at 20 Hz, full at tick 19
        assert all(reason == "stall" for _, reason in fired) and len(fired) == 2  # a fresh window each time


def test_a_moving_arm_or_a_closing_gripper_is_not_a_stall(served):
    _, uri = served
    with Replanner(stall_config(uri)) as rp:
        assert run_ticks(rp, 60, lambda k: np.r_[np.full(7, 0.002 * k), 0.04]) == []
        assert run_ticks(rp, 60, lambda k: np.r_[np.zeros(7), 0.04 - 0.0005 * k], start=60) == []


def test_end_effector_progress_decides_the_stall_when_observations_carry_it(served):
    _, uri = served
    with Replanner(stall_config(uri, stall_ee_tol_m=0.01)) as rp:
        # Joints keep moving (as in a self-motion) but the gripper goes nowhere: a stall at a full window.
        fired = run_ticks(rp, 25, lambda k: np.r_[np.full(7, 0.002 * k), 0.04], ee_at=lambda k: np.full(3, 0.4))
        assert fired[:1] == [(19, "stall")]
        # Joints nearly still but the end effector travels 1 mm per tick: progress, no stall.
        moving_ee = run_ticks(rp, 60, lambda k: np.r_[np.full(7, 0.0001 * k), 0.04], start=100,
                              ee_at=lambda k: np.array([0.3 + 0.001 * k, 0.0, 0.2]))
        assert moving_ee == []


def test_repeated_supervisor_interventions_trigger_a_request(served):
    _, uri = served
    cfg = config(uri, triggers={"intervention_count": 3, "intervention_window_s": 1.0, "min_interval_s": 0.0},
                 max_plan_age_s=60)
    moving = lambda k: np.full(8, 0.01 * k)  # noqa: E731
    with Replanner(cfg) as rp:
        rp.note_intervention(0.0)
        rp.note_intervention(2.0)  # too far apart: no trigger
        rp.note_intervention(2.05)
        assert run_ticks(rp, 30, moving, start=40) == []
        for t in (2.1, 2.2, 2.3):
            rp.note_intervention(t)
        assert run_ticks(rp, 1, moving, start=46) == [(46, "intervention")]


def test_cadence_requests_periodically_and_min_interval_limits_it(served):
    _, uri = served
    cfg = config(uri, triggers={"cadence_s": 0.5, "min_interval_s": 0.0}, max_plan_age_s=60)
    with Replanner(cfg) as rp:
        fired = run_ticks(rp, 40, lambda k: np.full(8, 0.01 * k))
        assert [k for k, _ in fired] == [0, 10, 20, 30]
    cfg = config(uri, triggers={"cadence_s": 0.1, "min_interval_s": 0.5}, max_plan_age_s=60)
    with Replanner(cfg) as rp:
        assert [k for k, _ in run_ticks(rp, 40, lambda k: np.full(8, 0.01 * k))] == [0, 10, 20, 30]


def test_explicit_request_from_another_thread_is_served_at_the_next_tick(served):
    policy, uri = served
    with Replanner(config(uri, max_plan_age_s=60)) as rp:
        assert run_ticks(rp, 3, lambda k: np.full(8, 0.01 * k)) == []
        caller = threading.Thread(target=rp.request_plan, args=("operator",))
        caller.start()
        caller.join()
        assert run_ticks(rp, 1, lambda k: np.full(8, 0.5), start=3) == [(3, "operator")]
        assert len(policy.seen) == 1


def test_request_carries_mapped_keys_copied_images_state_prompt_and_extras():
    policy = RecordingPolicy()
    keys = {"images": {"front": "cam/front", "wrist": "cam/wrist"}, "state": "joints", "prompt": "task_text"}

    class Policy2(RecordingPolicy):
        def infer(self, obs: dict) -> dict:
            self.seen.append(obs)
            return {"actions": np.zeros((10, 8))}

    policy = Policy2()
    with PolicyServer(policy).thread() as st:
        cfg = config(st.uri, keys=keys, extra_fields={"session_id": "robot-7"}, image_size=8)
        with Replanner(cfg, extras=lambda: {"privileged/sim_state": {"task": "pick_red"}}) as rp:
            obs = make_obs(q=0.25, instruction="lift the red block")
            rp.request_plan()
            assert rp.observe(obs, 0, time.perf_counter()) == "explicit"
            obs["front"][:] = 0  # the caller reuses its buffers: the request must hold a copy
            assert rp.wait_for_plan(2.0)
    sent = policy.seen[0]
    assert set(sent) == {"cam/front", "cam/wrist", "joints", "task_text", "session_id", "privileged/sim_state"}
    assert sent["cam/front"].dtype == np.uint8 and sent["cam/front"].shape == (8, 8, 3)
    assert (sent["cam/front"] == 7).all() and (sent["cam/wrist"] == 9).all()
    assert sent["joints"].dtype == np.float32 and np.allclose(sent["joints"], 0.25)
    assert sent["task_text"] == "lift the red block" and sent["session_id"] == "robot-7"
    assert sent["privileged/sim_state"] == {"task": "pick_red"}


def test_reset_forgets_plans_and_instruction(served):
    _, uri = served
    with Replanner(config(uri, max_plan_age_s=60)) as rp:
        rp.request_plan()
        rp.observe(make_obs(), 0, 0.0)
        assert rp.wait_for_plan(2.0)
        rp.reset()
        assert rp.poll(0.0, 0) is None
        assert rp.observe(make_obs(instruction="touch the yellow ball"), 1, 0.05) is None  # first instruction again


def test_config_file_loads_and_bad_settings_are_refused_with_the_reason(tmp_path, monkeypatch):
    cfg = load_replan_config(REPO_CONFIG)
    assert cfg.client.verify_tls and cfg.action_dim == 8 and not cfg.enabled
    with pytest.raises(ValueError, match="ws://"):
        ReplanConfig.model_validate({"client": {"uri": "http://x"}})
    with pytest.raises(ValueError, match="overwrite"):
        ReplanConfig.model_validate({"extra_fields": {"prompt": "x"}})
    with pytest.raises(ValueError, match="distinct"):
        ReplanConfig.model_validate({"keys": {"images": {"front": "a", "wrist": "a"}}})
    monkeypatch.delenv("OPENPI_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENPI_TEST_KEY"):
        ReplanConfig.model_validate({"client": {"api_key_env": "OPENPI_TEST_KEY"}}).client.api_key()
    bad = tmp_path / "openpi.yaml"
    bad.write_text("client: {}\n")
    with pytest.raises(ValueError, match="openpi:"):
        load_replan_config(bad)


def test_explicit_request_while_busy_is_queued_but_automatic_triggers_are_skipped():
    with PolicyServer(RampPolicy(), latency_s=0.3).thread() as st:
        cfg = config(st.uri, triggers={"cadence_s": 0.05, "min_interval_s": 0.0}, max_plan_age_s=60)
        with Replanner(cfg) as rp:
            assert wait_for(lambda: rp.connected, 3.0)
            assert rp.observe(make_obs(), 0, 0.0) == "cadence"
            assert wait_for(lambda: rp.counts["sent"] == 1, 1.0)
            assert rp.observe(make_obs(), 1, 0.05) is None and rp.counts["busy_skips"] == 1
            rp.request_plan("operator")
            assert rp.observe(make_obs(q=0.7), 2, 0.1) == "operator"
            plans = []  # the cadence reply may be polled before the operator's lands: keep what arrives
            assert wait_for(lambda: plans.append(rp.poll(0.1, 2)) or (plans[-1] is not None and plans[-1].reason == "operator"), 3.0)
            assert np.isclose(plans[-1].actions[0, 0], 0.7) and rp.counts["replies"] == 2
