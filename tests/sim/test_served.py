"""An imported policy against the same policy run by LeRobot's own code, served over the OpenPI protocol from
LeRobot's own venv, inside the evaluation suite: the per-step agreement on identical observations, and the same
episodes with the imported bundle driving them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from import_cli import imported_bundle
from lerobot_env import PANDA_JOINTS, imported_act, lerobot_smolvla, served_policy

ACT = {"seed": 5, "cameras": ["front", "wrist"], "image_size": [64, 64], "state_dim": 8, "action_dim": 8, "env_dim": 4,
       "norm": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
       "act": {"chunk_size": 16, "n_action_steps": 8, "dim_model": 32, "n_heads": 4, "dim_feedforward": 64,
               "n_encoder_layers": 1, "n_decoder_layers": 1, "use_vae": False}}


@pytest.fixture(scope="module")
def act(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported_act(tmp_path_factory.mktemp("served_act"), ACT)


def _settings(bundle: Path, **kw):
    from omni_vla_sim.eval import EvalSettings

    return EvalSettings(**{"backend": "mnn", "bundle_dir": bundle, "tasks": ("touch_yellow",), "episodes": 2,
                           "image_size": 64, "strategy": "naive", **kw})


@pytest.mark.slow
def test_the_imported_act_agrees_with_lerobots_own_at_every_step_of_an_evaluation(act: Path, tmp_path: Path) -> None:
    from omni_vla_sim.eval import evaluate
    from omni_vla_sim.served import evaluate_served

    checkpoint = act.parent / "pretrained_model"
    with served_policy(checkpoint) as url:
        served = evaluate_served(_settings(act), url, checkpoint, out=tmp_path / "served")
    agreement = served["served"]
    print(agreement)  # pytest -s: the figure
    assert agreement["chunks"] >= 2 * 10, agreement  # every chunk of both episodes, each compared
    assert agreement["snr_db"] >= 40 and agreement["snr_db_delta"] >= 40, agreement
    assert json.loads((tmp_path / "served" / "served.json").read_text())["chunks"] == agreement["chunks"]
    evaluate(_settings(act), workers=1, out=tmp_path / "imported", progress=False)
    # Same seeds, same loop and supervisor: the episodes the bundle drives are the ones LeRobot's code drove.
    a, b = (json.loads((tmp_path / d / "episodes.json").read_text()) for d in ("served", "imported"))
    assert [(e["seed"], e["success"], e["steps"]) for e in a] == [(e["seed"], e["success"], e["steps"]) for e in b]
    for x, y in zip(a, b):
        assert np.max(np.abs(np.array(x["actions"]) - np.array(y["actions"]))) < 1e-3


@pytest.mark.slow
def test_a_wrong_policy_behind_the_server_is_seen_as_disagreement(act: Path, tmp_path: Path) -> None:
    """The figure can fail: the same architecture with other weights, served, agrees with nothing."""
    from lerobot_env import lerobot_checkpoint
    from omni_vla_sim.served import evaluate_served

    (tmp_path / "other").mkdir()
    other = lerobot_checkpoint(tmp_path / "other", {**ACT, "seed": 6})
    with served_policy(other) as url:
        report = evaluate_served(_settings(act, episodes=1), url, other)
    assert report["served"]["snr_db_delta"] < 20, report["served"]


def test_a_served_policy_refuses_a_committed_prefix() -> None:
    from omni_vla_sim.served import ServedRuntime

    rt = ServedRuntime.__new__(ServedRuntime)
    with pytest.raises(ValueError, match="strategy naive or average"):
        rt.infer({}, np.zeros((1, 8), np.float32), np.zeros((1, 4), np.float32), np.zeros((1, 16, 8), np.float32), 3,
                 np.zeros((1, 16, 8), np.float32), np.zeros((16, 8), np.float32))


@pytest.mark.slow
def test_the_imported_smolvla_agrees_with_lerobots_own_at_every_step_of_an_evaluation(tmp_path: Path) -> None:
    """A flow-matching VLA: the server gets the loop's noise, so both sides integrate the same flow."""
    from omni_vla_sim.served import evaluate_served

    ref = lerobot_smolvla(tmp_path)
    bundle = imported_bundle(ref, PANDA_JOINTS, "panda_finger_joint1")
    checkpoint = ref / "pretrained_model"
    with served_policy(checkpoint) as url:
        report = evaluate_served(_settings(bundle, episodes=1, noise_scale=1.0), url, checkpoint)
    agreement = report["served"]
    print(agreement)
    assert agreement["chunks"] >= 5 and agreement["snr_db_delta"] >= 40, agreement


@pytest.mark.slow
def test_a_smolvla_trained_by_lerobot_train_on_our_demonstrations_agrees_served_and_imported(tmp_path: Path) -> None:
    """The user's path end to end: our demonstrations as a LeRobotDataset, LeRobot's own training entry point, the
    checkpoint it saved imported, then LeRobot's code and the bundle side by side in an evaluation."""
    from lerobot_recipes import task_vlm, train

    from omni_vla_sim import collect
    from omni_vla_sim.lerobot_dataset import convert
    from omni_vla_sim.served import evaluate_served

    assert collect.main(["--episodes", "1", "--workers", "2", "--image-size", "64", "--out",
                         str(tmp_path / "demos")]) == 0
    convert(tmp_path / "demos", tmp_path / "dataset")
    checkpoint = train("smolvla", tmp_path / "dataset", tmp_path / "run" / "smolvla", steps=10,
                       vlm=task_vlm(tmp_path / "vlm"), timeout=900)
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["type"] == "smolvla" and config["input_features"]["observation.images.front"]["shape"] == [3, 64, 64]
    bundle = imported_bundle(checkpoint.parent, PANDA_JOINTS, "panda_finger_joint1")
    with served_policy(checkpoint) as url:
        report = evaluate_served(_settings(bundle, episodes=1, noise_scale=1.0), url, checkpoint)
    agreement = report["served"]
    print(agreement)
    assert agreement["chunks"] >= 2 and agreement["snr_db_delta"] >= 40, agreement
