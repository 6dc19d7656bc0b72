"""OpenVINO for ExecuTorch's OpenVINO delegate, built once beside the test venv (a fixture, like LeRobot's venv) by
experiments/openvino_delegate/setup_openvino.sh, keyed by that script's hash."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

SETUP = Path(__file__).resolve().parents[2] / "experiments" / "openvino_delegate" / "setup_openvino.sh"
CACHE = Path(os.environ.get("OMNI_VLA_CACHE", Path.home() / ".cache" / "omni_vla"))


def openvino_dir() -> Path:
    """DIR with py/ (export: PYTHONPATH) and libs_t1/, libs_t2/ (run: OPENVINO_LIB_PATH), built when missing."""
    key = hashlib.sha256(SETUP.read_bytes()).hexdigest()[:16]
    root = CACHE / f"openvino-{key}"
    stamp = root / ".omni_vla-ready"
    if not stamp.is_file():
        env = {**os.environ, "VENV": sys.prefix}
        out = subprocess.run(["bash", str(SETUP), str(root)], env=env, capture_output=True, text=True, timeout=1200)
        if out.returncode != 0:
            raise RuntimeError(f"{SETUP.name} failed:\n{out.stderr[-3000:]}")
        stamp.write_text(key)
    return root


def lib(root: Path, threads: int | None) -> str:
    """libopenvino_c.so with plugins.xml at fp32 and `threads` threads, or (None) the wheel's own, with its defaults."""
    d = root / (f"libs_t{threads}" if threads else "py/openvino/libs")
    return str(next(d.glob("libopenvino_c.so.*")))
