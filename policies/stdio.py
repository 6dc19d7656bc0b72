"""Keep fd 1 clean for --json output while native libraries (MNN, XNNPACK) print to it."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def stdout_to_stderr() -> Iterator[object]:
    """Native libraries (MNN, XNNPACK) print to fd 1; keep it clean for --json. Yields the real stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    real = os.fdopen(os.dup(saved), "w")
    try:
        yield real
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        real.close()
