"""OpenVINO for ExecuTorch's OpenVINO delegate, installed once beside the test venv (a fixture, like LeRobot's venv) by
omni_vla_policies.vla.openvino_delegate.setup_openvino, keyed by its recipe (setup_key)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from built_once import built_once
from omni_vla.runtime.openvino import configured_library, installed_libs
from omni_vla_policies.vla.openvino_delegate import setup_key, setup_openvino

CACHE = Path(os.environ.get("OMNI_VLA_CACHE", Path.home() / ".cache" / "omni_vla"))


def openvino_dir() -> Path:
    """DIR with py/ (the export's openvino and nncf, and the runtime's libraries), installed when missing."""
    key = setup_key()
    return built_once(CACHE / f"openvino-{key}", key, lambda root: setup_openvino(root, python=sys.executable))


def lib(root: Path, threads: int | None) -> str:
    """libopenvino_c.so as the robot runtime configures it (f32, `threads` threads), or (None) the wheel's own, with
    the CPU plugin's defaults."""
    if threads is None:
        return str(next(installed_libs(root).glob("libopenvino_c.so.*")))
    return str(configured_library(root, "f32", threads))
