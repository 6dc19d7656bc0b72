"""`omni-vla import lerobot --delegate openvino`: a SmolVLA checkpoint written by LeRobot's own code, its ExecuTorch
programs lowered to the OpenVINO delegate, runs through the robot's ExecuTorch runtime at fp32 parity with LeRobot's
pipeline. The runtime configures OpenVINO itself (f32, the node's threads): on a CPU with bf16 arithmetic (AMX,
AVX512-BF16, as this machine's) the install's own library runs bf16 and would fall below the fp32 figure."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from import_cli import import_cli
from lerobot_env import PANDA_JOINTS, SMOLVLA_TASK, lerobot_smolvla
from openvino_env import lib, openvino_dir

from omni_vla.runtime.vla import read_vla_manifest
from omni_vla_policies.vla.parity_import import compare

FP32_DB = 80.0  # bf16 arithmetic cannot reach this; f32 gives > 100 dB
ARGS = ("--joint-names", ",".join(PANDA_JOINTS), "--rate-hz", "10", "--backends", "executorch")


@pytest.fixture(scope="module")
def ov() -> Path:
    root = openvino_dir()
    saved = os.environ.get("OMNI_VLA_OPENVINO_DIR")
    os.environ["OMNI_VLA_OPENVINO_DIR"] = str(root)  # this process (parity) and the import's
    yield root
    if saved is None:
        os.environ.pop("OMNI_VLA_OPENVINO_DIR", None)
    else:
        os.environ["OMNI_VLA_OPENVINO_DIR"] = saved


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lerobot_smolvla(tmp_path_factory.mktemp("smolvla_ckpt"))


@pytest.fixture(scope="module")
def bundle(ov: Path, reference: Path) -> Path:
    out = reference.parent / "bundle_openvino"
    res = import_cli(str(reference / "pretrained_model"), "--out", str(out), *ARGS, "--delegate", "openvino")
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _run_in_child(bundle: Path, threads: int, env: dict[str, str]) -> dict:
    """The bundle's chunk on ExecuTorch in a fresh process (OpenVINO is configured once per process)."""
    code = f"""
import json, os, sys
import numpy as np
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.openvino import plugin_properties
from omni_vla_policies.vla.parity_import import compare
try:
    res = compare({str(bundle)!r}, dict(np.load({str(bundle.parent / 'ref' / 'io.npz')!r})), {SMOLVLA_TASK!r}, "executorch",
                  threads={threads})
except BundleError as exc:
    print(json.dumps({{"error": str(exc)}}))
    sys.exit(0)
print(json.dumps({{"snr_db": res["snr_db"], "plugins": plugin_properties(os.environ["OPENVINO_LIB_PATH"])}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_manifest_names_the_delegate_and_states_fp32_parity(bundle: Path) -> None:
    m = read_vla_manifest(bundle)
    assert {s.artifacts["executorch"].delegate for s in m.stages.values()} == {"openvino"}
    assert m.source["parity_db"]["executorch"] >= FP32_DB, m.source["parity_db"]


def test_openvino_delegated_smolvla_matches_lerobots_pipeline(ov: Path, reference: Path, bundle: Path) -> None:
    res = compare(bundle, dict(np.load(reference / "io.npz")), SMOLVLA_TASK, "executorch")
    assert res["tokens_match"] and res["snr_db"] >= FP32_DB, res


@pytest.mark.parametrize("threads", [1, 2])
def test_the_runtime_sets_f32_and_the_nodes_threads_even_over_a_library_left_at_bf16(
        ov: Path, bundle: Path, threads: int) -> None:
    """OPENVINO_LIB_PATH left at the wheel's own library (no plugins.xml: bf16 on this CPU) is not what runs."""
    env = {**os.environ, "OPENVINO_LIB_PATH": lib(ov, None)}
    got = _run_in_child(bundle, threads, env)
    assert got.get("plugins") == {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": str(threads)}, got
    assert got["snr_db"] >= FP32_DB, got


def test_bench_runtime_times_each_thread_count_of_an_openvino_bundle_in_a_process_of_its_own(bundle: Path) -> None:
    """OpenVINO is configured once per process: `--threads 1,2` in one process was refused at the second count."""
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", "--bundle", str(bundle),
                          "--threads", "1,2", "--reps", "1", "--warmup", "0", "--backends", "executorch", "--json"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    runs = json.loads(res.stdout)
    assert [r["threads"] for r in runs] == [1, 2]
    assert all(r["backends"]["executorch"]["median_ms"] > 0 for r in runs), runs


def test_bench_runtime_over_thread_counts_without_openvino_is_refused_in_one_line(bundle: Path, tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", "--bundle", str(bundle),
                          "--threads", "1,2", "--reps", "1", "--warmup", "0", "--backends", "executorch", "--json"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMNI_VLA_OPENVINO_DIR": str(tmp_path / "none")})
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("omni-vla bench runtime:")]
    assert res.returncode == 2 and len(lines) == 1 and "make setup-openvino" in lines[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_a_robot_without_openvino_refuses_the_bundle_in_one_line_naming_the_set_up(bundle: Path, tmp_path: Path) -> None:
    got = _run_in_child(bundle, 1, {**os.environ, "OMNI_VLA_OPENVINO_DIR": str(tmp_path / "none")})
    assert "OpenVINO is not installed" in got["error"] and "make setup-openvino" in got["error"], got
    assert "\n" not in got["error"]


def test_importing_with_the_delegate_but_without_openvino_is_one_line_and_writes_nothing(
        reference: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OMNI_VLA_OPENVINO_DIR": str(tmp_path / "none")}
    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "import", "lerobot",
                          str(reference / "pretrained_model"), "--out", str(tmp_path / "b"), *ARGS,
                          "--delegate", "openvino"], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("omni-vla import:") and "make setup-openvino" in out.stderr
    assert not (tmp_path / "b").exists()


def test_int8_with_the_openvino_delegate_is_refused_in_one_line(reference: Path, tmp_path: Path) -> None:
    res = import_cli(str(reference / "pretrained_model"), "--out", str(tmp_path / "b"), *ARGS,
                     "--delegate", "openvino", "--quantize", "int8")
    assert res.returncode == 2 and "int8 variants are lowered to XNNPACK only" in res.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "b").exists()
