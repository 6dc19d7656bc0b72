"""ExecuTorch float32 against float16 programs (`export --executorch-dtype float16`), interleaved in one process.

    python experiments/runtime_limits/et_fp16_ab.py THREADS REPS bundles/reference <float16 bundle>

Whole inference (prefix + 10 steps) and the prefix alone on the same inputs, median and p99 ms per bundle.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from omni_vla.runtime.bundle import read_manifest
from omni_vla.runtime.executorch import ExecuTorchRuntime


def main(threads: int, reps: int, dirs: list[str]) -> dict:
    rts = [ExecuTorchRuntime(d, num_threads=threads) for d in dirs]
    rng = np.random.default_rng(0)
    x = {n: rng.random(s).astype(np.float32) for n, s in rts[0]._shapes.items()}
    out = np.zeros((rts[0].horizon, rts[0].action_dim), np.float32)
    full: list[list[float]] = [[] for _ in rts]
    pre: list[list[float]] = [[] for _ in rts]
    for i in range(reps):
        for j in (range(len(rts)) if i % 2 else reversed(range(len(rts)))):
            t0 = time.perf_counter()
            rts[j].infer({"front": x["front"], "wrist": x["wrist"]}, x["state"], x["instruction"], x["prefix"], i % 3, x["noise"], out)
            t1 = time.perf_counter()
            rts[j].run_prefix()
            full[j].append((t1 - t0) * 1e3)
            pre[j].append((time.perf_counter() - t1) * 1e3)
    res: dict = {"threads": threads, "reps": reps}
    for d, f, p in zip(dirs, full, pre):
        res[d] = {"compute_dtype": read_manifest(d).compute_dtype("executorch"), "median_ms": round(float(np.median(f)), 3),
                  "p99_ms": round(float(np.percentile(f, 99)), 3), "prefix_median_ms": round(float(np.median(p)), 3)}
    res["speedup_second_vs_first"] = round(res[dirs[0]]["median_ms"] / res[dirs[1]]["median_ms"], 3)
    return res


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])))
