"""`omni-vla import lerobot` on a SmolVLA checkpoint that LeRobot 0.4.4 wrote itself (save_pretrained and its
processors, in its own venv, seeded random weights at test size, non-square cameras): the bundle tokenises on
the robot as LeRobot's processor does, and its actions on each robot runtime match LeRobot's whole pipeline
(preprocessor -> predict_action_chunk -> postprocessor) at >= 40 dB on the same noise.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from import_cli import import_cli, imported_bundle
from lerobot_env import PANDA_JOINTS, SMOLVLA_CAMERAS, SMOLVLA_TASK, lerobot_smolvla

from omni_vla.runtime.vla import read_vla_manifest
from omni_vla_policies.vla.parity_import import compare, open_vla
from omni_vla_policies.vla.smolvla_config import tiny

PARITY_DB = 40.0
TASK, JOINTS, GRIPPER, CAMERAS = SMOLVLA_TASK, PANDA_JOINTS, PANDA_JOINTS[-1], SMOLVLA_CAMERAS


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lerobot_smolvla(tmp_path_factory.mktemp("smolvla_ckpt"))


@pytest.fixture(scope="module")
def bundle(reference: Path) -> Path:
    return imported_bundle(reference, JOINTS, GRIPPER)


def test_bundle_states_the_checkpoints_robot_side_and_ships_its_tokenizer(bundle: Path) -> None:
    m = read_vla_manifest(bundle)
    assert m.policy == "lerobot_smolvla" and [c.name for c in m.cameras] == list(CAMERAS)
    assert (m.cameras[0].height, m.cameras[0].width) == (48, 80)
    assert m.action.joint_names == JOINTS and m.action.gripper == GRIPPER and m.action.chunk_length == tiny().chunk_size
    assert m.language.tokenizer_file is not None and (bundle / m.language.tokenizer_file.file).is_file()
    assert m.language.prompt_suffix == "\n" and m.language.max_tokens == 8
    assert set(m.stages["step"].artifacts) == {"executorch", "mnn", "onnx"}


@pytest.mark.parametrize("backend", ["executorch", "mnn"])
def test_imported_smolvla_matches_lerobots_pipeline_end_to_end(reference: Path, bundle: Path, backend: str) -> None:
    res = compare(bundle, dict(np.load(reference / "io.npz")), TASK, backend)
    assert res["tokens_match"] and res["snr_db"] >= PARITY_DB, res


def test_the_manifest_states_each_runtimes_parity_against_the_eager_model(reference: Path, bundle: Path) -> None:
    """Written at import on a synthetic observation; at fp32 far above the goal, as against LeRobot itself."""
    parity = read_vla_manifest(bundle).source["parity_db"]
    assert set(parity) == {"executorch", "mnn"} and min(parity.values()) >= 80.0, parity


def _parity_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "parity", *args, "--json"],
                          capture_output=True, text=True, timeout=600)


def test_omni_vla_parity_rechecks_the_bundle_against_its_checkpoint(bundle: Path) -> None:
    """The verb a user runs after copying a bundle or upgrading a runtime: the same observation as the import's,
    so the figures agree with the manifest's."""
    res = _parity_cli("--bundle", str(bundle))
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout)
    recorded = read_vla_manifest(bundle).source["parity_db"]
    assert report["policy"] == "lerobot_smolvla" and set(report["end_to_end_snr_db"]) == {"executorch", "mnn"}
    for backend, db in report["end_to_end_snr_db"].items():
        assert db >= 80.0 and abs(db - recorded[backend]) < 1.0, (report, recorded)


def test_parity_refuses_a_moved_checkpoint_or_other_weights_in_one_line(reference: Path, bundle: Path,
                                                                       tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(bundle, moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["source"]["checkpoint"] = str(tmp_path / "gone")
    (moved / "manifest.json").write_text(json.dumps(manifest))
    res = _parity_cli("--bundle", str(moved))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--checkpoint DIR" in res.stderr, res.stderr
    other = tmp_path / "other"
    shutil.copytree(reference / "pretrained_model", other)
    with open(other / "model.safetensors", "r+b") as f:  # the last byte of the last tensor: other weights
        f.seek(0, 2)
        f.seek(f.tell() - 1)
        f.write(b"\x01")
    res = _parity_cli("--bundle", str(moved), "--checkpoint", str(other))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "not the weights this bundle" in res.stderr, \
        res.stderr


def test_the_runtime_benchmark_times_the_imported_bundle_against_onnxruntime_in_the_same_run(bundle: Path) -> None:
    """The baseline of issue-size comparisons: the bundle's ONNX programs (there for MNN) through the same staged
    runtime on onnxruntime, interleaved with the robot runtimes, stage by stage too."""
    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", "--bundle", str(bundle),
                          "--threads", "1", "--reps", "3", "--warmup", "1", "--stages", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    [res] = json.loads(out.stdout)
    assert set(res["backends"]) == set(res["stages"]["backends"]) == {"onnxruntime", "executorch", "mnn"}
    for stats in res["backends"].values():
        assert 0.0 < stats["median_ms"] <= stats["p99_ms"]


def test_an_int8_variant_states_a_parity_that_holds_against_lerobot(reference: Path, tmp_path: Path) -> None:
    """The figure in the manifest is measured against the eager fp32 model; LeRobot's own pipeline on another
    observation must tell the same story (within 6 dB), so the stated figure is not a self-serving one."""
    out = tmp_path / "int8"
    res = import_cli(str(reference / "pretrained_model"), "--out", str(out), "--joint-names", ",".join(JOINTS),
                     "--rate-hz", "10", "--quantize", "int8")
    assert res.returncode == 0, res.stderr[-3000:]
    m = read_vla_manifest(out)
    assert "int8" in m.source["quantization"]
    io = dict(np.load(reference / "io.npz"))
    for backend, stated in m.source["parity_db"].items():
        measured = compare(out, io, TASK, backend)["snr_db"]
        assert stated < 80.0 and abs(measured - stated) <= 6.0, (backend, stated, measured)


def test_parity_command_prints_each_backends_figure(reference: Path, bundle: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "omni_vla_policies.vla.parity_import", str(bundle),
                          str(reference / "io.npz"), "--task", TASK, "--backends", "mnn"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["backends"]["mnn"]["snr_db"] >= PARITY_DB
    bad = subprocess.run([sys.executable, "-m", "omni_vla_policies.vla.parity_import", str(bundle),
                          str(reference / "missing.npz"), "--task", TASK], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "missing.npz" in bad.stderr


def test_the_instruction_changes_the_actions(reference: Path, bundle: Path) -> None:
    """The language reaches the prefix: another instruction moves the chunk (a tokenizer ignored would not)."""
    io = dict(np.load(reference / "io.npz"))
    rt = open_vla(bundle, "mnn")
    images = {c: io[f"image.{c}"][None] for c in CAMERAS}
    zeros = np.zeros((1, rt.horizon, rt.action_dim), np.float32)
    a, b = np.zeros_like(zeros[0]), np.zeros_like(zeros[0])
    rt.infer(images, io["state"][None], rt.encode_instruction(TASK)[None], zeros, 0, io["noise"], a)
    rt.infer(images, io["state"][None], rt.encode_instruction("push the green cube left")[None], zeros, 0,
             io["noise"], b)
    assert np.abs(a - b).max() > 1e-4


def test_a_policy_kind_that_cannot_be_imported_is_refused_naming_the_kinds(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"type": "pi0_fast"}))
    res = import_cli(str(tmp_path), "--out", str(tmp_path / "b"), "--joint-names", "a", "--rate-hz", "10")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "'pi0_fast'" in res.stderr and "act, smolvla" in res.stderr and not (tmp_path / "b").exists()


@pytest.mark.parametrize("kind", ["smolvla", "pi0", "pi05"])
def test_an_instruction_table_is_refused_for_a_policy_that_reads_the_instruction_itself(tmp_path: Path,
                                                                                        kind: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"type": kind}))
    (tmp_path / "table.json").write_text("{}")
    res = import_cli(str(tmp_path), "--out", str(tmp_path / "b"), "--joint-names", "a", "--rate-hz", "10",
                     "--instructions", str(tmp_path / "table.json"))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "--instructions applies to ACT checkpoints" in res.stderr and f"this one is {kind}" in res.stderr
    assert not (tmp_path / "b").exists()


def test_a_checkpoint_whose_vlm_cannot_be_found_is_refused_in_one_line(reference: Path, tmp_path: Path) -> None:
    ck = tmp_path / "pretrained_model"
    subprocess.run(["cp", "-r", str(reference / "pretrained_model"), str(ck)], check=True)
    cfg = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**cfg, "vlm_model_name": "someone/unknown-vlm"}))
    res = import_cli(str(ck), "--out", str(tmp_path / "b"), "--joint-names", ",".join(JOINTS), "--rate-hz", "10")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "someone/unknown-vlm" in res.stderr
    assert not (tmp_path / "b").exists()


def test_wrong_joint_count_is_refused_and_writes_nothing(reference: Path, tmp_path: Path) -> None:
    res = import_cli(str(reference / "pretrained_model"), "--out", str(tmp_path / "b"), "--joint-names", "a,b",
                     "--rate-hz", "10")
    assert res.returncode == 2 and "2 joint names" in res.stderr and res.stderr.strip().count("\n") == 0
    assert list(tmp_path.iterdir()) == []


def test_the_imported_bundle_runs_in_the_evaluation_suite_by_changing_only_the_bundle(bundle: Path,
                                                                                      tmp_path: Path) -> None:
    """Seeded random weights: nothing is expected to succeed, but every episode runs through the supervisor,
    which counts what it had to stop (a random policy's targets leave the limits)."""
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "eval", "--bundle", str(bundle), "--backend",
                          "mnn", "--tasks", "pick_red", "--episodes", "1", "--workers", "1", "--out", str(tmp_path / "e"),
                          "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    task = report["tasks"]["pick_red"]
    assert report["settings"]["bundle_dir"] == str(bundle) and task["episodes"] == 1
    assert task["mean_episode_length"] > 0 and task["interventions_per_episode"] > 0


def test_a_bundle_whose_cameras_the_robot_lacks_is_refused_in_one_line(bundle: Path, tmp_path: Path) -> None:
    other = tmp_path / "bundle"
    shutil.copytree(bundle, other)
    (other / "manifest.json").write_text((bundle / "manifest.json").read_text().replace('"front"', '"top"'))
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "eval", "--bundle", str(other), "--backend",
                          "mnn", "--tasks", "pick_red", "--episodes", "1", "--out", str(tmp_path / "e")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0
    assert "'top'" in res.stderr and "front" in res.stderr and not (tmp_path / "e").exists()
