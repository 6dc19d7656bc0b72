"""Camera and rate-from-bundle edges cosmic-ray found unpinned (results/mutation_core.md).

A loop built around a 0 rate (left for the bundle but never resolved) is one line naming rate_hz, not a
division by zero deep in the controller; a bundle stating a negative control rate is refused the same way, and
any positive rate, however slow, is a rate. Settings built without a rate or steps per chunk run the reference
bundle as its manifest states; the settings refuse what no bundle could fix (a negative rate or horizon, a rate
above 1000 Hz). A node's topics may name a single camera (a one-camera policy), never none.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from omni_vla.core.assembly import build_loop
from omni_vla.core.controller import Controller
from omni_vla.core.settings import LoopSettings, TopicsConfig
from omni_vla.inference.client import SyncInference
from test_cameras import ThreeCameras

REFERENCE_MANIFEST = Path(__file__).resolve().parents[2] / "bundles" / "reference" / "manifest.json"
JOINTS = ["a", "b", "c"]


def test_a_controller_given_an_unresolved_zero_rate_is_refused_naming_rate_hz() -> None:
    why = r"^rate_hz 0\.0 must be > 0 \(a 0 is resolved from the bundle by build_loop\)$"
    with pytest.raises(ValueError, match=why):
        Controller(LoopSettings(rate_hz=0, execution_horizon=4, joint_names=JOINTS), SyncInference(ThreeCameras()))


def test_a_bundle_stating_a_negative_control_rate_is_refused_naming_it() -> None:
    rt = ThreeCameras()
    rt.control_rate_hz = -15.0
    with pytest.raises(ValueError, match=r"^rate_hz -15\.0 must be > 0"):
        build_loop(LoopSettings(rate_hz=0, execution_horizon=4, joint_names=JOINTS), SyncInference(rt))


def test_a_rate_below_one_hertz_is_a_valid_rate() -> None:
    ctl = Controller(LoopSettings(rate_hz=0.5, execution_horizon=4, joint_names=JOINTS), SyncInference(ThreeCameras()))
    assert ctl.period == pytest.approx(2.0)


def test_settings_built_without_rate_or_steps_run_the_reference_bundle_as_its_manifest_states() -> None:
    manifest = json.loads(REFERENCE_MANIFEST.read_text())
    defaults = LoopSettings()
    assert (defaults.rate_hz, defaults.execution_horizon) == (manifest["control_rate_hz"], manifest["execute_steps"])


@pytest.mark.parametrize("field", ["rate_hz", "execution_horizon"])
def test_a_negative_rate_or_execution_horizon_is_refused_by_the_settings(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        LoopSettings(**{field: -1})


def test_the_rate_is_capped_at_1000_hz() -> None:
    assert LoopSettings(rate_hz=1000).rate_hz == 1000
    with pytest.raises(ValidationError, match="rate_hz"):
        LoopSettings(rate_hz=1000.5)


def test_topics_for_a_one_camera_policy_are_accepted_and_for_no_camera_refused() -> None:
    assert TopicsConfig(cameras=["top=/cam/top"]).camera_topics() == {"top": "/cam/top"}
    with pytest.raises(ValidationError, match="cameras"):
        TopicsConfig(cameras=[])
