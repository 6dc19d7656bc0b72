"""The tick's copy of the observation: taken under the store's lock, reused across ticks, a frame copied only when
it changed; Loop.tick steps on it without holding the lock."""
from __future__ import annotations

import numpy as np

from controller_rig import PERIOD
from omni_vla.core.assembly import build_loop
from omni_vla.core.perception import ObservationStore
from omni_vla.core.settings import LoopSettings
from omni_vla.core.snapshot import ObservationSnapshot
from omni_vla.inference.client import SyncInference
from toy_runtime import ToyRuntime

JOINTS = ["a", "b"]


def test_the_snapshot_copies_under_the_lock_and_a_frame_only_when_its_capture_time_changes() -> None:
    t = [1.0]
    store = ObservationStore(JOINTS, clock=lambda: t[0], cameras=["front"])
    snap = ObservationSnapshot()
    frame = np.full((8, 8, 3), 7, np.uint8)
    store.put_image("front", frame, "rgb8")
    store.put_joints(JOINTS, [0.1, 0.2], [], None)
    store.set_instruction("go")
    obs = snap.take(store)
    assert obs["front"] is not store.obs["front"] and obs["qpos"] is not store.obs["qpos"]
    np.testing.assert_array_equal(obs["front"], frame)
    assert obs["qpos"].tolist() == [0.1, 0.2] and obs["instruction"] == "go" and obs["stamps"]["front"] == 1.0
    assert snap.frame_copies == 1
    buffer = obs["front"]
    snap.take(store)
    assert snap.frame_copies == 1  # same frame: no copy
    t[0] = 2.0
    store.put_image("front", np.full((8, 8, 3), 9, np.uint8), "rgb8")
    store.put_joints(JOINTS, [0.3, 0.4], [], None)
    obs = snap.take(store)
    assert obs["front"] is buffer and int(obs["front"][0, 0, 0]) == 9 and snap.frame_copies == 2
    assert obs["qpos"].tolist() == [0.3, 0.4] and obs["stamps"]["front"] == 2.0
    store.put_image("front", np.zeros((16, 8, 3), np.uint8), "rgb8")  # a resolution change: a new buffer
    assert snap.take(store)["front"].shape == (16, 8, 3)


def test_the_snapshot_is_not_changed_by_frames_arriving_after_it_was_taken() -> None:
    store = ObservationStore(JOINTS, cameras=["front"])
    snap = ObservationSnapshot()
    store.put_image("front", np.full((8, 8, 3), 1, np.uint8), "rgb8")
    obs = snap.take(store)
    store.put_image("front", np.full((8, 8, 3), 2, np.uint8), "rgb8")
    assert int(obs["front"].max()) == 1


def test_the_loop_tick_steps_on_a_snapshot_without_holding_the_store_lock() -> None:
    loop = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), SyncInference(ToyRuntime(), 0, PERIOD))
    held, seen = [], []
    step = loop.controller.step

    def spy(obs: dict, k: int, t: float | None = None):  # noqa: ANN202
        held.append(loop.store.lock.locked())
        seen.append(obs)
        return step(obs, k, t)

    loop.controller.step = spy  # type: ignore[method-assign]
    loop.store.put_joints(loop.store.joint_names, [0.0] * len(loop.store.joint_names), [], None)
    loop.tick(0, 0.0)
    loop.tick(1, PERIOD)
    assert held == [False, False], "a callback would wait for the step"
    assert seen[0] is not loop.store.obs, "the step reads a copy, not the buffers callbacks write"
