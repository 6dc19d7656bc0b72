"""Outputs that are whole or absent: output folders removed again when a verb fails; native banners kept off fd 1."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def output_dir(path: Path) -> Iterator[Path]:
    """Create `path` (and missing parents); if the block fails, remove the folders it created that are still empty.

    A failed run must not leave an empty output folder that looks like a result.
    """
    path = Path(path)
    created: list[Path] = []
    p = path.absolute()
    while not p.exists():
        created.append(p)
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for folder in created:  # deepest first
            try:
                folder.rmdir()
            except OSError:  # not empty (partial results kept for inspection) or already gone
                break
        raise


@contextlib.contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """fd 1 to /dev/null meanwhile: native libraries (MNN) print banners there while a bundle loads."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
