"""pi0 and pi0.5 checkpoints that LeRobot 0.6.1 wrote itself (its own classes at test size, seeded random weights,
save_pretrained and its processors, in its own Python 3.12 venv): our stages reproduce LeRobot's own stage
computations and its predict_action_chunk, and `omni-vla import lerobot` turns them into bundles whose chunks on
ExecuTorch and MNN match LeRobot's whole pipeline (preprocessor -> predict_action_chunk -> postprocessor) on the same
noise, tokenising (pi0.5: with the state in the prompt) and normalising (pi0.5: QUANTILES) as LeRobot does.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from import_cli import import_cli, imported_bundle
from lerobot_env import PANDA_JOINTS, PI0_CAMERAS, PI0_TASK, lerobot_pi0

from omni_vla.runtime.vla import read_vla_manifest
from omni_vla_policies.lerobot_pi0 import build_pi0, read_pi0_checkpoint
from omni_vla_policies.vla.parity_import import compare, open_vla
from omni_vla_policies.parity import snr_db
from omni_vla_policies.vla.pi0_model import sample_actions, stage_modules

pytestmark = pytest.mark.slow

PARITY_DB = 40.0
JOINTS, GRIPPER = PANDA_JOINTS, PANDA_JOINTS[-1]


@pytest.fixture(scope="session", params=["pi0", "pi05"])
def reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lerobot_pi0(tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture(scope="session")
def bundle(reference: Path) -> Path:
    return imported_bundle(reference, JOINTS, GRIPPER)


def policy_of(reference: Path) -> str:
    return json.loads((reference / "pretrained_model" / "config.json").read_text())["type"]


@torch.no_grad()
def test_each_stage_matches_lerobots_own_computation(reference: Path) -> None:
    """embed_image per camera, the prefix pass's KV cache, one denoise_step: ours from the checkpoint's weights."""
    io = dict(np.load(reference / "io.npz"))
    ck = read_pi0_checkpoint(reference / "pretrained_model")
    st = stage_modules(build_pi0(ck.arch, ck.weights))
    vision = [st["vision"](torch.from_numpy(io[f"image.{c}"][None])) for c in ck.cameras]
    lang, mask = torch.from_numpy(io["lang_tokens"].astype(np.int32)), torch.from_numpy(io["lang_mask"])
    keys, values = st["prefix"](torch.cat(vision), lang, mask, torch.from_numpy(io["state_padded"]))
    n = io["keys"].shape[1]  # pi0's cache holds its state token's K/V after LeRobot's prefix positions
    assert keys.shape[1] == n + (policy_of(reference) == "pi0")
    step = st["step"](torch.from_numpy(io["noise_padded"]), torch.ones(1), keys, values, mask)
    snr = {**{f"vision.{c}": snr_db(io["vision"][i], v[0].numpy()) for i, (c, v) in enumerate(zip(ck.cameras, vision))},
           "keys": snr_db(io["keys"], keys[:, :n].numpy()), "values": snr_db(io["values"], values[:, :n].numpy()),
           "step": snr_db(io["step"], step.numpy())}
    print(json.dumps({"policy": policy_of(reference), "stage_snr_db": {k: round(v, 1) for k, v in snr.items()}}))
    assert min(snr.values()) >= PARITY_DB, snr


def test_the_chunk_through_our_stages_matches_lerobots_predict_action_chunk(reference: Path) -> None:
    io = dict(np.load(reference / "io.npz"))
    ck = read_pi0_checkpoint(reference / "pretrained_model")
    images = [torch.from_numpy(io[f"image.{c}"][None]) for c in ck.cameras]
    chunk = sample_actions(build_pi0(ck.arch, ck.weights), images,
                           torch.from_numpy(io["lang_tokens"].astype(np.int32)), torch.from_numpy(io["lang_mask"]),
                           torch.from_numpy(io["state_padded"]), torch.from_numpy(io["noise_padded"]))
    snr = snr_db(io["actions_normalised"], chunk.numpy())
    print(json.dumps({"policy": policy_of(reference), "chunk_snr_db": round(snr, 1)}))
    assert snr >= PARITY_DB


def test_the_state_normalisation_is_lerobots(reference: Path) -> None:
    """pi0: MEAN_STD, pi0.5: QUANTILES (q01 / q99 to [-1, 1]), as the affine map the bundle carries."""
    io = dict(np.load(reference / "io.npz"))
    ck = read_pi0_checkpoint(reference / "pretrained_model")
    ours = (io["state"] - ck.state.subtract) / ck.state.divide
    np.testing.assert_allclose(ours, io["state_padded"][0, :len(JOINTS)], rtol=1e-5, atol=1e-6)
    mode = ck.config["normalization_mapping"]["STATE"]
    assert mode == ("QUANTILES" if policy_of(reference) == "pi05" else "MEAN_STD")


def test_the_bundle_states_the_checkpoints_prompt_and_robot_side(reference: Path, bundle: Path) -> None:
    m = read_vla_manifest(bundle)
    pol = policy_of(reference)
    assert m.policy == f"lerobot_{pol}" and [c.name for c in m.cameras] == list(PI0_CAMERAS)
    assert (m.cameras[0].height, m.cameras[0].width) == tuple(PI0_CAMERAS["front"][1:])
    assert m.action.joint_names == JOINTS and m.action.gripper == GRIPPER and m.flow.num_steps == 3
    assert m.language.tokenizer_file is not None and (bundle / m.language.tokenizer_file.file).is_file()
    if pol == "pi05":
        assert m.language.state_prompt is not None and m.language.state_prompt.bins == 256
    else:
        assert m.language.state_prompt is None and m.language.prompt_suffix == "\n"
    assert set(m.stages["step"].artifacts) == {"executorch", "mnn", "onnx"}
    assert min(m.source["parity_db"].values()) >= 80.0, m.source["parity_db"]


@pytest.mark.parametrize("backend", ["executorch", "mnn"])
def test_the_imported_bundle_matches_lerobots_pipeline_end_to_end(reference: Path, bundle: Path, backend: str) -> None:
    res = compare(bundle, dict(np.load(reference / "io.npz")), PI0_TASK, backend)
    print(json.dumps({"policy": policy_of(reference), "backend": backend, **res}))
    assert res["tokens_match"] and res["snr_db"] >= PARITY_DB, res


def test_an_int8_variant_states_a_parity_that_holds_against_lerobot(reference: Path, tmp_path: Path) -> None:
    """Quantised in place (a full-size pi0 cannot hold a float and an int8 copy at once), its figure measured against
    a second float build; LeRobot's own pipeline on another observation must tell the same story (within 6 dB)."""
    out = tmp_path / "int8"
    res = import_cli(str(reference / "pretrained_model"), "--out", str(out), "--joint-names", ",".join(JOINTS),
                     "--rate-hz", "30", "--gripper", GRIPPER, "--backends", "executorch", "--quantize", "int8")
    assert res.returncode == 0, res.stderr[-3000:]
    m = read_vla_manifest(out)
    assert "int8" in m.source["quantization"] and set(m.source["parity_db"]) == {"executorch"}
    stated = m.source["parity_db"]["executorch"]
    measured = compare(out, dict(np.load(reference / "io.npz")), PI0_TASK, "executorch")["snr_db"]
    print(json.dumps({"policy": policy_of(reference), "int8_stated_db": stated, "int8_vs_lerobot_db": measured}))
    assert stated < 80.0 and abs(measured - stated) <= 6.0, (stated, measured)


def test_omni_vla_parity_rechecks_the_bundle_against_its_checkpoint(bundle: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "parity", "--bundle", str(bundle), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report, recorded = json.loads(res.stdout), read_vla_manifest(bundle).source["parity_db"]
    assert report["policy"] == read_vla_manifest(bundle).policy and set(report["end_to_end_snr_db"]) == set(recorded)
    for backend, db in report["end_to_end_snr_db"].items():
        assert db >= 40.0 and abs(db - recorded[backend]) < 1.0, (report, recorded)


def test_the_state_reaches_the_chunk_and_pi05s_prompt(reference: Path, bundle: Path) -> None:
    """Another state moves the chunk (pi0: through its state token; pi0.5: through its prompt's bins, as its
    prefix ignores the state input)."""
    io = dict(np.load(reference / "io.npz"))
    rt = open_vla(bundle, "mnn")
    images = {c: io[f"image.{c}"][None] for c in PI0_CAMERAS}
    lang = rt.encode_instruction(PI0_TASK)[None]
    zeros = np.zeros((1, rt.horizon, rt.action_dim), np.float32)
    a, b = np.zeros_like(zeros[0]), np.zeros_like(zeros[0])
    rt.infer(images, io["state"][None], lang, zeros, 0, io["noise"], a)
    rt.infer(images, io["state"][None] + 0.5, lang, zeros, 0, io["noise"], b)
    assert np.abs(a - b).max() > 1e-4
    if policy_of(reference) == "pi05":
        norm = np.zeros(len(JOINTS), np.float32)
        assert rt.prompt_token_ids(PI0_TASK, norm) != rt.prompt_token_ids(PI0_TASK, norm + 0.5)


def test_a_pi_checkpoint_with_relative_actions_is_refused_in_one_line(reference: Path, tmp_path: Path) -> None:
    ck = tmp_path / "pretrained_model"
    shutil.copytree(reference / "pretrained_model", ck)
    cfg = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**cfg, "use_relative_actions": True}))
    res = import_cli(str(ck), "--out", str(tmp_path / "b"), "--joint-names", ",".join(JOINTS), "--rate-hz", "10")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "use_relative_actions" in res.stderr
    assert not (tmp_path / "b").exists()


def test_a_policy_kind_that_cannot_be_imported_is_refused_naming_the_kinds(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"type": "pi0_fast"}))
    res = import_cli(str(tmp_path), "--out", str(tmp_path / "b"), "--joint-names", "a", "--rate-hz", "10")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "'pi0_fast'" in res.stderr and "act, smolvla, pi0, pi05" in res.stderr and not (tmp_path / "b").exists()


def test_the_imported_bundle_runs_in_the_evaluation_suite_by_changing_only_the_bundle(bundle: Path,
                                                                                      tmp_path: Path) -> None:
    """Seeded random weights: nothing is expected to succeed, but every episode runs through the loop (pi0.5: its
    prompt tokenised with the state each inference) and the supervisor, which counts what it had to stop."""
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "eval", "--bundle", str(bundle), "--backend",
                          "mnn", "--tasks", "pick_red", "--episodes", "1", "--workers", "1",
                          "--out", str(tmp_path / "e"), "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    task = json.loads(res.stdout.strip().splitlines()[-1])["tasks"]["pick_red"]
    assert task["episodes"] == 1 and task["mean_episode_length"] > 0 and task["interventions_per_episode"] > 0
