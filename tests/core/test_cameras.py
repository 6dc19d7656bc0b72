"""The loop reads the policy's cameras by name, at each camera's own resolution, and takes its rate and steps per
chunk from the policy unless the settings say otherwise.

A loop built around a 0 rate (left for the bundle but never resolved) is one line naming rate_hz, not a
division by zero deep in the controller; a bundle stating a negative control rate is refused the same way, and
any positive rate, however slow, is a rate. Settings built without a rate or steps per chunk run the reference
bundle as its manifest states; the settings refuse what no bundle could fix (a negative rate or horizon, a rate
above 1000 Hz). A node's topics may name a single camera (a one-camera policy), never none.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from omni_vla.cameras import CameraInput, check_camera_name, missing_cameras, parse_camera_topics
from omni_vla.core.assembly import build_loop
from omni_vla.core.controller import STALE, WAITING, Controller
from omni_vla.core.perception import ObservationStore
from omni_vla.core.settings import LoopSettings, TopicsConfig
from omni_vla.inference.client import SyncInference

H, D = 6, 3
CAMS = (CameraInput("top", 24, 40), CameraInput("left_wrist", 16, 16), CameraInput("right_wrist", 20, 12))


class ThreeCameras:
    """out[i] = state + (i + 1) * (mean(top), mean(left_wrist), mean(right_wrist)); records the images it saw."""

    backend, horizon, action_dim, max_prefix, embedding_dim = "toy", H, D, 0, 1
    cameras = CAMS
    joint_names = ["a", "b", "c"]
    control_rate_hz = 15.0
    execute_steps = 4

    def __init__(self) -> None:
        self.seen: list[dict[str, np.ndarray]] = []

    def encode_instruction(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)

    def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:  # noqa: ANN001
        self.seen.append({k: v.copy() for k, v in images.items()})
        means = np.array([images[c.name].mean() for c in CAMS], np.float32)
        out[:] = state + np.arange(1, H + 1, dtype=np.float32)[:, None] * means

    def close(self) -> None:
        pass


def frame(h: int, w: int, value: int) -> np.ndarray:
    return np.full((h, w, 3), value, np.uint8)


def observation(now: float) -> dict:
    return {"top": frame(48, 80, 51), "left_wrist": frame(32, 32, 102), "right_wrist": frame(40, 24, 204),
            "qpos": np.zeros(D), "qvel": np.zeros(D), "instruction": "go",
            "stamps": {"top": now, "left_wrist": now, "right_wrist": now, "joints": now}}


def test_each_camera_reaches_the_policy_under_its_name_at_its_own_resolution() -> None:
    rt = ThreeCameras()
    loop = build_loop(LoopSettings(rate_hz=0, execution_horizon=0, joint_names=["a", "b", "c"]), SyncInference(rt))
    action = loop.step(observation(0.0), 0, 0.0)
    assert action is not None
    seen = rt.seen[0]
    assert {k: v.shape for k, v in seen.items()} == {c.name: (1, 3, c.height, c.width) for c in CAMS}
    for camera, value in (("top", 51), ("left_wrist", 102), ("right_wrist", 204)):
        np.testing.assert_allclose(seen[camera], value / 255.0, rtol=1e-6)  # not another camera's frame
    np.testing.assert_allclose(action, [51 / 255, 102 / 255, 204 / 255], rtol=1e-5)


def test_rate_and_steps_per_chunk_come_from_the_policy_when_left_at_zero() -> None:
    loop = build_loop(LoopSettings(rate_hz=0, execution_horizon=0, joint_names=["a", "b", "c"]),
                      SyncInference(ThreeCameras()))
    assert (loop.settings.rate_hz, loop.settings.execution_horizon) == (15.0, 4)
    assert loop.controller.period == pytest.approx(1 / 15)
    given = build_loop(LoopSettings(rate_hz=30, execution_horizon=2, joint_names=["a", "b", "c"]),
                       SyncInference(ThreeCameras()))
    assert (given.settings.rate_hz, given.settings.execution_horizon) == (30, 2)  # overrides win


def test_a_zero_setting_for_a_policy_that_states_nothing_is_refused_naming_it() -> None:
    rt = ThreeCameras()
    rt.execute_steps = None  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"^execution_horizon is 0 \(the bundle's\) but the bundle states no "
                                         r"execute_steps: set execution_horizon$"):
        build_loop(LoopSettings(execution_horizon=0, joint_names=["a", "b", "c"]), SyncInference(rt))


def test_a_missing_camera_holds_naming_it_and_a_frozen_one_is_stale() -> None:
    loop = build_loop(LoopSettings(rate_hz=10, execution_horizon=0, max_obs_age_s=0.2, joint_names=["a", "b", "c"]),
                      SyncInference(ThreeCameras()))
    o = observation(0.0)
    o["right_wrist"] = None
    assert loop.step(o, 0, 0.0) is None
    assert (loop.controller.state, loop.controller.reason) == (WAITING, "waiting for the first right_wrist camera image")
    o = observation(1.0)
    o["stamps"]["left_wrist"] = 0.5
    assert loop.step(o, 10, 1.0) is None
    assert (loop.controller.state, loop.controller.reason) == (
        STALE, "left_wrist camera image older than max_obs_age_s=0.2 s")


def test_the_store_keeps_the_policys_cameras_and_refuses_others() -> None:
    store = ObservationStore(["a"], cameras=["top", "left_wrist"])
    store.put_image("top", frame(10, 12, 1), "rgb8")
    assert store.obs["top"].shape == (10, 12, 3) and store.obs["left_wrist"] is None
    assert set(store.stamps) == {"top", "left_wrist", "joints"}
    with pytest.raises(ValueError, match=r"unknown camera 'front'; the policy reads \['top', 'left_wrist'\]"):
        store.put_image("front", frame(10, 12, 1), "rgb8")


@pytest.mark.parametrize("entries,why", [
    (["front"], "camera topic entry 'front': expected 'name=/topic'"),
    (["front="], "camera topic entry 'front=': expected 'name=/topic'"),
    (["front=/a", "front=/b"], "camera 'front' is given two topics ('/a' and '/b')"),
    (["qpos=/a"], "camera name 'qpos' is reserved by the loop"),
    (["2cam=/a"], "camera name '2cam': expected a letter followed by letters, digits or '_'"),
])
def test_bad_camera_topic_entries_are_refused_naming_the_entry(entries: list[str], why: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_camera_topics(entries)
    assert str(err.value).startswith(why)
    with pytest.raises(ValueError):
        TopicsConfig(cameras=entries)


def test_camera_topics_map_names_to_topics_and_name_what_is_missing() -> None:
    topics = TopicsConfig(cameras=["top = /cam/top", "wrist=/cam/wrist"]).camera_topics()
    assert topics == {"top": "/cam/top", "wrist": "/cam/wrist"}
    assert missing_cameras(CAMS, topics, "topics.cameras") == (
        "the policy reads camera(s) ['left_wrist', 'right_wrist'] but topics.cameras has ['top', 'wrist']")
    assert missing_cameras(CAMS[:1], topics, "topics.cameras") is None
    assert check_camera_name("cam_1") == "cam_1"


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


@pytest.mark.parametrize("bundle_rate", [1000.5, 5000.0, float("inf")])
def test_a_bundles_rate_above_the_cap_is_refused_like_a_setting(bundle_rate: float) -> None:
    """rate_hz 0 takes the bundle's control_rate_hz: it meets the same cap as a rate set by hand."""
    assert LoopSettings(rate_hz=0, execution_horizon=0).for_policy(1000.0, 12).rate_hz == 1000
    with pytest.raises(ValueError, match=r"rate_hz is 0 \(the bundle's\) and the bundle's value .* is refused: .*1000"):
        LoopSettings(rate_hz=0, execution_horizon=0).for_policy(bundle_rate, 12)


def test_topics_for_a_one_camera_policy_are_accepted_and_for_no_camera_refused() -> None:
    assert TopicsConfig(cameras=["top=/cam/top"]).camera_topics() == {"top": "/cam/top"}
    with pytest.raises(ValidationError, match="cameras"):
        TopicsConfig(cameras=[])
