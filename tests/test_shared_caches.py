"""The caches that test workers and benchmarks share (LeRobot's venvs, OpenVINO, the wire packages) are built once
even when two processes ask at the same moment, and a failed build is retried rather than trusted."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from built_once import STAMP, built_once

SUPPORT = Path(__file__).resolve().parent / "support"
BUILDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {support!r})
from built_once import built_once

def build(d: Path) -> None:
    with open({log!r}, "a") as log:
        log.write("start\\n")
    d.mkdir()
    time.sleep(1.0)
    (d / "half").write_text("built")
    with open({log!r}, "a") as log:
        log.write("end\\n")

print(built_once(Path({target!r}), "v1", build))
"""


def test_two_processes_asking_at_once_get_one_build_and_both_see_it_whole(tmp_path: Path) -> None:
    target, log = tmp_path / "venv", tmp_path / "log"
    code = BUILDER.format(support=str(SUPPORT), log=str(log), target=str(target))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [str(target)] * 2
    assert log.read_text().split() == ["start", "end"], "built twice, or the second removed the first's files"
    assert (target / "half").read_text() == "built" and (target / STAMP).read_text() == "v1"


def test_a_failed_build_leaves_no_stamp_and_the_next_caller_starts_afresh(tmp_path: Path) -> None:
    target = tmp_path / "venv"

    def broken(d: Path) -> None:
        d.mkdir()
        (d / "partial").write_text("x")
        raise RuntimeError("pip failed")

    with pytest.raises(RuntimeError, match="pip failed"):
        built_once(target, "v1", broken)
    assert not (target / STAMP).exists()
    built_once(target, "v1", lambda d: d.mkdir())
    assert (target / STAMP).is_file() and not (target / "partial").exists()


def test_a_ready_directory_is_not_built_again(tmp_path: Path) -> None:
    target = built_once(tmp_path / "venv", "v1", lambda d: d.mkdir())

    def must_not_run(d: Path) -> None:
        raise AssertionError("rebuilt a ready directory")

    assert built_once(target, "v1", must_not_run) == target
