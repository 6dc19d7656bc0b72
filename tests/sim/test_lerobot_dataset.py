"""`omni-vla dataset lerobot`: our demonstrations become a LeRobotDataset that LeRobot itself loads and trains on.

The dataset is read back in LeRobot's own venv by LeRobot's own LeRobotDataset (tests/support/
lerobot_dataset_check.py): every frame's state and action equal to the HDF5 bit for bit, video frames within
the codec's error and at the right time, episode boundaries, instructions and the task one-hot right, and the
statistics equal to those LeRobot computes itself. LeRobot's own training entry point then runs on it.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from lerobot_env import lerobot_env, lerobot_python
from safetensors.numpy import load_file

from omni_vla.tools.cli import main as cli
from omni_vla_sim import collect
from omni_vla_sim.dataset import DatasetError, episode_files, read_episode, write_episode
from omni_vla_sim.lerobot_dataset import LeRobotExportConfig, convert, joint_names, task_names

CHECK = Path(__file__).resolve().parents[1] / "support" / "lerobot_dataset_check.py"
CAMERAS = ("front", "wrist")
# libx264 yuv444p crf 18 on our 64x64 cameras, decoded by LeRobot's torchcodec: measured 38.4-40.8 dB per episode and
# camera (38.8 dB front, 39.9 dB wrist overall), worst frame 36.2 dB; one frame off: 27-32 dB.
MIN_PSNR_DB = 37.0
MIN_FRAME_PSNR_DB = 33.0  # the worst single frame
FILE_FRAMES = 300  # small enough that the test's ~800 frames span several data and video files


def _lerobot_env() -> dict[str, str]:
    return lerobot_env(HF_HUB_OFFLINE="1", WANDB_MODE="disabled")


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two scripted-expert episodes per task, collected for this test (a few seconds)."""
    out = tmp_path_factory.mktemp("demos")
    assert collect.main(["--episodes", "2", "--workers", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def converted(demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lerobot") / "omni_vla"
    convert(demos, out, cfg=LeRobotExportConfig(max_frames_per_file=FILE_FRAMES))
    return out


def _psnr(ref: np.ndarray, got: np.ndarray) -> float:
    mse = np.mean((ref.astype(np.float64) - got.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / mse))


def test_refuses_an_existing_output_with_one_line(demos: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    assert cli(["dataset", "lerobot", str(demos), "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already exists" in err, err
    assert not any((tmp_path / "taken").iterdir())


def test_a_failed_conversion_leaves_nothing_behind(demos: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    for path in episode_files(demos)[:2]:
        (data / path.name).parent.mkdir(parents=True, exist_ok=True)
        (data / path.name).write_bytes(path.read_bytes())
    (data / "zz_truncated.hdf5").write_bytes(b"not an HDF5 file")  # read after the good ones
    with pytest.raises(DatasetError, match="zz_truncated.hdf5"):
        convert(data, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_only_successful_leaves_the_failed_episodes_out(demos: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    good = episode_files(demos)[:2]
    for path in good:
        (data / path.name).parent.mkdir(parents=True, exist_ok=True)
        (data / path.name).write_bytes(path.read_bytes())
    failed = dataclasses.replace(read_episode(good[0]), success=False)
    write_episode(data / "failed.hdf5", failed, joint_names(good[0]))

    everything = convert(data, tmp_path / "all")
    successful = convert(data, tmp_path / "ok", only_successful=True)
    assert everything["total_episodes"] == 3 and successful["total_episodes"] == 2
    assert everything["total_frames"] - successful["total_frames"] == len(failed)


@pytest.mark.slow
def test_lerobot_loads_our_demonstrations_frame_for_frame(demos: Path, converted: Path, tmp_path: Path) -> None:
    episodes = [read_episode(p) for p in episode_files(demos)]
    np.savez(tmp_path / "raw.npz", **{f"e{i}/{c}": getattr(ep, c) for i, ep in enumerate(episodes) for c in CAMERAS})
    out = subprocess.run([str(lerobot_python()), str(CHECK), str(converted), "--raw", str(tmp_path / "raw.npz"),
                          "--dump", str(tmp_path / "dump.npz")],
                         capture_output=True, text=True, timeout=600, env=_lerobot_env())
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    dump = np.load(tmp_path / "dump.npz")

    assert summary["video_backend"] == "torchcodec" and summary["codebase_version"] == "v3.0"
    assert summary["num_episodes"] == len(episodes)
    assert summary["num_frames"] == sum(len(ep) for ep in episodes)
    joints = joint_names(episode_files(demos)[0])
    assert summary["features"]["observation.state"]["names"] == joints
    assert summary["features"]["action"]["names"] == joints
    assert summary["features"]["observation.environment_state"]["names"] == task_names()
    assert len({path.split("/")[-1] for path in summary["video_info"]}) >= 2  # several files per camera
    for path, info in summary["video_info"].items():  # info.json says what the mp4 holds
        assert info == summary["info_video"][path.split("/")[1]], path

    start = 0
    for i, (ep, row) in enumerate(zip(episodes, summary["episodes"])):
        sl = slice(start, start + len(ep))
        assert (row["from"], row["to"], row["tasks"]) == (start, start + len(ep), [ep.instruction])
        assert summary["frame_tasks"][sl] == [ep.instruction] * len(ep)
        np.testing.assert_array_equal(dump["observation.state"][sl], ep.qpos)
        np.testing.assert_array_equal(dump["action"][sl], ep.actions)
        np.testing.assert_array_equal(dump["observation.environment_state"][sl],
                                      np.tile(np.eye(len(task_names()))[task_names().index(ep.task)], (len(ep), 1)))
        np.testing.assert_array_equal(dump["episode_index"][sl], i)
        np.testing.assert_array_equal(dump["frame_index"][sl], np.arange(len(ep)))
        np.testing.assert_allclose(dump["timestamp"][sl], np.arange(len(ep)) / 20.0, atol=1e-6)
        for cam in CAMERAS:
            decoded, raw = dump[f"video/observation.images.{cam}"][sl].transpose(0, 2, 3, 1), getattr(ep, cam)
            assert _psnr(raw, decoded) >= MIN_PSNR_DB, (i, cam, _psnr(raw, decoded))
            assert min(_psnr(r, d) for r, d in zip(raw, decoded)) >= MIN_FRAME_PSNR_DB, (i, cam)
            # at its own time step: shifting the video one frame either way matches the episode worse
            assert _psnr(raw, decoded) > max(_psnr(raw[1:], decoded[:-1]), _psnr(raw[:-1], decoded[1:])), (i, cam)
        start += len(ep)
    np.testing.assert_array_equal(dump["index"], np.arange(start))

    # stats.json equals LeRobot's own computation: the recorder's (per episode, then aggregated) and, but for
    # the images (raw frames there, decoded video here), compute_quantile_stats_for_dataset on the loaded dataset
    # (whose timestamps are the parquet's float32, the recorder's float64: their histogram quantiles differ ~1e-5)
    assert max(summary["stats_diff_recorder"].values()) < 1e-9, summary["stats_diff_recorder"]
    assert max(max(d.values()) for d in summary["episode_stats_diff_recorder"]) < 1e-9
    loaded = summary["stats_diff_loaded"]
    assert loaded["timestamp"] < 1e-4 and all(v < 1e-9 for k, v in loaded.items() if k != "timestamp"
                                               and "images" not in k), loaded
    for cam in CAMERAS:
        key = f"observation.images.{cam}"
        np.testing.assert_allclose(summary["image_mean_ours"][key], summary["image_mean_loaded"][key], atol=0.005)
        assert min(summary["image_std_ours"][key]) > 0.05  # real pixel spread, not LeRobot 0.4.4's overflowed ~0


# LeRobot's own training entry point on the converted dataset; an ACT small enough for a test (the defaults, 52M
# parameters, took 30 s for 3 steps here). No pretrained backbone: its ImageNet weights would be downloaded.
TRAIN_ARGS = ["--dataset.repo_id=local/omni_vla", "--policy.type=act", "--policy.device=cpu",
              "--policy.push_to_hub=false", "--policy.pretrained_backbone_weights=null", "--wandb.enable=false",
              "--num_workers=0", "--batch_size=2", "--steps=2", "--save_freq=2",
              "--policy.dim_model=64", "--policy.n_heads=2", "--policy.dim_feedforward=128",
              "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1", "--policy.latent_dim=8",
              "--policy.n_vae_encoder_layers=1", "--policy.chunk_size=10", "--policy.n_action_steps=10"]


@pytest.mark.slow
def test_lerobot_train_runs_on_the_dataset_and_normalises_with_its_stats(converted: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(lerobot_python()), "-m", "lerobot.scripts.lerobot_train", *TRAIN_ARGS,
                          f"--dataset.root={converted}", f"--output_dir={tmp_path / 'train'}"],
                         capture_output=True, text=True, timeout=600, env=_lerobot_env())
    assert out.returncode == 0, out.stderr[-3000:]
    model = tmp_path / "train" / "checkpoints" / "000002" / "pretrained_model"
    config = json.loads((model / "config.json").read_text())
    assert config["input_features"] == {
        "observation.images.front": {"type": "VISUAL", "shape": [3, 64, 64]},
        "observation.images.wrist": {"type": "VISUAL", "shape": [3, 64, 64]},
        "observation.state": {"type": "STATE", "shape": [8]},
        "observation.environment_state": {"type": "ENV", "shape": [len(task_names())]}}
    assert config["output_features"] == {"action": {"type": "ACTION", "shape": [8]}}
    assert (model / "model.safetensors").stat().st_size > 0
    normaliser = load_file(model / "policy_preprocessor_step_3_normalizer_processor.safetensors")
    stats = json.loads((converted / "meta" / "stats.json").read_text())
    for key in ("observation.state", "action"):  # the policy normalises with our stats.json
        for stat in ("mean", "std"):
            np.testing.assert_allclose(normaliser[f"{key}.{stat}"], stats[key][stat], rtol=1e-6)


def test_the_instruction_table_maps_each_instruction_of_the_dataset_to_its_tasks_one_hot(
        demos: Path, converted: Path) -> None:
    """What `omni-vla import lerobot --instructions` takes: exactly the dataset's instructions, each to the
    one-hot its frames carry as observation.environment_state."""
    table = json.loads((converted / "meta" / "omni_vla_instructions.json").read_text())
    assert table["names"] == task_names()
    episodes = [read_episode(p) for p in episode_files(demos)]
    assert set(table["table"]) == {ep.instruction for ep in episodes}
    for ep in episodes:
        assert table["table"][ep.instruction] == [float(n == ep.task) for n in task_names()]
