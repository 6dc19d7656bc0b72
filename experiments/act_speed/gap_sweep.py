"""Median ms of a chunk bundle per backend, at 1 and 2 threads, against the sleep between two calls.

    python experiments/act_speed/gap_sweep.py BUNDLE BACKENDS [GAPS_MS] [REPS] > out.jsonl

BACKENDS is a comma list run interleaved in one process (policies/bench_chunk.py, the code behind `omni-vla bench
runtime`), or one backend alone; GAPS_MS (default 0,2,30) the sleeps tried. One JSON line per (gap, threads).
"""
from __future__ import annotations

import json
import sys

from omni_vla_policies.bench_chunk import bench_chunk


def main() -> int:
    bundle, backends = sys.argv[1], tuple(sys.argv[2].split(","))
    gaps = [float(g) for g in (sys.argv[3] if len(sys.argv) > 3 else "0,2,30").split(",")]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 60
    for gap in gaps:
        for threads in (1, 2):
            r = bench_chunk(bundle, threads, reps, 10, backends=backends, gap_ms=gap)
            print(json.dumps({"gap_ms": gap, "threads": threads, "backends_run": list(backends),
                              "median_ms": {k: v["median_ms"] for k, v in r["backends"].items()},
                              "p99_ms": {k: v["p99_ms"] for k, v in r["backends"].items()}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
