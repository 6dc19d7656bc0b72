"""One backend alone in this process, its caches cold at every call, as on a robot where the loop, the simulator or
the camera drivers run between two policy calls.

    python experiments/act_speed/cold_cache.py BUNDLE BACKEND THREADS [REPS] [FLUSH_MB]

Between two timed calls: sleep 30 ms (thread pools asleep, as after a control period) and write FLUSH_MB (default
64, twice the 32 MB L3 of the 2-core EPYC it was written on) of memory, so the weights and activations are evicted. `bench runtime`
interleaves four runtimes in one process (each call evicts the others' weights, and at 2 threads their pools
contend); `gap_sweep.py` runs one alone with warm caches. This is the third case. One JSON line.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omni_vla.runtime.chunk import read_chunk_manifest
from omni_vla_policies.bench_chunk import _runners


def main() -> int:
    if len(sys.argv) < 4 or not sys.argv[3].isdigit():
        sys.exit("usage: cold_cache.py BUNDLE BACKEND THREADS [REPS] [FLUSH_MB] (THREADS a positive integer)")
    bundle, backend, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    flush_mb = int(sys.argv[5]) if len(sys.argv) > 5 else 64
    torch.set_num_threads(threads)
    runners, skipped = _runners(Path(bundle), read_chunk_manifest(Path(bundle)), threads, (backend,))
    if backend not in runners:
        sys.exit(f"{backend}: {skipped.get(backend, 'not in this bundle')}")
    run = runners[backend]
    junk = np.zeros(flush_mb << 18, dtype=np.float32)
    for _ in range(10):
        run()
    times = []
    for i in range(reps):
        time.sleep(0.03)
        junk += 1.0  # read and write every byte: evicts the runtime's weights from L2 and L3
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"bundle": bundle, "backend": backend, "threads": threads, "reps": reps, "flush_mb": flush_mb,
                      "median_ms": round(float(np.median(times)), 3),
                      "p99_ms": round(float(np.percentile(times, 99)), 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
