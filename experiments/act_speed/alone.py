"""One backend of a chunk bundle timed alone in its own process (no other runtime's thread pool in the process):
what a second thread gives each runtime without the interleaved run's cross-talk.

    python experiments/act_speed/alone.py BACKEND THREADS BUNDLE   # BACKEND: torch|onnxruntime|executorch|mnn
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from omni_vla.runtime.chunk import read_chunk_manifest
from omni_vla_policies.bench_chunk import _runners


def main() -> None:
    backend, threads, bundle = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    runners, skipped = _runners(bundle, read_chunk_manifest(bundle), threads, (backend,))
    if backend not in runners:
        raise SystemExit(f"{backend}: {skipped.get(backend)}")
    run = runners[backend]
    for _ in range(10):
        run()
    t = []
    for _ in range(60):
        t0 = time.perf_counter()
        run()
        t.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"bundle": str(bundle), "backend": backend, "threads": threads,
                      "median_ms": round(float(np.median(t)), 2), "loadavg": os.getloadavg()}))


if __name__ == "__main__":
    main()
