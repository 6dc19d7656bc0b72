"""benchmarks/aarch64/parity.py: what `make aarch64` runs on the other CPU, driven here on x86 where it can be checked."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_bundles import tiny_bundle

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "aarch64" / "parity.py"
# What the arm64 root lacks: a runtime whose Python package does not import (ExecuTorch there: torch has no CPU wheel).
WITHOUT_EXECUTORCH = "import runpy, sys; sys.modules['executorch'] = None; sys.argv = sys.argv[1:]; " \
                     "runpy.run_path(sys.argv[0], run_name='__main__')"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    bundle = tiny_bundle(tmp_path_factory, ("mnn", "executorch"))
    ref = tmp_path_factory.mktemp("aarch64") / "ref.npz"
    res = subprocess.run([sys.executable, str(SCRIPT), "record", "--bundle", str(bundle), "--out", str(ref), "--n", "3"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    return bundle, ref


def test_the_same_machine_reproduces_each_runtime_it_recorded(recorded: tuple[Path, Path]) -> None:
    bundle, ref = recorded
    res = subprocess.run([sys.executable, str(SCRIPT), "check", "--bundle", str(bundle), "--ref", str(ref)],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    for backend in ("mnn", "executorch"):
        assert report[backend]["bitwise_equal_to_x86"] is True, report[backend]
        assert report[backend]["snr_db_vs_eager_x86"] > 40.0


def test_a_runtime_that_does_not_import_is_reported_skipped_and_the_others_still_checked(
        recorded: tuple[Path, Path]) -> None:
    bundle, ref = recorded
    res = subprocess.run([sys.executable, "-c", WITHOUT_EXECUTORCH, str(SCRIPT), "check", "--bundle", str(bundle),
                          "--ref", str(ref)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert "not installed" in report["executorch"]["skipped"], report["executorch"]
    assert report["mnn"]["bitwise_equal_to_x86"] is True
