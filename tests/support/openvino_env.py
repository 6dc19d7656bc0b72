"""OpenVINO for ExecuTorch's OpenVINO delegate, built once beside the test venv (a fixture, like LeRobot's venv) by
omni_vla_policies.vla.openvino_delegate.setup_openvino, keyed by its recipe (setup_key)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from omni_vla_policies.vla.openvino_delegate import setup_key, setup_openvino

CACHE = Path(os.environ.get("OMNI_VLA_CACHE", Path.home() / ".cache" / "omni_vla"))


def openvino_dir() -> Path:
    """DIR with py/ (export: PYTHONPATH) and libs_t1/, libs_t2/ (run: OPENVINO_LIB_PATH), built when missing."""
    key = setup_key()
    root = CACHE / f"openvino-{key}"
    stamp = root / ".omni_vla-ready"
    if not stamp.is_file():
        setup_openvino(root, python=sys.executable)
        stamp.write_text(key)
    return root


def lib(root: Path, threads: int | None) -> str:
    """libopenvino_c.so with plugins.xml at fp32 and `threads` threads, or (None) the wheel's own, with its defaults."""
    d = root / (f"libs_t{threads}" if threads else "py/openvino/libs")
    return str(next(d.glob("libopenvino_c.so.*")))
