"""ExecuTorch's OpenVINO delegate (policies/vla/openvino_delegate.py): SmolVLA's stages lowered to it run through the
ExecuTorch runtime the robot uses, at fp32 parity once plugins.xml sets the CPU plugin's precision; without it, a
bf16-capable CPU runs them in bf16 (the reason the setup writes plugins.xml). Test size (smolvla_config.tiny)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openvino_env import lib, openvino_dir

from omni_vla_policies.vla.export_vla import build, export_stages
from omni_vla_policies.vla.smolvla_config import tiny

FP32_DB = 80.0  # bf16 arithmetic cannot reach this; f32 gives > 100 dB


def _cpu_has_bf16() -> bool:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return "avx512_bf16" in flags or "amx_bf16" in flags


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(OpenVINO dir, XNNPACK + ONNX stages, OpenVINO-delegated stages), the same seeded weights."""
    ov = openvino_dir()
    xnn, ovd = tmp_path_factory.mktemp("xnn"), tmp_path_factory.mktemp("ov")
    export_stages(build(tiny()), xnn, ("onnx", "executorch"), log=lambda _s: None)
    out = subprocess.run([sys.executable, "-m", "omni_vla_policies.vla.export_vla", str(ovd), "--size", "tiny",
                          "--backends", "executorch", "--delegate", "openvino", "--stages", "vision,prefix,step"],
                         env={**os.environ, "PYTHONPATH": str(ov / "py")}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return ov, xnn, ovd


def _bench(dirs: tuple[Path, Path, Path], openvino_lib: str) -> dict:
    ov, xnn, ovd = dirs
    out = subprocess.run([sys.executable, "-m", "omni_vla_policies.vla.bench_openvino", str(ovd), "--xnnpack", str(xnn),
                          "--size", "tiny"], env={**os.environ, "OPENVINO_LIB_PATH": openvino_lib}, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_openvino_delegated_stages_match_eager_at_fp32_through_plugins_xml(dirs: tuple[Path, Path, Path]) -> None:
    r = _bench(dirs, lib(dirs[0], 1))
    assert r["openvino_cpu_defaults"] == {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": "1"}
    snr = {s: min(v["snr_db_vs_eager"]["executorch_openvino"]) for s, v in r["stages"].items()}
    assert set(snr) == {"vision", "prefix", "step"} and min(snr.values()) >= FP32_DB, snr


@pytest.mark.skipif(not _cpu_has_bf16(), reason="the CPU plugin defaults to f32 on CPUs without bf16 arithmetic")
def test_without_plugins_xml_a_bf16_cpu_runs_the_delegate_below_fp32_parity(dirs: tuple[Path, Path, Path]) -> None:
    r = _bench(dirs, lib(dirs[0], None))
    snr = {s: min(v["snr_db_vs_eager"]["executorch_openvino"]) for s, v in r["stages"].items()}
    assert min(snr.values()) < FP32_DB, snr


def test_export_refuses_the_openvino_delegate_with_other_backends_in_one_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "omni_vla_policies.vla.export_vla", str(tmp_path / "o"), "--size",
                          "tiny", "--backends", "onnx,executorch", "--delegate", "openvino"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("--delegate openvino: expected --backends executorch")


def test_export_without_openvino_installed_refuses_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv alone: no openvino, no nncf
    env["OMNI_VLA_OPENVINO_DIR"] = str(tmp_path / "none")  # and no set-up where the export looks for one
    out = subprocess.run([sys.executable, "-m", "omni_vla_policies.vla.export_vla", str(tmp_path / "o"), "--size",
                          "tiny", "--backends", "executorch", "--delegate", "openvino"],
                         env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in out.stderr.splitlines() if "OpenVINO delegate" in ln]
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert len(lines) == 1 and "make setup-openvino" in lines[0], out.stderr[-2000:]
    assert not (tmp_path / "o").exists()
