"""Outputs that are whole or absent: atomic files, output folders removed again when a verb fails."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to a temporary name in the same directory, then rename: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
