"""One policy interface: the bundle runtime, the simulator's expert and a remote server look alike.

The real shipped bundle on MNN is served over a real websocket on loopback; the cloud client must
return what the same policy returns in-process.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from omni_vla.cloud.config import ClientConfig
from omni_vla.cloud.policy import CloudPolicy
from omni_vla.inference.policy import BundlePolicy
from omni_vla.policy import KeyMap, Policy, check_metadata
from omni_vla_sim.openpi_server import PolicyServer, build_policy, parse_args
from omni_vla_sim.oracle import ExpertOraclePolicy

BUNDLE = Path(__file__).resolve().parents[2] / "bundles" / "reference"


def observation(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    keys = KeyMap()
    return {keys.images["front"]: rng.integers(0, 255, (96, 96, 3), dtype=np.uint8),
            keys.images["wrist"]: rng.integers(0, 255, (96, 96, 3), dtype=np.uint8),
            keys.state: np.array([0.0, 0.1, 0.0, -1.8, 0.0, 1.9, 0.8, 0.04]),
            keys.prompt: "pick up the red cube"}


def test_bundle_and_expert_policies_implement_the_interface() -> None:
    for policy in (BundlePolicy(str(BUNDLE), backend="mnn"), ExpertOraclePolicy(horizon=8)):
        assert isinstance(policy, Policy)
        meta = check_metadata(policy)
        assert meta["action_dim"] == 8 and meta["action_horizon"] >= 8
        policy.reset()


def test_metadata_without_the_chunk_shape_is_refused() -> None:
    class Bare:
        metadata = {"policy": "bare"}

        def infer(self, obs: dict) -> dict:
            return {}

        def reset(self) -> None:
            pass

    with pytest.raises(ValueError, match="action_horizon"):
        check_metadata(Bare())


def test_cloud_policy_returns_what_the_served_policy_returns_in_process() -> None:
    local = BundlePolicy(str(BUNDLE), backend="mnn", seed=3)
    served = BundlePolicy(str(BUNDLE), backend="mnn", seed=3)
    with PolicyServer(served).thread() as st:
        remote = CloudPolicy(ClientConfig(uri=st.uri))
        try:
            assert isinstance(remote, Policy)
            assert check_metadata(remote)["action_horizon"] == local.metadata["action_horizon"]
            for seed in range(2):
                want = local.infer(observation(seed))["actions"]
                got = remote.infer(observation(seed))["actions"]
                assert got.shape == want.shape and np.array_equal(got, want)
            remote.reset()
        finally:
            remote.close()


def test_cloud_policy_refuses_a_reply_without_finite_actions() -> None:
    class NaNPolicy:
        metadata = {"action_horizon": 4, "action_dim": 8}

        def infer(self, obs: dict) -> dict:
            return {"actions": np.full((4, 8), np.nan)}

        def reset(self) -> None:
            pass

    with PolicyServer(NaNPolicy()).thread() as st:
        remote = CloudPolicy(ClientConfig(uri=st.uri))
        try:
            with pytest.raises(Exception, match="finite"):
                remote.infer(observation())
        finally:
            remote.close()


def test_a_served_staged_vla_reads_its_cameras_under_the_keys_the_operator_names(tiny_vla) -> None:
    """serve-openpi --policy bundle with an imported-VLA-kind bundle and LeRobot-style request keys."""
    bundle = tiny_vla[1]
    args = parse_args(["--policy", "bundle", "--bundle-dir", str(bundle), "--camera-key", "front=observation/images/top",
                       "--camera-key", "wrist=observation/images/hand"])
    policy = build_policy(args)
    rng = np.random.default_rng(0)
    obs = {"observation/images/top": rng.integers(0, 255, (40, 40, 3), dtype=np.uint8),
           "observation/images/hand": rng.integers(0, 255, (40, 40, 3), dtype=np.uint8),
           "observation/state": np.zeros(policy.runtime.action_dim), "prompt": "pick up the red cube"}
    with PolicyServer(policy).thread() as st:
        remote = CloudPolicy(ClientConfig(uri=st.uri))
        try:
            actions = remote.infer(obs)["actions"]
        finally:
            remote.close()
    assert actions.shape == (policy.runtime.horizon, policy.runtime.action_dim) and np.isfinite(actions).all()
    with pytest.raises(ValueError, match=r"maps only \['front'\]; expected a request key for each .*--camera-key"):
        BundlePolicy(str(bundle), keys=KeyMap(images={"front": "observation/images/top"}))
