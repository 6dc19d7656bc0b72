"""Demonstration files: schema-checked reading, atomic writing, and the collect command."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from omni_vla_sim import dataset, robot
from omni_vla_sim.dataset import DatasetError, Episode


def _episode(n: int = 5) -> Episode:
    rng = np.random.default_rng(0)
    return Episode(
        task="pick_red", instruction="pick up the red cube", instruction_held_out=False, seed=7, success=True,
        front=rng.integers(0, 255, (n, 64, 64, 3), dtype=np.uint8),
        wrist=rng.integers(0, 255, (n, 64, 64, 3), dtype=np.uint8),
        qpos=rng.standard_normal((n, 8)).astype(np.float32), qvel=rng.standard_normal((n, 8)).astype(np.float32),
        actions=rng.standard_normal((n, 8)).astype(np.float32),
    )


def test_episode_round_trips_through_robomimic_layout(tmp_path) -> None:
    ep = _episode()
    path = dataset.write_episode(tmp_path / "a.hdf5", ep, list(robot.JOINT_NAMES))
    with h5py.File(path) as f:
        assert f["data/demo_0/obs/front_rgb"].shape == (5, 64, 64, 3)
        assert f["data/demo_0"].attrs["instruction"] == "pick up the red cube"
    back = dataset.read_episode(path)
    np.testing.assert_array_equal(back.front, ep.front)
    np.testing.assert_array_equal(back.actions, ep.actions)
    assert (back.task, back.seed, back.success) == ("pick_red", 7, True)


def test_crash_while_writing_leaves_no_file(tmp_path, monkeypatch) -> None:
    ep = _episode()
    ep.actions = object()  # h5py cannot store this: the write fails midway
    with pytest.raises(Exception):
        dataset.write_episode(tmp_path / "b.hdf5", ep, list(robot.JOINT_NAMES))
    assert list(tmp_path.iterdir()) == []


def test_reader_names_the_bad_field(tmp_path) -> None:
    path = dataset.write_episode(tmp_path / "c.hdf5", _episode(), list(robot.JOINT_NAMES))
    with h5py.File(path, "a") as f:
        del f["data/demo_0/obs/qpos"]
        f["data/demo_0/obs/qpos"] = np.zeros((4, 8), np.float64)
    with pytest.raises(DatasetError, match="obs/qpos"):
        dataset.read_episode(path)
    (tmp_path / "d.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(DatasetError, match="d.hdf5"):
        dataset.read_episode(tmp_path / "d.hdf5")


def test_collect_writes_successful_episodes_with_policy_sized_images(tmp_path) -> None:
    from omni_vla_sim.collect import main

    assert main(["--out", str(tmp_path), "--tasks", "touch_yellow", "--episodes", "2", "--workers", "1"]) == 0
    episodes = list(dataset.iter_episodes(tmp_path))
    assert [e.seed for e in episodes] == [0, 1]
    for ep in episodes:
        assert ep.success and ep.front.shape[1:] == (64, 64, 3)
        assert ep.front.std() > 5, "images must be real renders"
        # Position actuators track the commanded targets within a tick of motion.
        np.testing.assert_allclose(ep.qpos[1:, :7], ep.actions[:-1, :7], atol=0.1)
    # Idempotent: a second run finds the episodes present and writes nothing new.
    before = {p: p.stat().st_mtime_ns for p in dataset.episode_files(tmp_path)}
    main(["--out", str(tmp_path), "--tasks", "touch_yellow", "--episodes", "2", "--workers", "1"])
    assert before == {p: p.stat().st_mtime_ns for p in dataset.episode_files(tmp_path)}


def test_collect_with_grasp_offset_writes_correction_episodes_for_placing_tasks_only(tmp_path) -> None:
    from omni_vla_sim.collect import main

    args = ["--out", str(tmp_path), "--episodes", "1", "--workers", "1", "--grasp-offset", "0.01", "0.02"]
    assert main(args) == 0
    names = sorted(p.name for p in dataset.episode_files(tmp_path))
    assert names == ["place_blue_on_green_offcentre_0000000.hdf5", "stack_red_on_blue_offcentre_0000000.hdf5"]
    for ep in dataset.iter_episodes(tmp_path):
        assert ep.success and ep.actions[0, 7] == 0.0, "a correction episode starts with the cube already grasped"
    with pytest.raises(SystemExit, match="grasp-offset"):
        main(["--out", str(tmp_path), "--grasp-offset", "0.03", "0.05"])
