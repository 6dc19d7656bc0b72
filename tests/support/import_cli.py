"""`omni-vla import lerobot ...` as a user runs it: a subprocess, so a refusal's exit code and one-line message are
what is checked, and an import's bundle is what a user would get."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def import_cli(*args: str, timeout: float = 1200.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "import", "lerobot", *args],
                          capture_output=True, text=True, timeout=timeout)


def imported_bundle(reference: Path, joints: list[str], gripper: str) -> Path:
    """The bundle `omni-vla import lerobot` writes beside a LeRobot reference checkpoint (at 10 Hz)."""
    out = reference.parent / "bundle"
    res = import_cli(str(reference / "pretrained_model"), "--out", str(out), "--joint-names", ",".join(joints),
                     "--rate-hz", "10", "--gripper", gripper)
    assert res.returncode == 0, res.stderr[-3000:]
    return out
