"""A cache directory built once, whoever asks first: pytest-xdist workers and benchmarks share the venvs and installs
under OMNI_VLA_CACHE, and two processes building one directory at once would remove each other's half-built files."""
from __future__ import annotations

import fcntl
import shutil
from pathlib import Path
from typing import Callable

STAMP = ".omni_vla-ready"


def built_once(directory: Path, stamp: str, build: Callable[[Path], object]) -> Path:
    """`directory`, made by `build` unless its stamp file is there (`stamp` is its text, for a reader: what it was
    built from; callers key the directory's name by it). The build holds an exclusive lock beside the directory, so a
    second caller waits for it and then finds the stamp; a failed build leaves none, and the next caller starts
    afresh."""
    ready = directory / STAMP
    if ready.is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.is_file():
            if directory.exists():
                shutil.rmtree(directory)  # a half-built one: fail loudly rather than build over leftovers
            build(directory)
            ready.write_text(stamp)
    return directory
